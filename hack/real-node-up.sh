#!/usr/bin/env bash
# Start N *real* nodes (kubelet + containerd + runc) beside the KWOK fake nodes of the local
# control plane started by hack/cluster-up.sh. See hack/README.md "Real nodes".
#
# Names and addresses come from the site (KUBEGAN_REAL_SITE, hack/real-node-lib.sh; table in
# hack/README.md); those of the default site `real` are shown here (site `e2e`: kubegan-e2e-<i>,
# kg-e2e-<i>, bridge kg-e2e-nodes 10.248.0.1/24, pods 10.247.<i>.0/24, /run/kubegan-e2e, cgroup
# parent kubegan-e2e).
# Node i (1..N) is named kubegan-real-<i> and gets:
#   * its own network namespace kg-real-<i>; its eth0 (10.246.0.<10+i>/24) is a veth (host end
#     kgn-h<i>) into the host bridge kg-nodes (10.246.0.1/24); the host and every other node
#     namespace route its pod CIDR 10.245.<i>.0/24 to it (node to node at layer 2 on the bridge:
#     the host forwards nothing, so no pod traffic leaves the machine)
#   * its own containerd (config, root, state, socket) and kubelet (root dir, certificates,
#     cgroup root /kubegan/kubegan-real-<i> in every cgroup v1 hierarchy), both running inside
#     the namespace (nsenter --net: the mount namespace stays the host's, so containerd sees
#     the volumes the kubelet mounts)
#   * a CNI bridge kgbr0 inside its namespace with host-local addresses from its pod CIDR
#   * a kube-proxy (iptables mode) inside its namespace: Service IPs work in its pods
#   * with KUBEGAN_NETWORK_POLICY=kube-router, kube-router's network policy controller inside
#     its namespace (hack/real-node-network-policy.sh): NetworkPolicies are enforced
#   * PersistentVolumes kubegan-local-checkpoints-<k> (ReadWriteMany, storage class
#     kubegan-local-shared; KUBEGAN_SHARED_VOLUMES of them, default 3):
#     <cluster dir>/real-nodes/shared/checkpoints-<k>, mounted by every node at once
#   * labels of a GKE spot CPU pool (cloud.google.com/gke-nodepool=real-spot,
#     cloud.google.com/gke-spot=true, node.kubernetes.io/instance-type=e2-standard-2, ...)
# The kubelets reach the apiserver (which listens on 127.0.0.1 only) through one socat relay
# on 10.246.0.1:<apiserver port>; their kubeconfig names the server "kubernetes" for TLS. The
# `kubernetes` Service's EndpointSlice points at that relay, so in-cluster clients work.
# CoreDNS (hack/gomod/coredns) runs on the host at 10.246.0.1:53 (health :18053, ready :18054,
# on that address only) and serves cluster.local; the Service kube-system/kube-dns (10.0.0.10,
# the kubelets' clusterDNS) points at it, so names keep resolving while nodes come and go.
# Nothing else listens in the host's network namespace: containerd, kubelets and kube-proxies
# run inside the node namespaces.
# The images kubegan.local/pause:busybox (pod sandbox) and kubegan.local/busybox:1.35 are
# made from Debian's busybox-static (hack/make-busybox-image.sh) and imported into each node.
#
# Usage: real-node-up.sh            nodes 1..REAL_NODES
#        real-node-up.sh 3 4        exactly nodes 3 and 4 (e.g. a replacement for a reclaimed node)
# Idempotent: running nodes are left alone.
# Environment:
#   REAL_NODES               number of nodes (default 1)
#   KUBEGAN_REAL_SITE        real (default), e2e or docs: which machine-wide names and addresses
#                            (one cluster dir per site at a time; two sites run side by side)
#   KUBEGAN_CLUSTER_DIR      control-plane state dir (default <repo>/.cluster); node state goes
#                            to <cluster dir>/real-nodes/, sockets to /run/kubegan-<site>/
#   KUBEGAN_APISERVER_PORT   as in hack/cluster-up.sh (default 6443)
#   KUBEGAN_REAL_NODE_TAINTS --register-with-taints for every node (default none)
#   KUBEGAN_UP_TIMEOUT       seconds to wait for each step (default 120)
#   KUBEGAN_RUNC             runc binary for containerd (default: runc on PATH)
#   KUBEGAN_NETWORK_POLICY   kube-router: enforce NetworkPolicies on the nodes started; empty
#                            (default): no enforcement, as on a cluster whose CNI has none
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
NETWORK_POLICY="${KUBEGAN_NETWORK_POLICY:-}"
PKI="$CLUSTER_DIR/pki"
NODE_BINARIES="$(bash "$HACK_DIR/build-node-binaries.sh" --print)"
KUBELET="$(awk '$1 == "kubelet" {print $2}' <<<"$NODE_BINARIES")"
KUBE_PROXY="$(awk '$1 == "kube-proxy" {print $2}' <<<"$NODE_BINARIES")"
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
  [[ -x "$KUBE_PROXY" ]] || die "no kube-proxy at $KUBE_PROXY; run make node-binaries"
  local c
  for c in containerd containerd-shim-runc-v2 runc ctr socat nsenter ip; do
    command -v "$c" >/dev/null || die "$c not found; run make node-binaries"
  done
  [[ -x "$CNI_BIN_DIR/bridge" && -x "$CNI_BIN_DIR/host-local" && -x "$CNI_BIN_DIR/loopback" ]] \
    || die "CNI plugins not in $CNI_BIN_DIR; run make node-binaries"
  [[ -s "$PKI/ca.key" && -s "$ADMIN_KUBECONFIG" ]] || die "no control plane in $CLUSTER_DIR; run make cluster-up"
  [[ -s "$PKI/apiserver-kubelet-client.crt" ]] \
    || die "the control plane in $CLUSTER_DIR predates real-node support (no kubelet client certificate); run make cluster-down cluster-up"
  kubectl get --raw /readyz >/dev/null || die "the apiserver of $CLUSTER_DIR is not ready; run make cluster-up"
  # shellcheck disable=SC2015  # die when either check fails
  [[ "$REAL_NODES" =~ ^[1-9][0-9]?$ ]] && ((REAL_NODES <= 50)) || die "REAL_NODES must be 1..50"
  [[ "$NETWORK_POLICY" == "" || "$NETWORK_POLICY" == kube-router ]] \
    || die "KUBEGAN_NETWORK_POLICY must be kube-router or empty, not '$NETWORK_POLICY'"
  if [[ -e "$NET_OWNER" && "$(cat "$NET_OWNER")" != "$CLUSTER_DIR" ]]; then
    die "site $SITE's real nodes belong to the cluster in $(cat "$NET_OWNER"); run its real-node-down first, or use another KUBEGAN_REAL_SITE (one of: $REAL_SITES)"
  fi
  # One cluster's nodes on two sites would fight over its kube-dns and kubernetes endpoints.
  if [[ -s "$SITE_FILE" && "$(cat "$SITE_FILE")" != "$SITE" ]]; then
    die "the real nodes of $CLUSTER_DIR are on site $(cat "$SITE_FILE"); use KUBEGAN_REAL_SITE=$(cat "$SITE_FILE") or run its real-node-down first"
  fi
  if [[ ! -e "$NET_OWNER" ]]; then
    local net found
    for net in "$NODE_NETWORK" "$POD_NETWORK"; do
      found="$(foreign_routes "$net")"
      [[ -z "$found" ]] || die "site $SITE's network $net is already routed on this machine ($found); use another KUBEGAN_REAL_SITE (one of: $REAL_SITES)"
    done
  fi
}

