#!/usr/bin/env bash
# up.sh: brings up swetui's single-node Kubernetes test cluster on loopback.
#
#   etcd            127.0.0.1:23790 (peer 23800), plain http
#   kube-apiserver  127.0.0.1:16443, Node+RBAC authorization
#   kube-scheduler  healthz 127.0.0.1:10359, own client cert, no leader election
#   containerd      own instance: socket, root and state under $K
#   kubelet         node "localhost", 127.0.0.1:10350 (healthz 10348)
#   registry        Debian's docker-registry, plain http on 127.0.0.1:5050,
#                   which containerd pulls 127.0.0.1:5050/... images from
#
# plus namespace swetui, its default ServiceAccount and the least-privilege
# identity swetui-runner ($K/runner.kubeconfig). No controller-manager runs: a
# deleted namespace stays Terminating, nothing garbage-collects pods, no
# ResourceQuota usage is ever released, and a node whose kubelet stopped still
# says Ready (its heartbeat and Lease just go stale).
#
# Idempotent: a component already running (per its pid file) is left alone;
# when everything runs and the env file is there, it only checks the node.
# $K/env is written last, once the node is Ready and a smoke pod pulled from
# the registry and bound by the scheduler has Succeeded: the Go tests read it to
# know the cluster is up. State and knobs: see lib.sh. Stop: down.sh.
#
# Works around what this CI machine and the missing controller-manager need
# (all measured): a CNI that gives pods a dead-end eth0 (the kernel has no
# `dummy` links for loopback-only pods and containerd insists on an eth0 with
# an address), containerd's restrict_oom_score_adj (no CAP_SYS_RESOURCE here),
# kubelet flags for a cgroup v1 host, and no TaintNodesByCondition admission.
# Needs root and a running Docker Engine (it builds and pushes the images);
# installs the Debian packages it lacks.
set -euo pipefail
# shellcheck source=.ci/k8s/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=.ci/progress.sh
. "$K8S_HERE/../progress.sh"
lock

# ---------------------------------------------------------------- already up?
all_running() {
  local c
  for c in registry etcd kube-apiserver kube-scheduler containerd kubelet; do running "$c" || return 1; done
}
if all_running && [ -f "$K/env" ] && node_ready; then
  log "already up ($K/env); nothing to do (down.sh first to rebuild or reconfigure)"
  exit 0
fi

