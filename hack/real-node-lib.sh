# shellcheck shell=bash
# shellcheck disable=SC2034  # the names are for the scripts that source this file
# Shared by hack/real-node-up.sh and hack/real-node-down.sh (sourced, not run).
# Names, addresses and directories of the real nodes; see real-node-up.sh for the layout.
#
# A *site* (KUBEGAN_REAL_SITE) is one set of machine-wide names and addresses: node names,
# network namespaces, host bridge and veths, node and pod networks, /run dir, cgroup parent,
# CoreDNS address. Two sites share nothing on the host, so a contributor's dev cluster (site
# `real`, the default: the names these scripts always used), the e2e tier (site `e2e`) and the
# README's block as the e2e tier runs it (site `docs`, tests/e2e/test_readme_local_cluster.py)
# run side by side; each site belongs to one cluster dir at a time (NET_OWNER).
SITE="${KUBEGAN_REAL_SITE:-real}"
REAL_SITES="real e2e docs"
case "$SITE" in
  # Linux interface names are at most 15 characters: bridge and veth prefixes stay short
  # (veths are <prefix>-h<i> / <prefix>-n<i>, i <= 50). The node and pod networks of each site
  # are /16s nothing else on this machine routes (services 10.0.0.0/24 and KWOK's fake pod IPs
  # 10.244.0.0/16 live only inside the clusters).
  real)
    NODE_PREFIX=kubegan-real; NETNS_PREFIX=kg-real; HOST_BRIDGE=kg-nodes; VETH_PREFIX=kgn
    RUN_ROOT=/run/kubegan-real; CGROUP_PARENT=kubegan; NODE_NET=10.246; POD_NET=10.245 ;;
  e2e)
    NODE_PREFIX=kubegan-e2e; NETNS_PREFIX=kg-e2e; HOST_BRIDGE=kg-e2e-nodes; VETH_PREFIX=kge
    RUN_ROOT=/run/kubegan-e2e; CGROUP_PARENT=kubegan-e2e; NODE_NET=10.248; POD_NET=10.247 ;;
  docs)
    NODE_PREFIX=kubegan-docs; NETNS_PREFIX=kg-docs; HOST_BRIDGE=kg-docs-nodes; VETH_PREFIX=kgd
    RUN_ROOT=/run/kubegan-docs; CGROUP_PARENT=kubegan-docs; NODE_NET=10.250; POD_NET=10.249 ;;
  *)
    echo "real nodes: unknown KUBEGAN_REAL_SITE '$SITE' (one of: $REAL_SITES)" >&2; exit 2 ;;
esac
CLUSTER_DIR="${KUBEGAN_CLUSTER_DIR:-$REPO_ROOT/.cluster}"
APISERVER_PORT="${KUBEGAN_APISERVER_PORT:-6443}"
REAL_NODES="${REAL_NODES:-1}"
ADMIN_KUBECONFIG="$CLUSTER_DIR/kubeconfig"
STATE_ROOT="$CLUSTER_DIR/real-nodes"          # per-node dirs, images, logs, pid files
LOGS="$STATE_ROOT/logs"; PIDS="$STATE_ROOT/pids"
SITE_FILE="$STATE_ROOT/site"                  # the site this cluster dir's real nodes are on
# $RUN_ROOT: sockets and containerd state (short paths); cgroups /<ctrl>/$CGROUP_PARENT/<node>
NET_OWNER="$RUN_ROOT/owner"                    # which cluster dir owns this site's host-side network
NODE_NETWORK=$NODE_NET.0.0/24                  # node i: $NODE_NET.0.<10+i>
HOST_BRIDGE_IP=$NODE_NET.0.1                   # the host's address on it
PAUSE_IMAGE=kubegan.local/pause:busybox
BUSYBOX_IMAGE=kubegan.local/busybox:1.35
POD_NETWORK=$POD_NET.0.0/16                    # node i's pods: $POD_NET.<i>.0/24
CLUSTER_DNS_IP=10.0.0.10                       # Service kube-system/kube-dns (service CIDR 10.0.0.0/24)
COREDNS_DIR="$STATE_ROOT/coredns"              # CoreDNS runs on the host, at $HOST_BRIDGE_IP:53
# CoreDNS's health and ready endpoints, on $HOST_BRIDGE_IP only: ports no common server
# defaults to (CoreDNS's own 8080/8181 made `kubegan operator`'s liveness port, 8080 on every
# address, fail beside a dev cluster) and below the port helper's range (>= 20000,
# trainer/kubegan_trainer/launch/ports.py), so nothing the repo starts is handed them.
COREDNS_HEALTH_PORT=18053
COREDNS_READY_PORT=18054
REGISTRY_HOSTS_DIR="$STATE_ROOT/certs.d"        # containerd's hosts.toml per registry, every node
SHARED_DIR="$STATE_ROOT/shared"                # hostPaths of the ReadWriteMany checkpoint volumes,
SHARED_PV=kubegan-local-checkpoints            # PersistentVolumes $SHARED_PV-<k>, k = 1..N
SHARED_VOLUMES="${KUBEGAN_SHARED_VOLUMES:-3}"  # (one claim binds one volume)
SHARED_STORAGE_CLASS=kubegan-local-shared      # the storage class claims name

node_name() { echo "$NODE_PREFIX-$1"; }
netns_name() { echo "$NETNS_PREFIX-$1"; }
host_veth() { echo "$VETH_PREFIX-h$1"; }       # the host end of node i's eth0
node_veth() { echo "$VETH_PREFIX-n$1"; }       # its other end, until it moves into the namespace
node_ip() { echo "$NODE_NET.0.$((10 + $1))"; }
pod_cidr() { echo "$POD_NET.$1.0/24"; }        # pod CIDRs $POD_NET.<i>.0/24
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
  # Every process names a file under this cluster's state dir, except the relay, which names
  # this site's bridge address (with its comma: 10.246.0.1 must not match 10.246.0.11).
  grep -qaF -e "$STATE_ROOT/" -e "$(relay_bind)" "/proc/$pid/cmdline" 2>/dev/null
}
relay_bind() { echo "bind=$HOST_BRIDGE_IP,"; }  # in the relay's socat address

print_site() {  # KEY=VALUE lines of this site's names and addresses (tests/e2e reads them)
  printf '%s\n' "SITE=$SITE" "NODE_PREFIX=$NODE_PREFIX" "NETNS_PREFIX=$NETNS_PREFIX" \
    "HOST_BRIDGE=$HOST_BRIDGE" "VETH_PREFIX=$VETH_PREFIX" "RUN_ROOT=$RUN_ROOT" \
    "CGROUP_PARENT=$CGROUP_PARENT" "NODE_NETWORK=$NODE_NETWORK" "POD_NETWORK=$POD_NETWORK" \
    "HOST_BRIDGE_IP=$HOST_BRIDGE_IP" "RELAY_BIND=$(relay_bind)" \
    "COREDNS_HEALTH_PORT=$COREDNS_HEALTH_PORT" "COREDNS_READY_PORT=$COREDNS_READY_PORT"
}

stop_pid() {  # stop_pid <pid>: TERM, then KILL after 10 s
  local pid="$1" n
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((n = 0; n < 100; n++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  for ((n = 0; n < 50; n++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
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