foreign_routes() {  # foreign_routes <cidr>: routes inside or around it (not the default) that are not ours
  { ip -4 -o route show root "$1"; ip -4 -o route show match "$1"; } 2>/dev/null \
    | grep -Ev "^default |dev $HOST_BRIDGE( |\$)" | sort -u | paste -sd ';' || true
}

# ---------------------------------------------------------------- host side
setup_host_network() {
  mkdir -p "$(dirname "$NET_OWNER")"; echo "$CLUSTER_DIR" >"$NET_OWNER"; echo "$SITE" >"$SITE_FILE"
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
gen_cert() {  # gen_cert <dir> <base name> <subject> <extendedKeyUsage> [subjectAltName]
  local dir="$1" base="$2" subj="$3" usage="$4" san="${5:-}"
  [[ -s "$dir/$base.crt" ]] && return 0
  mkdir -p "$dir"; chmod 700 "$dir"
  # P-256, as hack/cluster-up.sh's keys: an RSA key's generation is 30 times the CPU.
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$dir/$base.key" 2>/dev/null
  openssl req -new -key "$dir/$base.key" -subj "$subj" -out "$dir/$base.csr" 2>/dev/null
  {
    printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n'
    printf 'extendedKeyUsage=%s\n' "$usage"
    [[ -z "$san" ]] || printf 'subjectAltName=%s\n' "$san"
  } >"$dir/$base.ext"
  openssl x509 -req -in "$dir/$base.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$dir/$base.ext" -out "$dir/$base.crt" 2>/dev/null
  rm -f "$dir/$base.csr" "$dir/$base.ext"
  chmod 600 "$dir/$base.key"
}
gen_client_cert() { gen_cert "$1" "$2" "${4:+/O=$4}/CN=$3" clientAuth; }  # <dir> <base> <CN> [O]
gen_serving_cert() { gen_cert "$1" "$2" "/O=system:nodes/CN=$3" serverAuth "$4"; }  # <dir> <base> <CN> <SAN>

write_kubeconfig() {  # write_kubeconfig <file> <server> <user> <cert> <key>
  local file="$1" server="$2" user="$3" crt="$4" key="$5"
  cat >"$file" <<EOF2
apiVersion: v1
kind: Config
clusters:
- name: kubegan-local
  cluster:
    server: $server
    tls-server-name: kubernetes
    certificate-authority: $PKI/ca.crt
users:
- name: "$user"
  user:
    client-certificate: $crt
    client-key: $key
contexts:
- name: kubegan-local
  context: {cluster: kubegan-local, user: "$user"}
current-context: kubegan-local
EOF2
  chmod 600 "$file"
}

setup_node_network() {  # setup_node_network <i>
  local i="$1" ns; ns="$(netns_name "$i")"
  local host_if node_if node_ip
  host_if="$(host_veth "$i")"; node_if="$(node_veth "$i")"; node_ip="$(node_ip "$i")"
  if ! ip netns list | awk '{print $1}' | grep -qxF "$ns"; then
    ip netns add "$ns"
    ip link add "$host_if" type veth peer name "$node_if"
    ip link set "$node_if" netns "$ns"
    ip link set "$host_if" master "$HOST_BRIDGE" up
    ip -n "$ns" link set "$node_if" name eth0
    ip -n "$ns" addr add "$node_ip/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default via "$HOST_BRIDGE_IP"
    ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
    log "node $i: netns $ns, eth0 $node_ip/24"
  fi
  ip route replace "$(pod_cidr "$i")" via "$node_ip" dev "$HOST_BRIDGE"
}

setup_cgroups() {  # setup_cgroups <node>: /$CGROUP_PARENT/<node> in every v1 hierarchy the kubelet uses
  local node="$1" d sub p
  for sub in cpu cpuacct cpuset memory devices freezer blkio pids systemd hugetlb net_cls net_prio perf_event; do
    d=/sys/fs/cgroup/$sub
    [[ -d "$d" ]] || continue
    p="$d/$CGROUP_PARENT"
    mkdir -p "$p/$node"
    if [[ "$sub" == cpuset ]]; then  # a new v1 cpuset has no cpus/mems until given some
      cat "$d/cpuset.cpus" >"$p/cpuset.cpus"; cat "$d/cpuset.mems" >"$p/cpuset.mems"
      cat "$d/cpuset.cpus" >"$p/$node/cpuset.cpus"; cat "$d/cpuset.mems" >"$p/$node/cpuset.mems"
    fi
  done
}

write_node_configs() {  # write_node_configs <i>
  local i="$1" node dir run
  node="$(node_name "$i")"; dir="$(node_dir "$i")"; run="$(node_run_dir "$i")"
  mkdir -p "$dir"/{containerd,kubelet,cni/net.d,cni/ipam,pki,pod-logs} "$run" "$REGISTRY_HOSTS_DIR"
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
  # Registries the nodes pull from, as containerd's hosts.toml per registry host (its CA,
  # plain http...): one directory for every node of this cluster, read at each pull, so a
  # registry started later (the e2e tier's) only writes its file there.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$REGISTRY_HOSTS_DIR"
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
  gen_client_cert "$dir/pki" kubelet-client "system:node:$node" system:nodes
  gen_serving_cert "$dir/pki" kubelet-serving "system:node:$node" "IP:$(node_ip "$i"),DNS:$node"
  write_kubeconfig "$dir/kubeconfig" "https://$HOST_BRIDGE_IP:$APISERVER_PORT" "system:node:$node" \
    "$dir/pki/kubelet-client.crt" "$dir/pki/kubelet-client.key"
  # kube-proxy's identity is the one the default ClusterRoleBinding system:node-proxier names.
  write_kubeconfig "$dir/kube-proxy.kubeconfig" "https://$HOST_BRIDGE_IP:$APISERVER_PORT" system:kube-proxy \
    "$STATE_ROOT/pki/kube-proxy.crt" "$STATE_ROOT/pki/kube-proxy.key"
  # kube-router's, for NetworkPolicy enforcement (ClusterRole kubegan:kube-router).
  write_kubeconfig "$dir/kube-router.kubeconfig" "https://$HOST_BRIDGE_IP:$APISERVER_PORT" "kubegan:kube-router" \
    "$STATE_ROOT/pki/kube-router.crt" "$STATE_ROOT/pki/kube-router.key"
  cat >"$dir/kube-proxy.yaml" <<YAML
# kube-proxy $node (written by hack/real-node-up.sh): Service IPs inside the node's namespace.
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $dir/kube-proxy.kubeconfig}
hostnameOverride: $node
bindAddress: $(node_ip "$i")
healthzBindAddress: $(node_ip "$i"):10256
metricsBindAddress: 127.0.0.1:10249
mode: iptables
clusterCIDR: $POD_NETWORK
# A pod that reaches a Service whose endpoint sits on the same node bridge would get its answer
# straight from the endpoint (no un-DNAT) unless the request is masqueraded; masquerading all
# Service traffic avoids depending on br_netfilter inside the node namespaces.
iptables: {masqueradeAll: true, localhostNodePorts: false, minSyncPeriod: 1s, syncPeriod: 30s}
# 0 = leave the kernel's conntrack settings alone (they are the machine's, not the node's).
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
oomScoreAdj: 0
YAML
  # Upstream resolver for pods with dnsPolicy Default: this machine has none for pods to use; the
  # cluster's own names come from CoreDNS through clusterDNS below.
  printf 'nameserver %s\n' "$HOST_BRIDGE_IP" >"$dir/resolv.conf"
  cat >"$dir/kubelet.yaml" <<YAML
# kubelet $node (written by hack/real-node-up.sh). cgroup v1 host: failCgroupV1 must be false
# for kubelet >= 1.35 (KEP-5573); cgroupfs driver (no systemd here).
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_PARENT/$node
containerRuntimeEndpoint: unix://$run/containerd.sock
address: $(node_ip "$i")
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
# As on a cloud node: no anonymous access; clients (the apiserver, Prometheus) present a
# certificate from the cluster CA or a token, and the apiserver decides what they may do.
# The serving certificate is signed by the cluster CA (the apiserver verifies it).
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $dir/pki/kubelet-serving.crt
tlsPrivateKeyFile: $dir/pki/kubelet-serving.key
clusterDomain: cluster.local
clusterDNS: [$CLUSTER_DNS_IP]
resolvConf: $dir/resolv.conf
staticPodPath: ""
# Each node its own pod log directory: with the shared default (/var/log/pods) one kubelet
# garbage-collected the logs of pods it did not know, i.e. every other node's.
podLogsDir: $dir/pod-logs
registerNode: true
nodeStatusReportFrequency: 10s
nodeStatusUpdateFrequency: 10s
serializeImagePulls: false
# Every real node sees the whole machine's disk and memory; keep eviction out of the way.
evictionHard: {memory.available: "100Mi", nodefs.available: "1Gi", imagefs.available: "1Gi", nodefs.inodesFree: "2%"}
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
failSwapOn: false
localStorageCapacityIsolation: true
maxPods: 30
podPidsLimit: 4096
YAML
}