# ---------------------------------------------------------------- Debian packages
need=()
command -v etcd >/dev/null || need+=(etcd-server)
command -v etcdctl >/dev/null || need+=(etcd-client)
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/loopback ] || need+=(containernetworking-plugins)
[ -x /bin/busybox ] && dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
command -v docker-registry >/dev/null || need+=(docker-registry)
command -v openssl >/dev/null || need+=(openssl)
command -v curl >/dev/null || need+=(curl)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v python3 >/dev/null || need+=(python3)
command -v ss >/dev/null || need+=(iproute2)
mkdir -p "$K"/{bin,conf,run,logs,images/pause,images/busybox,cni/bin,cni/net.d,containerd,kubelet,pod-logs,registry}
if [ ${#need[@]} -gt 0 ]; then
  log "apt-get install ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  progress apt-get "" sh -c 'log=$1; shift; { apt-get update -qq && apt-get install -y -qq "$@"; } >>"$log" 2>&1' \
    sh "$K/logs/apt.log" "${need[@]}" || fail apt "apt-get install ${need[*]} failed"
fi

# ---------------------------------------------------------------- binaries
# A no-op when bin/ is current; a cold build takes minutes (progress lines).
log "build.sh (kube-apiserver, kube-scheduler, kubelet)"
progress "k8s build" "$K/logs/build.log" bash -c 'bash "$0" >>"$1" 2>&1' "$K8S_HERE/build.sh" "$K/logs/build.log" ||
  fail build "build.sh failed"
for b in kube-apiserver kube-scheduler kubelet; do
  [ -x "$K/bin/$b" ] || fail build "build.sh left no $K/bin/$b"
done

# ---------------------------------------------------------------- certificates
# A throwaway CA, made once per purge. Client certificates carry the identity
# in CN (user) and O (groups).
if [ ! -f "$K/pki/done" ]; then
  log "generating certificates"
  mkdir -p "$K/pki"
  set +e
  (
    set -e
    exec 2>>"$K/logs/pki.log"
    cd "$K/pki"
    openssl genrsa -out ca.key 2048
    openssl req -x509 -new -nodes -key ca.key -subj "/CN=swetui-k8s-ca" -days 3650 -out ca.crt
    mk() { # NAME CN O [SAN]: with a SAN, a server and client certificate; else client only
      local n=$1 cn=$2 o=$3 san=${4:-}
      openssl genrsa -out "$n.key" 2048
      openssl req -new -key "$n.key" -subj "/CN=$cn${o:+/O=$o}" -out "$n.csr"
      {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        if [ -n "$san" ]; then
          echo "extendedKeyUsage=serverAuth,clientAuth"
          echo "subjectAltName=$san"
        else
          echo "extendedKeyUsage=clientAuth"
        fi
      } >"$n.ext"
      openssl x509 -req -in "$n.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile "$n.ext" -out "$n.crt"
      rm -f "$n.csr" "$n.ext"
    }
    mk apiserver kube-apiserver "" "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:10.0.0.1"
    mk apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
    mk admin admin system:masters
    mk kube-scheduler system:kube-scheduler ""
    mk kubelet "system:node:$NODE" system:nodes
    mk runner swetui-runner ""
    openssl genrsa -out sa.key 2048
    openssl rsa -in sa.key -pubout -out sa.pub
    chmod 600 ./*.key
    touch "done"
  )
  rc=$?
  set -e
  [ $rc = 0 ] || fail pki "certificate generation failed"
fi

# kubeconfig FILE CONTEXT USER CERT [NAMESPACE]: certificates embedded, so the
# file stands alone.
kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: swetui-test
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 "$K/pki/ca.crt")
users:
- name: $3
  user:
    client-certificate-data: $(base64 -w0 "$K/pki/$4.crt")
    client-key-data: $(base64 -w0 "$K/pki/$4.key")
contexts:
- name: $2
  context:
    cluster: swetui-test
    user: $3${5:+
    namespace: $5}
current-context: $2
EOF
  chmod 600 "$1"
}
kubeconfig "$K/admin.kubeconfig" swetui-test-admin admin admin
kubeconfig "$K/runner.kubeconfig" swetui-test swetui-runner runner "$NAMESPACE"
kubeconfig "$K/conf/kube-scheduler.kubeconfig" swetui-test system:kube-scheduler kube-scheduler
kubeconfig "$K/conf/kubelet.kubeconfig" swetui-test "system:node:$NODE" kubelet

# ---------------------------------------------------------------- registry
# The CNCF distribution registry, plain http on loopback, no auth, storage in
# $K/registry. Docker treats 127.0.0.0/8 as insecure, so `docker push
# 127.0.0.1:5050/x` works; containerd is told below to pull from it over http.
cat >"$K/conf/registry.yml" <<EOF
version: 0.1
log:
  level: warn
  accesslog: {disabled: true}
storage:
  filesystem: {rootdirectory: $K/registry}
  delete: {enabled: true}
  maintenance:
    uploadpurging: {enabled: false}
http:
  addr: $REGISTRY
  secret: $(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  headers:
    X-Content-Type-Options: [nosniff]
EOF
if ! running registry; then
  ports_free registry "$REGISTRY_PORT"
  log "starting registry on $REGISTRY"
  start registry docker-registry serve "$K/conf/registry.yml"
fi

# ---------------------------------------------------------------- etcd
# Debian's etcd 3.4 (the apiserver accepts it), plain http on loopback.
if ! running etcd; then
  ports_free etcd "$ETCD_PORT" "$ETCD_PEER_PORT"
  log "starting etcd"
  start etcd etcd --name swetui-k8s --data-dir "$K/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "swetui-k8s=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls "" \
    --quota-backend-bytes $((2 * 1024 * 1024 * 1024))
fi

# ---------------------------------------------------------------- CNI
# Pods get lo plus a dead-end eth0 from `nonet` (below): containerd's CRI needs
# CNI to return an eth0 with an address, and this kernel has no dummy links for
# a plain loopback-only config.
# (Each file is replaced by a rename: containerd may be running them.)
cp /usr/lib/cni/loopback "$K/cni/bin/.loopback.tmp"
mv -f "$K/cni/bin/.loopback.tmp" "$K/cni/bin/loopback"
cat >"$K/cni/bin/.nonet.tmp" <<'EOF'
#!/bin/sh
# nonet: a CNI plugin giving the pod a dead-end eth0 (a dummy, ifb or tun
# device with no route and no peer), so that the pod has no network beyond lo
# while containerd still gets the "eth0 with an IP" result it insists on. Every
# pod reports the same address: nothing can reach it.
ADDR=${NONET_ADDR:-198.18.0.2/32}
conf=$(cat)
ver=$(printf '%s' "$conf" | sed -n 's/.*"cniVersion"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
[ -n "$ver" ] || ver=1.0.0
case "$CNI_COMMAND" in
ADD)
  ns="nsenter --net=$CNI_NETNS"
  $ns ip link show "$CNI_IFNAME" >/dev/null 2>&1 ||
    $ns ip link add "$CNI_IFNAME" type dummy 2>/dev/null ||
    $ns ip link add "$CNI_IFNAME" type ifb 2>/dev/null ||
    $ns ip tuntap add dev "$CNI_IFNAME" mode tun || {
      printf '{"cniVersion":"%s","code":11,"msg":"nonet: cannot create %s"}' "$ver" "$CNI_IFNAME"
      exit 1
    }
  $ns ip addr replace "$ADDR" dev "$CNI_IFNAME" 2>/dev/null
  $ns ip link set "$CNI_IFNAME" up 2>/dev/null
  printf '{"cniVersion":"%s","interfaces":[{"name":"%s","sandbox":"%s"}],"ips":[{"address":"%s","interface":0}]}\n' \
    "$ver" "$CNI_IFNAME" "$CNI_NETNS" "$ADDR"
  ;;
DEL | CHECK | GC | STATUS) : ;;
VERSION) printf '{"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}\n' ;;
*)
  printf '{"cniVersion":"%s","code":4,"msg":"nonet: unknown CNI_COMMAND %s"}' "$ver" "$CNI_COMMAND"
  exit 1
  ;;
esac
EOF
chmod +x "$K/cni/bin/.nonet.tmp"
mv -f "$K/cni/bin/.nonet.tmp" "$K/cni/bin/nonet"
printf '{\n  "cniVersion": "1.0.0",\n  "name": "nonet",\n  "plugins": [ { "type": "nonet" } ]\n}\n' >"$K/cni/.conflist.tmp"
mv -f "$K/cni/.conflist.tmp" "$K/cni/net.d/10-nonet.conflist"

# ---------------------------------------------------------------- containerd
# Debian's containerd 1.6 (config v2), a second instance next to Docker's.
cat >"$K/conf/containerd.toml" <<EOF
version = 2
root = "$K/containerd/root"
state = "$K/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$K/run/containerd.sock"
[ttrpc]
  address = ""
[debug]
  address = ""
  level = "info"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$K/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  # no CAP_SYS_RESOURCE here: runc cannot set oom_score_adj below containerd's own
  restrict_oom_score_adj = true
  enable_selinux = false
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc)"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$K/cni/bin"
    conf_dir = "$K/cni/net.d"
    max_conf_num = 1
  # images named $REGISTRY/... come from the loopback registry, over plain http
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."$REGISTRY"]
    endpoint = ["http://$REGISTRY"]
EOF
if ! running containerd; then
  log "starting containerd"
  start containerd containerd --config "$K/conf/containerd.toml"
fi

# ---------------------------------------------------------------- kube-apiserver
wait_for etcd "etcd to be healthy" env ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:$ETCD_PORT" endpoint health
log "etcd healthy"
api_started=false
if ! running kube-apiserver; then
  api_started=true
  ports_free kube-apiserver "$API_PORT"
  log "starting kube-apiserver"
  P=$K/pki
  # The node's Hostname address ("localhost") keeps apiserver->kubelet on loopback.
  # TaintNodesByCondition would register the node with a not-ready taint that
  # only the controller-manager (not run here) ever removes: no pod would be
  # scheduled.
  start kube-apiserver "$K/bin/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --secure-port="$API_PORT" --advertise-address=127.0.0.1 \
    --endpoint-reconciler-type=none --service-cluster-ip-range=10.0.0.0/24 \
    --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
    --kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=Hostname \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --disable-admission-plugins=TaintNodesByCondition \
    --profiling=false
fi

# ---------------------------------------------------------------- images
# Built here from static binaries (no image registry is reachable): pause for
# containerd's sandboxes (imported with ctr), busybox for the smoke pod (pushed
# to the loopback registry, so the smoke pod also proves the pull path).
if ! docker image inspect "$PAUSE_IMAGE" >/dev/null 2>&1; then
  log "building $PAUSE_IMAGE"
  cat >"$K/images/pause/pause.c" <<'EOF'
/* pause: sleep until SIGINT/SIGTERM, reaping children meanwhile */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void sigdown(int s) { (void)s; _exit(0); }
static void sigreap(int s) { (void)s; while (waitpid(-1, NULL, WNOHANG) > 0) {} }
int main(void) {
  struct sigaction d = {.sa_handler = sigdown}, r = {.sa_handler = sigreap, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGINT, &d, NULL); sigaction(SIGTERM, &d, NULL); sigaction(SIGCHLD, &r, NULL);
  for (;;) pause();
  return 0;
}
EOF
  gcc -static -Os -s -o "$K/images/pause/pause" "$K/images/pause/pause.c" >>"$K/logs/images.log" 2>&1 ||
    fail images "gcc -static pause.c failed"
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$K/images/pause/Dockerfile"
  DOCKER_BUILDKIT=0 docker build -q -t "$PAUSE_IMAGE" "$K/images/pause" >>"$K/logs/images.log" 2>&1 ||
    fail images "docker build $PAUSE_IMAGE failed"
fi
if ! docker image inspect "$BUSYBOX_IMAGE" >/dev/null 2>&1; then
  log "building $BUSYBOX_IMAGE"
  cp /bin/busybox "$K/images/busybox/busybox"
  printf 'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\nCMD ["/bin/sh"]\n' >"$K/images/busybox/Dockerfile"
  DOCKER_BUILDKIT=0 docker build -q -t "$BUSYBOX_IMAGE" "$K/images/busybox" >>"$K/logs/images.log" 2>&1 ||
    fail images "docker build $BUSYBOX_IMAGE failed"
fi
wait_for containerd "containerd to answer" "${CTR[@]}" version
if ! "${CTR[@]}" images ls -q | grep -qxF "$PAUSE_IMAGE"; then
  log "importing $PAUSE_IMAGE into containerd"
  docker save "$PAUSE_IMAGE" | "${CTR[@]}" images import - >>"$K/logs/images.log" 2>&1 ||
    fail images "ctr import $PAUSE_IMAGE failed"
fi
log "containerd ready"
wait_for registry "the registry on $REGISTRY" curl -sf --max-time 5 "http://$REGISTRY/v2/"
if ! curl -sf --max-time 5 -o /dev/null "http://$REGISTRY/v2/swetui-k8s/busybox/manifests/1.35" \
  -H 'Accept: application/vnd.docker.distribution.manifest.v2+json'; then
  log "pushing $SMOKE_IMAGE"
  { docker tag "$BUSYBOX_IMAGE" "$SMOKE_IMAGE" && docker push -q "$SMOKE_IMAGE"; } >>"$K/logs/images.log" 2>&1 ||
    fail images "docker push $SMOKE_IMAGE failed"
fi
log "registry ready on $REGISTRY"

# ---------------------------------------------------------------- namespace, identities
wait_for kube-apiserver "kube-apiserver to be ready" kapi admin /readyz
log "kube-apiserver ready"
# apply PATH: server-side apply of the manifest on stdin (creates or updates).
apply() {
  kapi admin "$1?fieldManager=swetui-k8s-up&force=true" -X PATCH \
    -H 'Content-Type: application/apply-patch+yaml' --data-binary @- >/dev/null ||
    fail kube-apiserver "applying $1 failed"
}
RBAC=/apis/rbac.authorization.k8s.io/v1
apply "/api/v1/namespaces/$NAMESPACE" <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: $NAMESPACE}
EOF
# No controller-manager creates it. Pods get no token unless they ask (and one
# that asks hangs: no controller publishes kube-root-ca.crt either).
apply "/api/v1/namespaces/$NAMESPACE/serviceaccounts/default" <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: $NAMESPACE}
automountServiceAccountToken: false
EOF
# swetui-runner (client certificate CN=swetui-runner, no groups): runs pods in
# its namespace and watches the node, nothing more.
apply "$RBAC/namespaces/$NAMESPACE/roles/swetui-runner" <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: swetui-runner, namespace: $NAMESPACE}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [create, get, list, watch, delete, deletecollection]
- apiGroups: [""]
  resources: [pods/exec]
  verbs: [create, get]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [create, get, list]
