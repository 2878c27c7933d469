#!/usr/bin/env bash
# Remove every real node of one site (KUBEGAN_REAL_SITE, default real; names in
# hack/real-node-lib.sh) started by hack/real-node-up.sh: kubelets, pod containers and their
# network namespaces, containerd and its shims, mounts under the node directories, cgroups,
# node network namespaces, veths, routes, the host bridge (kg-nodes for site real), the
# apiserver relay, CoreDNS, the Node objects, and the state in <cluster dir>/real-nodes and
# /run/kubegan-<site>.
# Only one cluster dir at a time can own a site's real nodes (real-node-up.sh checks), so this
# removes every node of the site it finds (kubegan-real-* for site real), also ones whose state
# dir is already gone. It touches nothing of another site: every name, address, path and
# process it looks for is this site's.
# Safe to run twice. Leaves the control plane alone.
# Usage: real-node-down.sh          everything
#        real-node-down.sh 2        only node 2 (its pods die with it; the Node object is deleted)
set -Eeuo pipefail
trap 'echo "real-node-down.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"
# shellcheck source=hack/real-node-lib.sh
source "$HACK_DIR/real-node-lib.sh"
if [[ -s "$NET_OWNER" ]]; then   # the cluster that owns the site's real nodes, if not ours
  CLUSTER_DIR="$(cat "$NET_OWNER")"; ADMIN_KUBECONFIG="$CLUSTER_DIR/kubeconfig"
  STATE_ROOT="$CLUSTER_DIR/real-nodes"; LOGS="$STATE_ROOT/logs"; PIDS="$STATE_ROOT/pids"
  COREDNS_DIR="$STATE_ROOT/coredns"; SITE_FILE="$STATE_ROOT/site"
fi
# A cluster dir whose real nodes are on another site: its state, pid files and objects are that
# site's, so removing them here would take another site's CoreDNS and relay with them.
if [[ -s "$SITE_FILE" && "$(cat "$SITE_FILE")" != "$SITE" ]]; then
  echo "real-node-down: the real nodes of $CLUSTER_DIR are on site $(cat "$SITE_FILE"), not $SITE; use KUBEGAN_REAL_SITE=$(cat "$SITE_FILE")" >&2
  exit 2
fi