# ---------------------------------------------------------------- cluster-wide services
setup_pod_routes() {  # every node namespace routes every other node's pod CIDR to that node
  # Across the host bridge at layer 2: the host itself forwards nothing (its ip_forward is left
  # alone), so pod traffic never leaves the node network.
  local i j
  local -a nodes
  mapfile -t nodes < <(ip netns list | awk '{print $1}' | sed -n "s/^$NETNS_PREFIX-\([0-9][0-9]*\)\$/\1/p" | sort -n)
  for i in "${nodes[@]}"; do
    for j in "${nodes[@]}"; do
      [[ "$i" == "$j" ]] || ip -n "$(netns_name "$i")" route replace "$(pod_cidr "$j")" via "$(node_ip "$j")" dev eth0
    done
  done
}

apply_cluster_services() {
  # The apiserver listens on 127.0.0.1 and runs with --endpoint-reconciler-type=none, so the
  # `kubernetes` Service gets its endpoint here: the relay on the node network. kube-dns is a
  # Service without selector whose endpoint is the CoreDNS process on the host, so DNS keeps
  # working while real nodes come and go (spot preemption).
  kubectl apply --server-side --force-conflicts --field-manager=kubegan-real-node-up -f - >/dev/null <<YAML
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes
  namespace: default
  labels: {kubernetes.io/service-name: kubernetes, endpointslice.kubernetes.io/managed-by: kubegan-real-node-up}
addressType: IPv4
endpoints: [{addresses: ["$HOST_BRIDGE_IP"], conditions: {ready: true}}]
ports: [{name: https, port: $APISERVER_PORT, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS}
spec:
  clusterIP: $CLUSTER_DNS_IP
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-host
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns, endpointslice.kubernetes.io/managed-by: kubegan-real-node-up}
addressType: IPv4
endpoints: [{addresses: ["$HOST_BRIDGE_IP"], conditions: {ready: true}}]
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
---
# The apiserver calls kubelets (logs, exec) with this identity; kubelets ask the apiserver
# (webhook authorization) whether it may.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "kubegan:apiserver-kubelet-client"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:kubelet-api-admin"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: kube-apiserver-kubelet-client}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "kubegan:coredns"}
rules:
- {apiGroups: [""], resources: [services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "kubegan:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "kubegan:coredns"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "kubegan:coredns"}]
---
# kube-router's network policy controller (KUBEGAN_NETWORK_POLICY=kube-router): reads only.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "kubegan:kube-router"}
rules:
- {apiGroups: [""], resources: [pods, namespaces, nodes, services, endpoints], verbs: [get, list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [get, list, watch]}
- {apiGroups: [networking.k8s.io], resources: [networkpolicies], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "kubegan:kube-router"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "kubegan:kube-router"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "kubegan:kube-router"}]
YAML
}

shared_volumes() {
  # Checkpoints must survive the node that wrote them: directories on this machine's own
  # filesystem, which every real node (they share the host's mount namespace) mounts read-write
  # at once, offered as ReadWriteMany PersistentVolumes. Workers run as uid/gid 1000 and a
  # hostPath volume ignores fsGroup, hence the owner. On a cloud this is Filestore / Azure Files.
  [[ "$SHARED_VOLUMES" =~ ^[0-9]+$ ]] || die "KUBEGAN_SHARED_VOLUMES must be a number"
  local k dir
  for ((k = 1; k <= SHARED_VOLUMES; k++)); do
    dir="$SHARED_DIR/checkpoints-$k"
    mkdir -p "$dir"; chown 1000:1000 "$dir"; chmod 0775 "$dir"
    kubectl apply --server-side --force-conflicts --field-manager=kubegan-real-node-up -f - >/dev/null <<YAML
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $SHARED_PV-$k
  labels: {kubegan.io/local-shared: "true"}
spec:
  capacity: {storage: 20Gi}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: $SHARED_STORAGE_CLASS
  hostPath: {path: $dir, type: Directory}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubegan.io/real-node, operator: In, values: ["true"]}]
YAML
  done
}

