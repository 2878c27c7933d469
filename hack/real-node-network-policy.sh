#!/usr/bin/env bash
# NetworkPolicy enforcement on the real nodes of one site (KUBEGAN_REAL_SITE), as GKE
# Dataplane V2 or Calico gives a cloud cluster: kube-router's network policy controller alone
# (--run-firewall; no routing, no service proxy), one process per node, inside the node's
# network namespace beside its kube-proxy. Its dataplane is iptables + ipset (this kernel has
# no nfqueue, which kube-network-policies needs). Test infrastructure only: it never goes into
# an image or the chart. See hack/README.md "NetworkPolicy enforcement".
#
# Usage: real-node-network-policy.sh start [i...]   start kube-router on nodes i (default: every
#                                                   running node of the site); waits until each
#                                                   has installed its chains
#        real-node-network-policy.sh stop [i...]    stop it and remove its iptables chains and
#                                                   ipsets: the nodes admit every pod again
# hack/real-node-up.sh runs `start` for each node it starts when KUBEGAN_NETWORK_POLICY is
# kube-router; hack/real-node-down.sh stops it with the node. Needs root, the nodes up
# (real-node-up.sh writes kube-router's kubeconfig and RBAC) and make node-binaries.
set -Eeuo pipefail
trap 'echo "real-node-network-policy.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"
# shellcheck source=hack/real-node-lib.sh
source "$HACK_DIR/real-node-lib.sh"

TIMEOUT="${KUBEGAN_UP_TIMEOUT:-120}"
SERVICE_CIDR=10.0.0.0/24        # hack/cluster-up.sh's --service-cluster-ip-range
KUBE_ROUTER_HEALTH_PORT=20244   # kube-router's default, inside the node's namespace only
# kube-router's own iptables chains (filter table) and ipsets: what `stop` removes.
KUBE_ROUTER_CHAINS='^(KUBE-ROUTER-|KUBE-POD-FW-|KUBE-NWPLCY-)'
KUBE_ROUTER_SETS='^(KUBE-SRC-|KUBE-DST-)'

log() { printf '[real-node-network-policy %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[real-node-network-policy] ERROR: %s\n' "$*" >&2; exit 1; }

in_node() { ip netns exec "$(netns_name "$1")" "${@:2}"; }  # in_node <i> <command...>

running_nodes() {  # the site's node indices that have a network namespace
  ip netns list 2>/dev/null | awk '{print $1}' | sed -n "s/^$NETNS_PREFIX-\([0-9][0-9]*\)\$/\1/p" | sort -n
}

chains_ready() {  # chains_ready <i>: kube-router has hooked its chains into FORWARD
  in_node "$1" iptables -S FORWARD 2>/dev/null | grep -q -- '-j KUBE-ROUTER-FORWARD'
}

start_node_policy() {  # start_node_policy <i>
  local i="$1" node dir kube_router deadline
  node="$(node_name "$i")"; dir="$(node_dir "$i")"
  kube_router="$(bash "$HACK_DIR/build-node-binaries.sh" --print | awk '$1 == "kube-router" {print $2}')"
  [[ -x "$kube_router" ]] || die "no kube-router at $kube_router; run make node-binaries"
  command -v ipset >/dev/null || die "ipset not found; run make node-binaries"
  [[ -s "$dir/kube-router.kubeconfig" ]] || die "$node has no kube-router kubeconfig; run hack/real-node-up.sh $i"
  # Traffic between two pods of one node crosses the bridge kgbr0 without being routed: only
  # br_netfilter shows it to iptables (a new namespace has this on; make sure of it).
  in_node "$i" sysctl -qw net.bridge.bridge-nf-call-iptables=1
  if ! pid_alive "kube-router-$node"; then
    start_proc "kube-router-$node" nsenter --net="/run/netns/$(netns_name "$i")" "$kube_router" \
      --run-firewall=true --run-router=false --run-service-proxy=false \
      --kubeconfig="$dir/kube-router.kubeconfig" --hostname-override="$node" \
      --service-cluster-ip-range="$SERVICE_CIDR" --health-port="$KUBE_ROUTER_HEALTH_PORT" --v=1
  fi
  deadline=$((SECONDS + TIMEOUT))
  until chains_ready "$i"; do
    pid_alive "kube-router-$node" || die "kube-router of $node exited (log: $LOGS/kube-router-$node.log)"
    ((SECONDS < deadline)) || die "kube-router of $node installed no chains in ${TIMEOUT}s (log: $LOGS/kube-router-$node.log)"
    sleep 1
  done
  log "node $i: NetworkPolicies enforced (kube-router, log $LOGS/kube-router-$node.log)"
}

remove_rules() {  # remove_rules <i>: kube-router's jumps, chains and ipsets in node i's namespace
  local i="$1" rule chain set
  local -a chains sets
  # The jumps from the built-in chains first, then its chains (flushed, so that none refers to
  # another), then the sets no rule uses any more.
  for chain in INPUT FORWARD OUTPUT; do
    while rule="$(in_node "$i" iptables -L "$chain" -n --line-numbers | awk '$2 ~ /^KUBE-ROUTER-/ {print $1; exit}')" \
          && [[ -n "$rule" ]]; do
      in_node "$i" iptables -D "$chain" "$rule"
    done
  done
  mapfile -t chains < <(in_node "$i" iptables -S | awk '$1 == "-N" {print $2}' | grep -E "$KUBE_ROUTER_CHAINS" || true)
  for chain in "${chains[@]}"; do in_node "$i" iptables -F "$chain"; done
  for chain in "${chains[@]}"; do in_node "$i" iptables -X "$chain"; done
  mapfile -t sets < <(in_node "$i" ipset list -n | grep -E "$KUBE_ROUTER_SETS" || true)
  for set in "${sets[@]}"; do in_node "$i" ipset destroy "$set"; done
  local left
  left="$(in_node "$i" iptables -S | grep -E "KUBE-ROUTER-|KUBE-POD-FW-|KUBE-NWPLCY-" || true)"
  [[ -z "$left" ]] || die "kube-router rules left in $(netns_name "$i"): $(head -3 <<<"$left")"
}

stop_node_policy() {  # stop_node_policy <i>
  local i="$1" node
  node="$(node_name "$i")"
  if pid_alive "kube-router-$node"; then stop_pid "$(cat "$PIDS/kube-router-$node.pid")"; fi
  rm -f "$PIDS/kube-router-$node.pid"
  if ip netns list | awk '{print $1}' | grep -qxF "$(netns_name "$i")"; then remove_rules "$i"; fi
  log "node $i: NetworkPolicies no longer enforced"
}

main() {
  [[ $(id -u) -eq 0 ]] || die "needs root (network namespaces)"
  local action="${1:-}" i
  shift || true
  local -a indices=("$@")
  if ((${#indices[@]} == 0)); then mapfile -t indices < <(running_nodes); fi
  for i in "${indices[@]}"; do [[ "$i" =~ ^[1-9][0-9]?$ ]] || die "node index '$i': must be 1..99"; done
  case "$action" in
    start) for i in "${indices[@]}"; do start_node_policy "$i"; done ;;
    stop) for i in "${indices[@]}"; do stop_node_policy "$i"; done ;;
    *) die "usage: real-node-network-policy.sh start|stop [node index...]" ;;
  esac
}

main "$@"
