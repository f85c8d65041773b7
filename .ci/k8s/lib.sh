# shellcheck shell=bash disable=SC2034
# Shared by up.sh, down.sh and kubelet.sh (sourced, not run): where the test
# cluster keeps its state, its loopback ports, and the helpers that start,
# find, wait for and stop its processes. Every process is recorded by pid file
# in $K/run and logs to $K/logs/NAME.log; nothing is ever found by name alone.
#
# Layout of $K (SWETUI_K8S_DIR, default ${TMPDIR:-/tmp}/swetui-k8s):
#   bin/                    kube-apiserver, kube-scheduler, kubelet (build.sh)
#   images/                 build contexts of the pause and busybox images
#   pki/                    throwaway CA and every certificate and key
#   conf/                   component configs and the internal kubeconfigs
#   etcd-data/ containerd/ kubelet/ pod-logs/ registry/ cni/   runtime state
#   run/                    NAME.pid, containerd.sock, the kubelet's wrapper
#   logs/                   NAME.log
#   admin.kubeconfig        system:masters (for people and up.sh)
#   runner.kubeconfig       swetui-runner, the least-privilege identity
#   env                     written last, once a smoke pod has Succeeded
#
# Knobs: SWETUI_K8S_DIR, SWETUI_K8S_REGISTRY_PORT (5050), SWETUI_K8S_TIMEOUT
# (seconds to wait for each component, 120), SWETUI_K8S_NICE (0; the pods
# inherit containerd's nice level).

K=${SWETUI_K8S_DIR:-${TMPDIR:-/tmp}/swetui-k8s}
K8S_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

NODE=localhost            # the node's name is also its Hostname address, which resolves to 127.0.0.1
NAMESPACE=swetui
ETCD_PORT=23790 ETCD_PEER_PORT=23800
API_PORT=16443
SCHEDULER_PORT=10359      # healthz and metrics only
KUBELET_PORT=10350 KUBELET_HEALTHZ_PORT=10348
REGISTRY_PORT=${SWETUI_K8S_REGISTRY_PORT:-5050}
REGISTRY=127.0.0.1:$REGISTRY_PORT
# Built locally with docker (no image registry is reachable from CI).
PAUSE_IMAGE=docker.io/swetui-k8s/pause:3.10         # imported into containerd (the sandbox image)
BUSYBOX_IMAGE=docker.io/swetui-k8s/busybox:1.35     # pushed to the loopback registry as:
SMOKE_IMAGE=$REGISTRY/swetui-k8s/busybox:1.35
TIMEOUT=${SWETUI_K8S_TIMEOUT:-120}
NICE=${SWETUI_K8S_NICE:-0}
CTR=(ctr -a "$K/run/containerd.sock" -n k8s.io)

T0=$(date +%s%N)
log() {
  local ms=$((($(date +%s%N) - T0) / 1000000))
  printf '[k8s %3d.%01ds] %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$*"
}
# fail NAME MESSAGE: the error, then the tail of NAME's log (when NAME is given)
fail() {
  log "ERROR: $2" >&2
  if [ -n "$1" ] && [ -s "$K/logs/$1.log" ]; then
    echo "---- last 40 lines of $K/logs/$1.log ----" >&2
    tail -n 40 "$K/logs/$1.log" >&2
    echo "----" >&2
  fi
  exit 1
}

# lock: one of up.sh / down.sh / kubelet.sh at a time. The daemons never hold
# the lock's descriptor: start closes it for them.
lock() {
  mkdir -p "$K"
  exec 9>"$K/.lock"
  if ! flock -w 600 9; then
    log "another up.sh/down.sh/kubelet.sh still holds $K/.lock after 600s; going on" >&2
  fi
}

# The program each pid file must point at (with $K/ somewhere in its command
# line), so a recycled pid is never mistaken for ours.
binary_of() {
  case $1 in
    registry) echo docker-registry ;;
    *) echo "$1" ;;
  esac
}

# running NAME: NAME's pid file points at a live process of ours.
running() {
  local f=$K/run/$1.pid p cmd
  [ -f "$f" ] || return 1
  p=$(cat "$f")
  [ -n "$p" ] && [ -r "/proc/$p/cmdline" ] || return 1
  cmd=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) || return 1
  [[ "$cmd" == *"$(binary_of "$1")"* && "$cmd" == *"$K/"* ]]
}

# ports_free NAME PORT...: fails clearly when something else listens there
# (after 5 s: a process that has just been stopped may still be closing them).
ports_free() {
  local name=$1 p who
  shift
  for p in "$@"; do
    for _ in $(seq 1 50); do
      who=$(ss -Hltnp "sport = :$p" 2>/dev/null)
      [ -n "$who" ] || break
      sleep 0.1
    done
    [ -z "$who" ] || fail "" "cannot start $name: port $p is already taken: $who"
  done
}

# start NAME CMD...: runs CMD in the background in its own session, with its
# output appended to $K/logs/NAME.log, and records its pid (setsid and nice
# exec, so the pid is the server's own). The cluster is no longer known to be
# up, so the env file goes.
start() {
  local name=$1
  shift
  rm -f "$K/env"
  echo "== $(date -Is) starting: $*" >>"$K/logs/$name.log"
  setsid nice -n "$NICE" "$@" >>"$K/logs/$name.log" 2>&1 </dev/null 9>&- &
  echo $! >"$K/run/$name.pid"
}

# alive PID: the process exists and is not a zombie (our daemons are orphans,
# and init may take a second or two to reap them).
alive() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  [ "${s%% *}" != Z ]
}

