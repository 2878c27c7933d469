#!/usr/bin/env bash
# Stop the local control plane started by hack/cluster-up.sh and delete its state
# (<repo>/.cluster: etcd data, certificates, kubeconfig, logs). Safe to run twice.
# The binary cache (~/.cache/kubegan/bin) is kept.
set -Euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"
CLUSTER_DIR="${KUBEGAN_CLUSTER_DIR:-$REPO_ROOT/.cluster}"
PIDS="$CLUSTER_DIR/pids"

log() { printf '[cluster-down %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Our processes are the ones whose command line runs a binary from $CLUSTER_DIR/bin.
ours() { [[ -r "/proc/$1/cmdline" && "$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null)" == "$CLUSTER_DIR/bin/"* ]]; }

stop_pid() {  # stop_pid <name> <pid>
  local name="$1" pid="$2"
  kill -0 "$pid" 2>/dev/null || return 0
  ours "$pid" || { log "$name: pid $pid is not ours any more; leaving it"; return 0; }
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  log "$name did not exit after 10 s; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 1 25); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  log "WARNING: $name (pid $pid) is still alive"
}

if [[ -d "$CLUSTER_DIR" ]]; then
  # Reverse start order: clients first, etcd last.
  for name in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    f="$PIDS/$name.pid"
    [[ -f "$f" ]] || continue
    pid="$(cat "$f" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] && stop_pid "$name" "$pid"
    rm -f "$f"
  done
  # Robustness: pid files lost or stale -> look for leftovers running our binaries.
  for p in /proc/[0-9]*; do
    pid="${p#/proc/}"
    ours "$pid" 2>/dev/null && stop_pid "$(tr '\0' ' ' <"$p/cmdline" | cut -d' ' -f1 | xargs basename)" "$pid"
  done
  rm -rf "$CLUSTER_DIR"
  log "removed ${CLUSTER_DIR#"$REPO_ROOT/"}"
else
  log "nothing to do: ${CLUSTER_DIR#"$REPO_ROOT/"} does not exist"
fi
