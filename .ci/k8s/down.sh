#!/usr/bin/env bash
# down.sh: stops the test cluster that up.sh started, by pid file only, and
# cleans up after it: the pods' containers and shims of our containerd, every
# mount under $K, and the empty kubepods cgroups our kubelet made.
#
#   down.sh          stop; keep the state (a later up.sh restarts on the same
#                    etcd data, though pods that were running come back as
#                    ContainerStatusUnknown)
#   down.sh --purge  stop and delete the runtime state: etcd data, containerd's
#                    root, kubelet dir, registry contents, certificates,
#                    kubeconfigs, logs. Keeps bin/, the image build contexts
#                    and the images in Docker.
#
# Safe to run when nothing (or only part) is up.
set -uo pipefail
# shellcheck source=.ci/k8s/lib.sh
. "$(dirname "$0")/lib.sh"
purge=false
case "${1:-}" in
  --purge) purge=true ;;
  "") ;;
  *)
    echo "usage: $0 [--purge]" >&2
    exit 2
    ;;
esac
[ -d "$K" ] || exit 0
lock

rm -f "$K/env" # the cluster is going away

# No more scheduling, then no more pod starts.
stop_pid kube-scheduler
stop_pid kubelet

# The pods' containers live in containerd-shim processes that outlive
# containerd: kill and remove them through containerd first.
if running containerd && "${CTR[@]}" version >/dev/null 2>&1; then
  for t in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks kill -s KILL "$t" >/dev/null 2>&1; done
  sleep 0.5
  for t in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks delete -f "$t" >/dev/null 2>&1; done
  for c in $("${CTR[@]}" containers ls -q 2>/dev/null); do "${CTR[@]}" containers delete "$c" >/dev/null 2>&1; done
fi
stop_pid containerd
# Any shim still left (containerd died first, say): its pid file is in our state dir.
for f in "$K"/containerd/state/io.containerd.runtime.v2.task/*/*/shim.pid; do
  [ -f "$f" ] || continue
  p=$(cat "$f")
  if [ -n "$p" ] && [[ "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" == *containerd-shim*"$K/"* ]]; then
    kill -KILL "$p" 2>/dev/null && log "killed leftover shim $p"
  fi
done

# The apiserver stops listening at once on TERM, then spends a minute
# winding down its watch caches: nothing is lost by not waiting for that.
stop_pid kube-apiserver 2
stop_pid etcd
stop_pid registry
rm -f "$K/run/kubelet.since"

# Unmount everything under $K (container rootfs, netns, kubelet volumes and the
# kubelet dir's own bind mount), deepest first.
for _ in 1 2 3; do
  mps=$(awk -v k="$K/" '{ if (index($5, k) == 1 || $5 == substr(k, 1, length(k) - 1)) print $5 }' /proc/self/mountinfo | sort -r)
  [ -n "$mps" ] || break
  for m in $mps; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
done

# The cgroups our kubelet and runc made (empty now that all of the above is
# stopped), in every hierarchy, deepest first.
for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
  [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
done
left=$(ls -d /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods 2>/dev/null)
[ -z "$left" ] || log "warning: cgroups still left (busy): $left" >&2

if $purge; then
  if awk -v k="$K/" 'index($5, k) == 1 {f=1} END {exit !f}' /proc/self/mountinfo; then
    log "something is still mounted under $K: not purging" >&2
    exit 1
  fi
  rm -rf --one-file-system "$K"/{etcd-data,containerd,kubelet,pod-logs,registry,cni,pki,conf,logs,run} \
    "$K"/{admin,runner}.kubeconfig "$K"/env.tmp
  log "purged the runtime state in $K (kept bin/ and images/)"
fi
exit 0