# stop_pid NAME [SECONDS]: TERM, up to SECONDS (10) for it to exit, then
# KILL; only the process in NAME's pid file.
stop_pid() {
  local f=$K/run/$1.pid p
  [ -f "$f" ] || return 0
  p=$(cat "$f")
  if running "$1"; then
    kill -TERM "$p" 2>/dev/null || true
    for _ in $(seq 1 $((${2:-10} * 10))); do
      alive "$p" || break
      sleep 0.1
    done
    if alive "$p"; then
      kill -KILL "$p" 2>/dev/null || true
      sleep 0.2
    fi
    log "stopped $1 (pid $p)"
  fi
  rm -f "$f"
}

# wait_for NAME WHAT CMD...: until CMD succeeds. Fails with NAME's log when
# NAME's process exits meanwhile or after $TIMEOUT seconds.
wait_for() {
  local name=$1 what=$2 end=$((SECONDS + TIMEOUT))
  shift 2
  until "$@" >/dev/null 2>&1; do
    if [ -n "$name" ] && ! running "$name"; then
      fail "$name" "$name exited while waiting for $what"
    fi
    [ $SECONDS -lt $end ] || fail "$name" "timed out after ${TIMEOUT}s waiting for $what"
    sleep 0.2
  done
}

# kapi IDENTITY PATH [CURL ARGS...]: the apiserver's REST API as admin or
# runner (client certificates in pki/). Prints the body; fails on HTTP errors
# (printing the Status body too).
kapi() {
  local who=$1 path=$2
  shift 2
  curl -sS --fail-with-body --max-time 30 --cacert "$K/pki/ca.crt" --cert "$K/pki/$who.crt" --key "$K/pki/$who.key" \
    "https://127.0.0.1:$API_PORT$path" "$@"
}

# ---------------------------------------------------------------- kubelet
# The kubelet is started the same way by up.sh and by `kubelet.sh start`.
#
# It runs in a private mount namespace whose copies of the host-wide sysctls it
# would otherwise rewrite (vm.overcommit_memory, vm.panic_on_oom, kernel.panic,
# kernel.panic_on_oops) are bind-mounted files that already hold the values it
# wants. /proc is made private in there first so those mounts never reach the
# host. $K/kubelet is a shared bind mount, so the volume mounts the kubelet
# makes there still reach containerd in the host namespace.
start_kubelet() {
  mkdir -p "$K/kubelet" "$K/run/sysctl"
  mountpoint -q "$K/kubelet" || mount --bind "$K/kubelet" "$K/kubelet"
  mount --make-shared "$K/kubelet"
  cat >"$K/run/kubelet-ns.sh" <<EOF
#!/bin/sh
# Written by .ci/k8s/lib.sh: runs inside \`unshare -m\`, then execs the kubelet.
set -e
mount --make-rprivate /proc
for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1; do
  k=\${kv%=*} v=\${kv#*=}
  if [ "\$(cat /proc/sys/\$k)" != "\$v" ]; then
    f=$K/run/sysctl/\$(echo \$k | tr / .)
    echo \$v >\$f
    mount --bind \$f /proc/sys/\$k
  fi
done
exec "\$@"
EOF
  chmod +x "$K/run/kubelet-ns.sh"
  ports_free kubelet "$KUBELET_PORT" "$KUBELET_HEALTHZ_PORT"
  date +%s >"$K/run/kubelet.since"
  start kubelet unshare -m --propagation unchanged "$K/run/kubelet-ns.sh" \
    "$K/bin/kubelet" --config="$K/conf/kubelet-config.yaml" --kubeconfig="$K/conf/kubelet.kubeconfig" \
    --root-dir="$K/kubelet" --cert-dir="$K/kubelet/pki" --hostname-override="$NODE" --v=1
}

# node_ready: the node is Ready, by a heartbeat from the running kubelet (a
# Node object kept in etcd, or one left by a stopped kubelet, may still say
# Ready: no controller-manager marks it otherwise), and the kubelet answers.
node_ready() {
  local since st hb
  since=$(cat "$K/run/kubelet.since" 2>/dev/null) || return 1
  read -r st hb < <(kapi admin "/api/v1/nodes/$NODE" 2>/dev/null | python3 -c '
import json, sys
for c in json.load(sys.stdin)["status"]["conditions"]:
    if c["type"] == "Ready":
        print(c["status"], c["lastHeartbeatTime"])') || return 1
  [ "$st" = True ] && [ "$(date -d "$hb" +%s)" -ge "$since" ] &&
    curl -sf --max-time 5 "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz" >/dev/null
}

# kubelet_synced: the kubelet knows every pod the API has bound to the node and
# not yet finished (a kubelet that has just restarted is Ready a moment before
# that, and meanwhile answers exec and logs of those pods with "not found").
kubelet_synced() {
  local bound known
  bound=$(kapi admin "/api/v1/pods?fieldSelector=spec.nodeName=$NODE") || return 1
  known=$(curl -sfk --max-time 5 --cert "$K/pki/admin.crt" --key "$K/pki/admin.key" "https://127.0.0.1:$KUBELET_PORT/pods") || return 1
  BOUND=$bound KNOWN=$known python3 -c '
import json, os
names = lambda d: {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in d.get("items") or []}
bound = json.loads(os.environ["BOUND"])
bound["items"] = [p for p in bound.get("items") or [] if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
raise SystemExit(0 if names(bound) <= names(json.loads(os.environ["KNOWN"])) else 1)'
}

wait_node_ready() {
  wait_for kubelet "node $NODE to be Ready with a fresh heartbeat" node_ready
  wait_for kubelet "the kubelet to know the node's pods" kubelet_synced
}
