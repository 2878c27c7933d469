#!/usr/bin/env bash
# Start N *real* nodes (kubelet + containerd + runc) beside the KWOK fake nodes of the local
# control plane started by hack/cluster-up.sh. Work in progress for issue 10; see
# hack/README.md "Real nodes (work in progress)".
#
# Node i (1..N) is named kubegan-real-<i> and gets:
#   * its own network namespace kg-real-<i>; its eth0 (10.246.0.<10+i>/24) is a veth into the
#     host bridge kg-nodes (10.246.0.1/24); the host routes its pod CIDR 10.245.<i>.0/24 to it
#   * its own containerd (config, root, state, socket) and kubelet (root dir, certificates,
#     cgroup root /kubegan/kubegan-real-<i> in every cgroup v1 hierarchy), both running inside
#     the namespace (nsenter --net: the mount namespace stays the host's, so containerd sees
#     the volumes the kubelet mounts)
#   * a CNI bridge kgbr0 inside its namespace with host-local addresses from its pod CIDR
#   * labels of a GKE spot CPU pool (cloud.google.com/gke-nodepool=real-spot,
#     cloud.google.com/gke-spot=true, node.kubernetes.io/instance-type=e2-standard-2, ...)
# The kubelets reach the apiserver (which listens on 127.0.0.1 only) through one socat relay
# on 10.246.0.1:<apiserver port>; their kubeconfig names the server "kubernetes" for TLS.
# The images kubegan.local/pause:busybox (pod sandbox) and kubegan.local/busybox:1.35 are
# made from Debian's busybox-static (hack/make-busybox-image.sh) and imported into each node.
#
# Environment:
#   REAL_NODES               number of nodes (default 1)
#   KUBEGAN_CLUSTER_DIR      control-plane state dir (default <repo>/.cluster); node state goes
#                            to <cluster dir>/real-nodes/, sockets to /run/kubegan-real/
#   KUBEGAN_APISERVER_PORT   as in hack/cluster-up.sh (default 6443)
#   KUBEGAN_REAL_NODE_TAINTS --register-with-taints for every node (default none)
#   KUBEGAN_UP_TIMEOUT       seconds to wait for each step (default 120)
#   KUBEGAN_RUNC             runc binary for containerd (default: runc on PATH)
# Needs root, hack/build-node-binaries.sh done, and a running control plane.
set -Eeuo pipefail
trap 'echo "real-node-up.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"
# shellcheck source=hack/real-node-lib.sh
source "$HACK_DIR/real-node-lib.sh"

TIMEOUT="${KUBEGAN_UP_TIMEOUT:-120}"
TAINTS="${KUBEGAN_REAL_NODE_TAINTS:-}"
RUNC_BINARY="${KUBEGAN_RUNC:-}"   # another runc (e.g. a debugging wrapper); default: runc on PATH
PKI="$CLUSTER_DIR/pki"
KUBELET="$(bash "$HACK_DIR/build-node-binaries.sh" --print | awk '$1 == "kubelet" {print $2}')"
CNI_BIN_DIR="${KUBEGAN_CNI_BIN_DIR:-/usr/lib/cni}"

log() { printf '[real-node-up %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[real-node-up] ERROR: %s\n' "$*" >&2; exit 1; }

