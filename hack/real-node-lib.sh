# Shared by hack/real-node-up.sh and hack/real-node-down.sh (sourced, not run).
# Names, addresses and directories of the real nodes; see real-node-up.sh for the layout.
CLUSTER_DIR="${KUBEGAN_CLUSTER_DIR:-$REPO_ROOT/.cluster}"
APISERVER_PORT="${KUBEGAN_APISERVER_PORT:-6443}"
REAL_NODES="${REAL_NODES:-1}"
ADMIN_KUBECONFIG="$CLUSTER_DIR/kubeconfig"
STATE_ROOT="$CLUSTER_DIR/real-nodes"          # per-node dirs, images, logs, pid files
LOGS="$STATE_ROOT/logs"; PIDS="$STATE_ROOT/pids"
RUN_ROOT=/run/kubegan-real                     # sockets and containerd state (short paths)
NET_OWNER="$RUN_ROOT/owner"                    # which cluster dir owns the host-side network
HOST_BRIDGE=kg-nodes
HOST_BRIDGE_IP=10.246.0.1                      # node network 10.246.0.0/24
CGROUP_PARENT=kubegan                          # /sys/fs/cgroup/<ctrl>/kubegan/<node>
PAUSE_IMAGE=kubegan.local/pause:busybox
BUSYBOX_IMAGE=kubegan.local/busybox:1.35
POD_NETWORK=10.245.0.0/16                      # node i's pods: 10.245.<i>.0/24
CLUSTER_DNS_IP=10.0.0.10                       # Service kube-system/kube-dns (service CIDR 10.0.0.0/24)
COREDNS_DIR="$STATE_ROOT/coredns"              # CoreDNS runs on the host, at $HOST_BRIDGE_IP:53
SHARED_DIR="$STATE_ROOT/shared"                # hostPaths of the ReadWriteMany checkpoint volumes,
SHARED_PV=kubegan-local-checkpoints            # PersistentVolumes $SHARED_PV-<k>, k = 1..N
SHARED_VOLUMES="${KUBEGAN_SHARED_VOLUMES:-3}"  # (one claim binds one volume)
SHARED_STORAGE_CLASS=kubegan-local-shared      # the storage class claims name

node_name() { echo "kubegan-real-$1"; }
netns_name() { echo "kg-real-$1"; }
node_ip() { echo "10.246.0.$((10 + $1))"; }
pod_cidr() { echo "10.245.$1.0/24"; }          # pod CIDRs 10.245.<i>.0/24
node_dir() { echo "$STATE_ROOT/$(node_name "$1")"; }
# A containerd root with the images of hack/build-images.sh (hack/seed-node-images.sh); new
# nodes get hard links to it.
NODE_IMAGE_STORE="${KUBEGAN_NODE_IMAGE_STORE:-$HOME/.cache/kubegan/node-image-store}"
node_run_dir() { echo "$RUN_ROOT/$(node_name "$1")"; }

kubectl() { "$CLUSTER_DIR/bin/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }

pid_alive() {  # pid_alive <name>: the pid file's process is alive and was started for this cluster
  local f="$PIDS/$1.pid" pid
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f" 2>/dev/null)"; [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  grep -qa -e "$STATE_ROOT" -e "$HOST_BRIDGE_IP" "/proc/$pid/cmdline" 2>/dev/null
}

start_proc() {  # start_proc <name> <command...>: own session, log in $LOGS, pid in $PIDS
  local name="$1"; shift
  echo "=== $(date -u +%FT%TZ) starting $name" >>"$LOGS/$name.log"
  setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$name.pid"
  printf '[real-nodes %s] started %s (pid %s, log %s)\n' "$(date +%H:%M:%S)" "$name" "$!" "$LOGS/$name.log" >&2
}

image_containerd_config() {  # image_containerd_config <root> <state> <socket> <opt dir>: TOML
  # A containerd that only stores images (no CRI, no pods): the node image store
  # (seed-node-images.sh) and the throwaway one of test-images.sh.
  cat <<TOML
version = 2
root = "$1"
state = "$2"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$3"
[ttrpc]
  address = "$3.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$4"
TOML
}