- apiGroups: [""]
  resources: [resourcequotas]
  verbs: [get, list]
EOF
apply "$RBAC/namespaces/$NAMESPACE/rolebindings/swetui-runner" <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: swetui-runner, namespace: $NAMESPACE}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: swetui-runner}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: swetui-runner}
EOF
apply "$RBAC/clusterroles/swetui-runner-nodes" <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: swetui-runner-nodes}
rules:
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list]
EOF
apply "$RBAC/clusterrolebindings/swetui-runner-nodes" <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: swetui-runner-nodes}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: swetui-runner-nodes}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: swetui-runner}
EOF
# The nodes' heartbeats (Leases), readable in kube-node-lease only. The
# apiserver creates that namespace itself, shortly after it is ready.
wait_for kube-apiserver "namespace kube-node-lease" kapi admin /api/v1/namespaces/kube-node-lease
apply "$RBAC/namespaces/kube-node-lease/roles/swetui-runner-leases" <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: swetui-runner-leases, namespace: kube-node-lease}
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list]
EOF
apply "$RBAC/namespaces/kube-node-lease/rolebindings/swetui-runner-leases" <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: swetui-runner-leases, namespace: kube-node-lease}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: swetui-runner-leases}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: swetui-runner}
EOF
log "namespace $NAMESPACE and identity swetui-runner in place"