start_coredns() {
  local coredns
  coredns="$(awk '$1 == "coredns" {print $2}' <<<"$NODE_BINARIES")"
  [[ -x "$coredns" ]] || die "no coredns at $coredns; run make node-binaries"
  mkdir -p "$COREDNS_DIR"
  gen_client_cert "$COREDNS_DIR" coredns "kubegan:coredns"
  write_kubeconfig "$COREDNS_DIR/kubeconfig" "https://127.0.0.1:$APISERVER_PORT" "kubegan:coredns" \
    "$COREDNS_DIR/coredns.crt" "$COREDNS_DIR/coredns.key"
  cat >"$COREDNS_DIR/Corefile.new" <<COREFILE
# cluster.local for the real nodes' pods (hack/real-node-up.sh). Nothing else resolves: this
# machine has no upstream resolver for pods.
cluster.local:53 in-addr.arpa:53 {
    bind $HOST_BRIDGE_IP
    errors
    ready $HOST_BRIDGE_IP:$COREDNS_READY_PORT
    health $HOST_BRIDGE_IP:$COREDNS_HEALTH_PORT
    kubernetes cluster.local in-addr.arpa {
        kubeconfig $COREDNS_DIR/kubeconfig kubegan-local
        pods insecure
        ttl 5
    }
    cache 5
}
.:53 {
    bind $HOST_BRIDGE_IP
    errors
}
COREFILE
  # A CoreDNS started from another Corefile (an older checkout's: other ports) is restarted;
  # it reads its Corefile only when it starts.
  if ! cmp -s "$COREDNS_DIR/Corefile.new" "$COREDNS_DIR/Corefile" && pid_alive coredns; then
    log "Corefile changed: restarting CoreDNS"
    stop_pid "$(cat "$PIDS/coredns.pid")"
  fi
  mv -f "$COREDNS_DIR/Corefile.new" "$COREDNS_DIR/Corefile"
  # -pidfile under $RUN_ROOT: its command line names the site, so real-node-down and the e2e
  # tier's leftover check find it even when the cluster dir is gone.
  if ! pid_alive coredns; then
    start_proc coredns "$coredns" -conf "$COREDNS_DIR/Corefile" -pidfile "$RUN_ROOT/coredns.pid"
  fi
  wait_until "CoreDNS ready on $HOST_BRIDGE_IP:$COREDNS_READY_PORT (log: $LOGS/coredns.log)" \
    curl -fsS "http://$HOST_BRIDGE_IP:$COREDNS_READY_PORT/ready"
}