wait_until() {  # wait_until <what> <cmd...>
  local what="$1"; shift
  local deadline=$((SECONDS + TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out after ${TIMEOUT}s waiting for $what"
    sleep 1
  done
}

preflight() {
  [[ $(id -u) -eq 0 ]] || die "real nodes need root (network namespaces, mounts, cgroups)"
  [[ -x "$KUBELET" ]] || die "no kubelet at $KUBELET; run make node-binaries"
  local c
  for c in containerd containerd-shim-runc-v2 runc ctr socat nsenter ip; do
    command -v "$c" >/dev/null || die "$c not found; run make node-binaries"
  done
  [[ -x "$CNI_BIN_DIR/bridge" && -x "$CNI_BIN_DIR/host-local" && -x "$CNI_BIN_DIR/loopback" ]] \
    || die "CNI plugins not in $CNI_BIN_DIR; run make node-binaries"
  [[ -s "$PKI/ca.key" && -s "$ADMIN_KUBECONFIG" ]] || die "no control plane in $CLUSTER_DIR; run make cluster-up"
  kubectl get --raw /readyz >/dev/null || die "the apiserver of $CLUSTER_DIR is not ready; run make cluster-up"
  [[ "$REAL_NODES" =~ ^[1-9][0-9]?$ ]] && ((REAL_NODES <= 50)) || die "REAL_NODES must be 1..50"
  if [[ -e "$NET_OWNER" && "$(cat "$NET_OWNER")" != "$CLUSTER_DIR" ]]; then
    die "real-node networking belongs to the cluster in $(cat "$NET_OWNER"); run its real-node-down first"
  fi
}

# ---------------------------------------------------------------- host side
setup_host_network() {
  mkdir -p "$(dirname "$NET_OWNER")"; echo "$CLUSTER_DIR" >"$NET_OWNER"
  if ! ip link show "$HOST_BRIDGE" >/dev/null 2>&1; then
    ip link add "$HOST_BRIDGE" type bridge
    ip addr add "$HOST_BRIDGE_IP/24" dev "$HOST_BRIDGE"
    log "created host bridge $HOST_BRIDGE ($HOST_BRIDGE_IP/24)"
  fi
  ip link set "$HOST_BRIDGE" up
}

start_relay() {
  if pid_alive apiserver-relay; then return; fi
  start_proc apiserver-relay socat "TCP-LISTEN:$APISERVER_PORT,bind=$HOST_BRIDGE_IP,reuseaddr,fork" \
    "TCP:127.0.0.1:$APISERVER_PORT"
  wait_until "apiserver relay on $HOST_BRIDGE_IP:$APISERVER_PORT" bash -c "exec 3<>/dev/tcp/$HOST_BRIDGE_IP/$APISERVER_PORT"
}

make_images() {
  mkdir -p "$STATE_ROOT/images"
  [[ -s "$STATE_ROOT/images/pause.tar" ]] || KUBEGAN_IMAGE_ENTRYPOINT='["/bin/sh","-c","trap \"exit 0\" TERM INT; while :; do sleep 3600 & wait $!; done"]' \
    bash "$HACK_DIR/make-busybox-image.sh" "$STATE_ROOT/images/pause.tar" "$PAUSE_IMAGE"
  [[ -s "$STATE_ROOT/images/busybox.tar" ]] || \
    bash "$HACK_DIR/make-busybox-image.sh" "$STATE_ROOT/images/busybox.tar" "$BUSYBOX_IMAGE"
}

# ---------------------------------------------------------------- one node
gen_node_cert() {  # kubelet client certificate: CN=system:node:<name>, O=system:nodes
  local name="$1" dir="$2"
  [[ -s "$dir/kubelet-client.crt" ]] && return 0
  openssl genrsa -out "$dir/kubelet-client.key" 2048 2>/dev/null
  openssl req -new -key "$dir/kubelet-client.key" -subj "/O=system:nodes/CN=system:node:$name" \
    -out "$dir/kubelet-client.csr" 2>/dev/null
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"$dir/ext"
  openssl x509 -req -in "$dir/kubelet-client.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$dir/ext" -out "$dir/kubelet-client.crt" 2>/dev/null
  rm -f "$dir/kubelet-client.csr" "$dir/ext"
  chmod 600 "$dir/kubelet-client.key"
}

setup_node_network() {  # setup_node_network <i>
  local i="$1" ns; ns="$(netns_name "$i")"
  local host_if="kgn-h$i" node_ip; node_ip="$(node_ip "$i")"
  if ! ip netns list | grep -qw "$ns"; then
    ip netns add "$ns"
    ip link add "$host_if" type veth peer name "kgn-n$i"
    ip link set "kgn-n$i" netns "$ns"
    ip link set "$host_if" master "$HOST_BRIDGE" up
    ip -n "$ns" link set "kgn-n$i" name eth0
    ip -n "$ns" addr add "$node_ip/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default via "$HOST_BRIDGE_IP"
    ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
    log "node $i: netns $ns, eth0 $node_ip/24"
  fi
  ip route replace "$(pod_cidr "$i")" via "$node_ip" dev "$HOST_BRIDGE"
}

setup_cgroups() {  # setup_cgroups <node>: /kubegan/<node> in every v1 hierarchy the kubelet uses
  local node="$1" d sub
  for sub in cpu cpuacct cpuset memory devices freezer blkio pids systemd hugetlb net_cls net_prio perf_event; do
    d=/sys/fs/cgroup/$sub
    [[ -d "$d" ]] || continue
    mkdir -p "$d/kubegan/$node"
    if [[ "$sub" == cpuset ]]; then  # a new v1 cpuset has no cpus/mems until given some
      cat "$d/cpuset.cpus" >"$d/kubegan/cpuset.cpus"; cat "$d/cpuset.mems" >"$d/kubegan/cpuset.mems"
      cat "$d/cpuset.cpus" >"$d/kubegan/$node/cpuset.cpus"; cat "$d/cpuset.mems" >"$d/kubegan/$node/cpuset.mems"
    fi
  done
}

write_node_configs() {  # write_node_configs <i>
  local i="$1" node dir run
  node="$(node_name "$i")"; dir="$(node_dir "$i")"; run="$(node_run_dir "$i")"
  mkdir -p "$dir"/{containerd,kubelet,cni/net.d,cni/ipam,pki} "$run"
  chmod 700 "$dir/pki"
  cat >"$dir/containerd.toml" <<TOML
# containerd for $node (written by hack/real-node-up.sh)
version = 2
root = "$dir/containerd"
state = "$run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$run/containerd.sock"
[ttrpc]
  address = "$run/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  enable_selinux = false
  # Without CAP_SYS_RESOURCE (this VM's root lacks it) runc cannot lower oom_score_adj below
  # containerd's own (sandboxes ask for -998): clamp it instead of failing every pod.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$run/runc"
$([[ -z "$RUNC_BINARY" ]] || printf '        BinaryName = "%s"' "$RUNC_BINARY")
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$dir/cni/net.d"
    max_conf_num = 1
TOML
  cat >"$dir/cni/net.d/10-kubegan.conflist" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "kubegan-$node",
  "plugins": [
    {
      "type": "bridge", "bridge": "kgbr0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {"type": "host-local", "dataDir": "$dir/cni/ipam",
               "ranges": [[{"subnet": "$(pod_cidr "$i")"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    }
  ]
}
JSON
  gen_node_cert "$node" "$dir/pki"
  cat >"$dir/kubeconfig" <<EOF2
apiVersion: v1
kind: Config
clusters:
- name: kubegan-local
  cluster:
    server: https://$HOST_BRIDGE_IP:$APISERVER_PORT
    tls-server-name: kubernetes
    certificate-authority: $PKI/ca.crt
users:
- name: system:node:$node
  user:
    client-certificate: $dir/pki/kubelet-client.crt
    client-key: $dir/pki/kubelet-client.key
contexts:
- name: kubegan-local
  context: {cluster: kubegan-local, user: "system:node:$node"}
current-context: kubegan-local
EOF2
  chmod 600 "$dir/kubeconfig"
  printf 'nameserver %s\n' "$HOST_BRIDGE_IP" >"$dir/resolv.conf"   # no DNS yet (CoreDNS: TODO)
  cat >"$dir/kubelet.yaml" <<YAML
# kubelet $node (written by hack/real-node-up.sh). cgroup v1 host: failCgroupV1 must be false
# for kubelet >= 1.35 (KEP-5573); cgroupfs driver (no systemd here).
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /kubegan/$node
containerRuntimeEndpoint: unix://$run/containerd.sock
address: $(node_ip "$i")
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
# The apiserver of hack/cluster-up.sh has no kubelet client certificate yet, so it calls the
# kubelet (logs, exec) anonymously: allow that. The port is only reachable from this machine.
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
resolvConf: $dir/resolv.conf
staticPodPath: ""
registerNode: true
nodeStatusReportFrequency: 10s
nodeStatusUpdateFrequency: 10s
serializeImagePulls: false
# Every real node sees the whole machine's disk and memory; keep eviction out of the way.
evictionHard: {memory.available: "100Mi", nodefs.available: "2%", imagefs.available: "2%", nodefs.inodesFree: "2%"}
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
failSwapOn: false
localStorageCapacityIsolation: true
maxPods: 30
podPidsLimit: 4096
YAML
}

node_labels() {  # GKE spot CPU pool, plus kubegan.io/real-node=true
  echo "cloud.google.com/gke-nodepool=real-spot,cloud.google.com/gke-spot=true,cloud.google.com/gke-provisioning=spot,cloud.google.com/machine-family=e2,node.kubernetes.io/instance-type=e2-standard-2,topology.kubernetes.io/region=us-central1,topology.kubernetes.io/zone=us-central1-a,kubegan.io/real-node=true"
}

start_node() {  # start_node <i>
  local i="$1" node ns dir run
  node="$(node_name "$i")"; ns="$(netns_name "$i")"; dir="$(node_dir "$i")"; run="$(node_run_dir "$i")"
  setup_node_network "$i"
  setup_cgroups "$node"
  write_node_configs "$i"
  if ! pid_alive "containerd-$node"; then
    start_proc "containerd-$node" nsenter --net="/run/netns/$ns" containerd --config "$dir/containerd.toml"
  fi
  wait_until "containerd of $node" ctr --address "$run/containerd.sock" version
  local img
  for img in pause busybox; do
    ctr --address "$run/containerd.sock" -n k8s.io images import --no-unpack=false "$STATE_ROOT/images/$img.tar" >/dev/null
  done
  log "node $i: containerd up ($run/containerd.sock), images $PAUSE_IMAGE $BUSYBOX_IMAGE imported"
  if ! pid_alive "kubelet-$node"; then
    start_proc "kubelet-$node" nsenter --net="/run/netns/$ns" "$KUBELET" \
      --config="$dir/kubelet.yaml" --kubeconfig="$dir/kubeconfig" \
      --root-dir="$dir/kubelet" --cert-dir="$dir/pki" \
      --hostname-override="$node" --node-ip="$(node_ip "$i")" \
      --node-labels="$(node_labels)" ${TAINTS:+--register-with-taints="$TAINTS"} \
      --v=1
  fi
}

node_ready() { [[ "$(kubectl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]; }

main() {
  preflight
  mkdir -p "$STATE_ROOT" "$LOGS" "$PIDS" "$RUN_ROOT"
  setup_host_network
  start_relay
  make_images
  local i
  for ((i = 1; i <= REAL_NODES; i++)); do start_node "$i"; done
  for ((i = 1; i <= REAL_NODES; i++)); do
    wait_until "node $(node_name "$i") Ready (log: $LOGS/kubelet-$(node_name "$i").log)" node_ready "$(node_name "$i")"
    log "node $(node_name "$i"): Ready"
  done
  kubectl get nodes -l kubegan.io/real-node=true -o wide >&2
}

main "$@"
