#!/usr/bin/env bash
# kubelet.sh stop|start|status: cuts the test cluster's node off and brings it
# back, for tests of what the runner does when a node goes away mid-evaluation.
#
#   stop    stops only the kubelet (by its pid file). Its pods keep running
#           under containerd but nothing reports on them any more: the node's
#           Lease and Ready heartbeat go stale, though with no
#           controller-manager the node still says Ready.
#   start   starts the kubelet again with the same flags as up.sh, and waits
#           until the node is Ready with a heartbeat from the new kubelet.
#   status  prints running or stopped.
#
# The env file is left alone: the cluster is still "up" in between.
set -euo pipefail
# shellcheck source=.ci/k8s/lib.sh
. "$(dirname "$0")/lib.sh"

case "${1:-}" in
  stop)
    lock
    if running kubelet; then
      stop_pid kubelet
    else
      log "kubelet not running"
    fi
    ;;
  start)
    lock
    for c in containerd kube-apiserver; do
      running "$c" || fail "" "$c is not running: bring the cluster up with .ci/k8s/up.sh"
    done
    [ -f "$K/conf/kubelet-config.yaml" ] || fail "" "no kubelet config in $K/conf: run .ci/k8s/up.sh"
    # start() drops the env file (the cluster is not known to be up while a
    # component starts); the cluster was up before the kubelet went, so it
    # comes back once the node is Ready again.
    saved=""
    [ -f "$K/env" ] && saved=$(cat "$K/env")
    if running kubelet; then
      log "kubelet already running"
    else
      log "starting kubelet"
      start_kubelet
    fi
    wait_node_ready
    if [ -n "$saved" ]; then
      printf '%s\n' "$saved" >"$K/env.tmp" && mv "$K/env.tmp" "$K/env"
    fi
    log "node $NODE Ready"
    ;;
  status)
    if running kubelet; then echo running; else echo stopped; fi
    ;;
  *)
    echo "usage: $0 stop|start|status" >&2
    exit 2
    ;;
esac