node_labels() {  # GKE spot CPU pool, plus kubegan.io/real-node=true
  echo "cloud.google.com/gke-nodepool=real-spot,cloud.google.com/gke-spot=true,cloud.google.com/gke-provisioning=spot,cloud.google.com/machine-family=e2,node.kubernetes.io/instance-type=e2-standard-2,topology.kubernetes.io/region=us-central1,topology.kubernetes.io/zone=us-central1-a,kubegan.io/real-node=true"
}

seed_images() {  # seed_images <containerd root>: a new node's root from the node image store
  local root="$1" store="$NODE_IMAGE_STORE/root" db
  [[ -e "$store/io.containerd.metadata.v1.bolt/meta.db" ]] || return 0
  [[ ! -e "$root/io.containerd.metadata.v1.bolt/meta.db" ]] || return 0   # not a new node
  exec 8>"$NODE_IMAGE_STORE.lock"; flock -s 8   # not while seed-node-images.sh writes
  rm -rf "$root"
  if cp -al "$store" "$root" 2>/dev/null; then
    # Bolt databases are rewritten in place: each node its own copy. Blobs and unpacked layers
    # are never written after they are committed, so the nodes may share them.
    for db in io.containerd.metadata.v1.bolt/meta.db io.containerd.snapshotter.v1.overlayfs/metadata.db; do
      [[ -e "$store/$db" ]] || continue
      rm -f "$root/$db"; cp "$store/$db" "$root/$db"
    done
    rm -rf "$root/io.containerd.grpc.v1.introspection"   # its uuid: one per containerd
    log "  containerd root seeded from the node image store (hard links)"
  else
    rm -rf "$root"; mkdir -p "$root"
    log "  cannot hard-link $store into $root (another filesystem?): use make load-images"
  fi
  flock -u 8
}