# ---------------------------------------------------------------- kube-scheduler
# Its own identity (system:kube-scheduler, bound by the apiserver's bootstrap
# RBAC), one instance so no leader election, serving healthz on loopback only.
# It trusts our CA directly: looking up the apiserver's front-proxy CA (there
# is none here) would log an error every few seconds.
cat >"$K/conf/kube-scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $K/conf/kube-scheduler.kubeconfig
leaderElection:
  leaderElect: false
enableProfiling: false
EOF
# Clients that outlived an apiserver take up to half a minute to re-watch a new
# one (measured: a smoke pod took 30-55 s instead of 3); restarting them is quicker.
if $api_started && running kube-scheduler; then
  log "restarting kube-scheduler (the apiserver was restarted)"
  stop_pid kube-scheduler
fi
if ! running kube-scheduler; then
  ports_free kube-scheduler "$SCHEDULER_PORT"
  log "starting kube-scheduler"
  start kube-scheduler "$K/bin/kube-scheduler" --config="$K/conf/kube-scheduler.yaml" \
    --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" \
    --authentication-kubeconfig="$K/conf/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="$K/conf/kube-scheduler.kubeconfig" \
    --client-ca-file="$K/pki/ca.crt" --authentication-skip-lookup
fi

# ---------------------------------------------------------------- kubelet
cat >"$K/conf/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $K/pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$K/run/containerd.sock
imageServiceEndpoint: unix://$K/run/containerd.sock
cgroupDriver: cgroupfs          # containerd 1.6 has no RuntimeConfig RPC: kubelet 1.37 falls back to this
failCgroupV1: false             # the CI machine is cgroup v1 (hybrid); kubelet >= 1.35 refuses v1 by default
failSwapOn: false
makeIPTablesUtilChains: false   # leave the host's iptables alone
protectKernelDefaults: false
podLogsDir: $K/pod-logs
resolvConf: ""
maxPods: 50
podPidsLimit: 256               # a Pod's pids limit is its node's: sandbox.pids_limit's default, so a fork bomb is held
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
nodeStatusUpdateFrequency: 10s
nodeStatusReportFrequency: 10s
syncFrequency: 10s
EOF
if $api_started && running kubelet; then
  log "restarting kubelet (the apiserver was restarted)"
  stop_pid kubelet