log() { printf '[real-node-down %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

stop_named() {  # stop_named <pid-file name>
  if pid_alive "$1"; then log "stopping $1"; stop_pid "$(cat "$PIDS/$1.pid")"; fi
  rm -f "$PIDS/$1.pid"
}
pids_with_arg() {  # processes whose command line contains the string (our unique paths only)
  # One pgrep (the string as a literal regex), not a grep per process: with real nodes up the
  # host runs hundreds of processes, and this runs several times for every node.
  # shellcheck disable=SC2001,SC2016  # sed: escape every regex character; $ is literal here
  pgrep -f -- "$(sed 's/[][\.*^$()+?{}|]/\\&/g' <<< "$1")" || true
}
unmount_under() {  # unmount everything mounted below a directory, deepest first
  local dir="$1" m
  [[ -n "$dir" && "$dir" == /*/* ]] || return 0
  awk -v d="$dir/" 'index($5 "/", d) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
}
# A connection the host (the apiserver relay, CoreDNS, the apiserver calling a kubelet) still
# has with a node namespace when the namespace goes never gets its FIN acknowledged: it lingers
# for minutes in FIN-WAIT-1 (with the data it was sending) or LAST-ACK on the relay's port,
# the control plane's apiserver port. So a node's network is removed only once the host has no
# connection left with it: its processes are stopped by then, so their ends have closed; the
# host's ends get a moment to finish closing, and what is still open after it is aborted.
CLOSE_SECONDS="${KUBEGAN_CLOSE_SECONDS:-5}"
host_connections() {  # host_connections <ss filter>: the host's TCP sockets not yet closed
  ss -Htn state connected exclude time-wait "( $1 )" 2>/dev/null || true
}
close_connections() {  # close_connections <cidr>...: with the node addresses and pod CIDRs given
  local filter="" c deadline=$((SECONDS + CLOSE_SECONDS))
  for c in "$@"; do filter+="${filter:+ or }dst $c"; done
  while [[ -n "$(host_connections "$filter")" ]] && ((SECONDS < deadline)); do sleep 0.2; done
  [[ -n "$(host_connections "$filter")" ]] || return 0
  log "aborting $(host_connections "$filter" | wc -l) connection(s) with $* still open after ${CLOSE_SECONDS}s"
  ss -HtnK state connected exclude time-wait "( $filter )" >/dev/null 2>&1 || true
  [[ -z "$(host_connections "$filter")" ]] || log "could not abort: $(host_connections "$filter" | paste -sd ';')"
}
site_netns() {  # this site's node network namespaces
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NETNS_PREFIX-[0-9]+\$" || true
}
node_indices() {  # every node index of this site found anywhere (state dirs, run dirs, netns, cgroups)
  {
    compgen -G "$STATE_ROOT/$NODE_PREFIX-*" || true
    compgen -G "$RUN_ROOT/$NODE_PREFIX-*" || true
    compgen -G "/sys/fs/cgroup/cpu/$CGROUP_PARENT/$NODE_PREFIX-*" || true
    site_netns
  } | sed -n "s#^\(.*/\)\{0,1\}\($NODE_PREFIX\|$NETNS_PREFIX\)-\([0-9][0-9]*\)\$#\3#p" | sort -un
}

remove_node() {  # remove_node <i>
  local i="$1" node ns dir run sock
  node="$(node_name "$i")"; ns="$(netns_name "$i")"; dir="$(node_dir "$i")"; run="$(node_run_dir "$i")"
  sock="$run/containerd.sock"
  log "removing $node"
  stop_named "kubelet-$node"
  local p; for p in $(pids_with_arg "$dir/kubelet.yaml"); do stop_pid "$p"; done
  stop_named "kube-proxy-$node"
  for p in $(pids_with_arg "$dir/kube-proxy.yaml"); do stop_pid "$p"; done
  stop_named "kube-router-$node"   # hack/real-node-network-policy.sh (its rules go with the netns)
  for p in $(pids_with_arg "$dir/kube-router.kubeconfig"); do stop_pid "$p"; done
  # Pod sandboxes and containers: kill the tasks, release the pods' network namespaces.
  if [[ -S "$sock" ]] && ctr --address "$sock" version >/dev/null 2>&1; then
    local id netns_paths=()
    for id in $(ctr --address "$sock" -n k8s.io containers ls -q 2>/dev/null); do
      rm -f "/var/lib/cni/results/cni-loopback-$id-lo"   # libcni's result cache (no CNI DEL ran)
      while read -r p; do [[ -n "$p" ]] && netns_paths+=("$p"); done < <(
        ctr --address "$sock" -n k8s.io containers info "$id" 2>/dev/null \
          | jq -r '.Spec.linux.namespaces[]? | select(.type == "network") | .path // empty' 2>/dev/null || true)
      ctr --address "$sock" -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    sleep 1
    for id in $(ctr --address "$sock" -n k8s.io containers ls -q 2>/dev/null); do
      ctr --address "$sock" -n k8s.io tasks rm -f "$id" >/dev/null 2>&1 || true
      ctr --address "$sock" -n k8s.io containers rm "$id" >/dev/null 2>&1 || true
    done
    for p in "${netns_paths[@]}"; do
      case "$p" in /run/netns/cni-*|/var/run/netns/cni-*)
        umount "$p" 2>/dev/null || true; rm -f "$p" ;;
      esac
    done
  fi
  stop_named "containerd-$node"
  for p in $(pids_with_arg "$dir/containerd.toml"); do stop_pid "$p"; done
  for p in $(pids_with_arg "$sock"); do stop_pid "$p"; done   # containerd-shim-runc-v2 -address <sock>
  # Whatever still runs in the node's cgroups is one of its containers.
  local cg
  for cg in /sys/fs/cgroup/*/"$CGROUP_PARENT/$node"; do
    [[ -d "$cg" ]] || continue
    find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | while read -r p; do
      kill -KILL "$p" 2>/dev/null || true
    done
  done
  unmount_under "$dir"; unmount_under "$run"
  for cg in /sys/fs/cgroup/*/"$CGROUP_PARENT/$node"; do
    [[ -d "$cg" ]] || continue
    find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || sleep 1
    [[ ! -d "$cg" ]] || find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || log "could not remove cgroup $cg"
  done
  rm -f /var/lib/cni/results/"kubegan-$node"-*
  close_connections "$(node_ip "$i")/32" "$(pod_cidr "$i")"
  ip route del "$(pod_cidr "$i")" 2>/dev/null || true
  local other
  for other in $(site_netns); do
    ip -n "$other" route del "$(pod_cidr "$i")" 2>/dev/null || true
  done
  if ip netns list | awk '{print $1}' | grep -qx "$ns"; then ip netns del "$ns"; fi
  ip link del "$(host_veth "$i")" 2>/dev/null || true
  rm -rf "$dir" "$run"
  if [[ -s "$ADMIN_KUBECONFIG" && -x "$CLUSTER_DIR/bin/kubectl" ]]; then
    kubectl delete node "$node" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  fi
}

main() {
  [[ $(id -u) -eq 0 ]] || { echo "real-node-down: needs root" >&2; exit 1; }
  local i
  if (($# > 0)); then   # only these nodes, as when a cloud reclaims them; the rest stays up
    for i in "$@"; do
      [[ "$i" =~ ^[1-9][0-9]?$ ]] || { echo "real-node-down: node index '$i': must be 1..99" >&2; exit 2; }
    done
    for i in "$@"; do remove_node "$i"; done
    log "removed node(s) $*"
    return 0
  fi
  # The nodes at once: each one's removal is mostly waiting (a kill's grace, its connections
  # closing), and nothing of one node's removal touches another's.
  local removing=() failed=0
  for i in $(node_indices); do remove_node "$i" & removing+=($!); done
  for i in "${removing[@]}"; do wait "$i" || failed=1; done
  ((failed == 0)) || { log "a node's removal failed (above)"; exit 1; }
  stop_named coredns
  local p; for p in $(pids_with_arg "$COREDNS_DIR/Corefile") $(pids_with_arg "$RUN_ROOT/coredns.pid"); do stop_pid "$p"; done
  if [[ -s "$ADMIN_KUBECONFIG" && -x "$CLUSTER_DIR/bin/kubectl" ]]; then
    kubectl delete -n kube-system service/kube-dns endpointslice/kube-dns-host --ignore-not-found --wait=false >/dev/null 2>&1 || true
    kubectl delete -n default endpointslice/kubernetes --ignore-not-found --wait=false >/dev/null 2>&1 || true
    kubectl delete pv -l kubegan.io/local-shared=true --ignore-not-found --wait=false >/dev/null 2>&1 || true
  fi
  stop_named apiserver-relay
  for p in $(pids_with_arg "$(relay_bind)"); do stop_pid "$p"; done
  close_connections "$NODE_NETWORK" "$POD_NETWORK"   # nodes whose namespace had already gone
  if ip link show "$HOST_BRIDGE" >/dev/null 2>&1; then ip link del "$HOST_BRIDGE"; log "deleted bridge $HOST_BRIDGE"; fi
  local cg; for cg in /sys/fs/cgroup/*/"$CGROUP_PARENT"; do if [[ -d "$cg" ]]; then rmdir "$cg" 2>/dev/null || true; fi; done
  unmount_under "$STATE_ROOT"; unmount_under "$RUN_ROOT"
  rm -rf "$STATE_ROOT" "$RUN_ROOT"
  # containerd 1.6 keeps shim sockets and fifos in fixed places; remove those dirs when empty.
  local d
  for d in /run/containerd/s /run/containerd/fifo /run/containerd/runc/k8s.io /run/containerd/runc \
           /run/containerd /var/lib/cni/results /var/lib/cni; do
    if [[ -d "$d" ]]; then rmdir "$d" 2>/dev/null || true; fi
  done
  log "real nodes removed"
}

main "$@"