start_node() {  # start_node <i>
  local i="$1" node ns dir run
  node="$(node_name "$i")"; ns="$(netns_name "$i")"; dir="$(node_dir "$i")"; run="$(node_run_dir "$i")"
  setup_node_network "$i"
  setup_cgroups "$node"
  write_node_configs "$i"
  if ! pid_alive "containerd-$node"; then
    seed_images "$dir/containerd"
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
  if ! pid_alive "kube-proxy-$node"; then
    start_proc "kube-proxy-$node" nsenter --net="/run/netns/$ns" "$KUBE_PROXY" --config="$dir/kube-proxy.yaml" --v=1
  fi
}

node_ready() { [[ "$(kubectl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]; }

main() {
  preflight
  local i sock
  local -a indices=("$@")
  if ((${#indices[@]} == 0)); then mapfile -t indices < <(seq 1 "$REAL_NODES"); fi
  for i in "${indices[@]}"; do
    # shellcheck disable=SC2015  # die when either check fails
    [[ "$i" =~ ^[1-9][0-9]?$ ]] && ((i <= 50)) || die "node index '$i': must be 1..50"
    # The kubelet makes unix sockets under its root dir (device-plugins/kubelet.sock is the
    # longest path); past 107 bytes their bind fails and the node never gets Ready.
    sock="$(node_dir "$i")/kubelet/device-plugins/kubelet.sock"
    ((${#sock} <= 107)) || die "cluster dir $CLUSTER_DIR is too long for the kubelet's unix sockets ($sock: ${#sock} > 107 bytes); use a shorter KUBEGAN_CLUSTER_DIR"
  done
  mkdir -p "$STATE_ROOT" "$LOGS" "$PIDS" "$RUN_ROOT"
  setup_host_network
  start_relay
  make_images
  gen_client_cert "$STATE_ROOT/pki" kube-proxy system:kube-proxy
  gen_client_cert "$STATE_ROOT/pki" kube-router "kubegan:kube-router"
  apply_cluster_services
  shared_volumes
  start_coredns
  for i in "${indices[@]}"; do start_node "$i"; done
  setup_pod_routes
  for i in "${indices[@]}"; do
    wait_until "node $(node_name "$i") Ready (log: $LOGS/kubelet-$(node_name "$i").log)" node_ready "$(node_name "$i")"
    log "node $(node_name "$i"): Ready"
  done
  # After Ready: kube-router reads its Node object when it starts.
  [[ "$NETWORK_POLICY" != kube-router ]] || bash "$HACK_DIR/real-node-network-policy.sh" start "${indices[@]}"
  kubectl get nodes -l kubegan.io/real-node=true -o wide >&2
}

main "$@"