fi
if ! running kubelet; then
  log "starting kubelet"
  start_kubelet
fi
wait_for kube-scheduler "kube-scheduler to be healthy" curl -sfk --max-time 5 "https://127.0.0.1:$SCHEDULER_PORT/healthz"
log "kube-scheduler healthy"
wait_node_ready
log "node $NODE Ready"

# ---------------------------------------------------------------- smoke pod
# As swetui-runner, without spec.nodeName (the scheduler binds it), from the
# loopback registry with imagePullPolicy Always.
SMOKE=swetui-k8s-smoke
PODS=/api/v1/namespaces/$NAMESPACE/pods
pod_gone() { ! kapi runner "$PODS/$SMOKE" >/dev/null 2>&1; }
if ! pod_gone; then
  kapi runner "$PODS/$SMOKE?gracePeriodSeconds=0" -X DELETE >/dev/null 2>&1 || true
  wait_for "" "an old $SMOKE pod to go" pod_gone
fi
log "smoke pod: $SMOKE_IMAGE"
pod=$(
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $SMOKE, namespace: $NAMESPACE}
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  enableServiceLinks: false
  dnsPolicy: Default
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: $SMOKE_IMAGE
    imagePullPolicy: Always
    command: ["sh", "-c", "echo swetui-k8s smoke ok"]
    resources:
      limits: {cpu: 100m, memory: 32Mi}
