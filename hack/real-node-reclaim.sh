#!/usr/bin/env bash
# Reclaim one real node the way a cloud reclaims a spot VM, with graceful node shutdown on:
#   1. notice: the node is tainted (GKE's cloud.google.com/impending-node-termination) and its
#      kubelet stops (the VM is going down; nothing will restart or report its pods);
#   2. every pod container on the node gets SIGTERM and up to --grace seconds to exit
#      (GKE gives non-system pods about 15 s), then SIGKILL;
#   3. each pod that was on the node is marked as the kubelet's shutdown manager marks it:
#      phase Failed, reason Terminated, condition DisruptionTarget (TerminationByKubelet);
#   4. the VM is gone: hack/real-node-down.sh <i> removes containerd, the network namespace and
#      the Node object.
# A replacement node is `hack/real-node-up.sh <j>` (what a node-pool autoscaler would add).
# Prints one line per phase on stdout, "<phase> <unix time>", for bench/e2e_preemption.py:
#   notice, stopped (containers gone), marked, gone (Node deleted).
# Usage: real-node-reclaim.sh <i> [--grace SECONDS]
# Environment: KUBEGAN_REAL_SITE, KUBEGAN_CLUSTER_DIR as for hack/real-node-up.sh (node <i> of
# that site and cluster).
set -Eeuo pipefail
trap 'echo "real-node-reclaim.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"
# shellcheck source=hack/real-node-lib.sh
source "$HACK_DIR/real-node-lib.sh"

log() { printf '[real-node-reclaim %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'real-node-reclaim: %s\n' "$*" >&2; exit 2; }
mark() { printf '%s %s\n' "$1" "$(date +%s.%N)"; }

index="${1:-}"; shift || true
grace=15
while (($#)); do
  case "$1" in
    --grace) grace="${2:-}"; shift 2 || die "--grace needs a number of seconds" ;;
    *) die "unknown argument '$1' (usage: real-node-reclaim.sh <i> [--grace SECONDS])" ;;
  esac
done
[[ "$index" =~ ^[1-9][0-9]?$ ]] || die "node index '$index': must be 1..99"
[[ "$grace" =~ ^[0-9]{1,3}$ ]] || die "--grace '$grace': whole seconds, 0..999"
[[ $(id -u) -eq 0 ]] || die "needs root"
node="$(node_name "$index")"; sock="$(node_run_dir "$index")/containerd.sock"
[[ -S "$sock" ]] || die "$node is not running here (no $sock)"

mark notice
log "$node: reclaim notice (grace ${grace}s)"
# The taint and the list of the pods bound to the node (nothing changes that binding until they
# are marked below) go to the apiserver beside the signals: on a loaded machine the two kubectl
# calls took longer than the rest of an epoch of the e2e tier's jobs, and the SIGTERM is what
# the trainer sees first on a cloud too.
pods_file="$(mktemp)"; trap 'rm -f "$pods_file"' EXIT
kubectl taint node "$node" cloud.google.com/impending-node-termination=true:NoSchedule --overwrite >/dev/null &
taint_pid=$!
kubectl get pods -A --field-selector "spec.nodeName=$node" \
  -o jsonpath='{range .items[*]}{.metadata.namespace}{" "}{.metadata.name}{"\n"}{end}' >"$pods_file" &
list_pid=$!

# The kubelet goes down with the VM: stop it first, so it neither restarts containers nor
# reports their exits as ordinary failures.
if pid_alive "kubelet-$node"; then kill -KILL "$(cat "$PIDS/kubelet-$node.pid")" 2>/dev/null || true; fi

ctr_() { ctr --address "$sock" -n k8s.io "$@"; }
running() {  # app containers (not pod sandboxes) whose task still runs: one list of each
  join <(ctr_ containers ls -q 'labels."io.cri-containerd.kind"==container' 2>/dev/null | sort) \
       <(ctr_ tasks ls 2>/dev/null | awk '$3 == "RUNNING" {print $1}' | sort)
}
for id in $(running); do ctr_ tasks kill -s SIGTERM "$id" >/dev/null 2>&1 || true; done
deadline=$((SECONDS + grace))
while [[ -n "$(running)" ]] && ((SECONDS < deadline)); do sleep 0.2; done
left="$(running)"
if [[ -n "$left" ]]; then
  log "$node: $(wc -w <<<"$left") container(s) still running after ${grace}s; SIGKILL"
  for id in $left; do ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
fi
mark stopped
wait "$taint_pid" || die "could not taint $node"
wait "$list_pid" || die "could not list the pods on $node"
pods="$(cat "$pods_file")"

# What the kubelet's shutdown manager writes for each pod it terminated.
now="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
message="Pod was terminated in response to imminent node shutdown."
while read -r ns name; do
  [[ -n "$name" ]] || continue
  kubectl patch pod -n "$ns" "$name" --subresource=status --type=strategic -p "$(jq -cn \
    --arg now "$now" --arg msg "$message" '{status: {phase: "Failed", reason: "Terminated",
      message: $msg, conditions: [{type: "DisruptionTarget", status: "True",
      reason: "TerminationByKubelet", message: $msg, lastTransitionTime: $now}]}}')" \
    >/dev/null 2>&1 || log "could not mark $ns/$name (already gone?)"
done <<<"$pods"
mark marked

bash "$HACK_DIR/real-node-down.sh" "$index" >&2
mark gone
log "$node reclaimed"