EOF
)
kapi runner "$PODS" -X POST -H 'Content-Type: application/yaml' --data-binary "$pod" >/dev/null ||
  fail "" "swetui-runner could not create the smoke pod"
# pod_status: the smoke pod's phase, conditions and container states, for errors.
pod_status() {
  kapi admin "$PODS/$SMOKE" | python3 -c '
import json, sys
st = json.load(sys.stdin).get("status", {})
print("phase:", st.get("phase"))
for c in st.get("conditions", []):
    print("condition %s=%s %s %s" % (c["type"], c["status"], c.get("reason", ""), c.get("message", "")))
for c in st.get("containerStatuses", []):
    print("container %s: %s" % (c["name"], json.dumps(c.get("state"))))' >&2 || true
}
pod_phase() { kapi runner "$PODS/$SMOKE" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin).get("status",{}).get("phase",""))'; }
smoke_done() { case $(pod_phase) in Succeeded | Failed) return 0 ;; *) return 1 ;; esac }
end=$((SECONDS + TIMEOUT))
until smoke_done; do
  if [ $SECONDS -ge $end ]; then
    pod_status
    fail kubelet "the smoke pod did not finish within ${TIMEOUT}s (its status above; kubelet log below)"
  fi
  sleep 0.2
done
phase=$(pod_phase)
out=$(kapi runner "$PODS/$SMOKE/log" 2>&1 || true)
if [ "$phase" != Succeeded ] || [ "$out" != "swetui-k8s smoke ok" ]; then
  pod_status
  fail kubelet "the smoke pod ended $phase with log \"$out\" (its status above)"
fi
kapi runner "$PODS/$SMOKE" -X DELETE >/dev/null
wait_for kubelet "the smoke pod to be deleted" pod_gone
log "smoke pod Succeeded"

# ---------------------------------------------------------------- env
printf 'KUBECONFIG=%s\nSWETUI_K8S_REGISTRY=%s\nSWETUI_K8S_NAMESPACE=%s\n' \
  "$K/runner.kubeconfig" "$REGISTRY" "$NAMESPACE" >"$K/env.tmp"
mv "$K/env.tmp" "$K/env"
log "cluster up: $K/env"
sed 's/^/  /' "$K/env"
