#!/usr/bin/env bash
# Bring up the local kubegan control plane: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and the KWOK controller (fake nodes annotated kwok.x-k8s.io/node=fake),
# all as background processes of this machine. No Docker, no kubelet.
#
# Idempotent: components already running (pid alive + healthy) are left alone, missing
# ones are (re)started; if everything is up it just says so.
#
# State lives in <repo>/.cluster/ (removed by hack/cluster-down.sh):
#   .cluster/kubeconfig        admin kubeconfig (client cert in group system:masters)
#   .cluster/bin/              kubectl helm kwok etcd etcdctl kube-* (symlinks into the cache)
#   .cluster/env               `source .cluster/env` -> KUBECONFIG and PATH
#   .cluster/logs/<name>.log   one log per process;  .cluster/pids/<name>.pid
#   .cluster/pki/              CA, serving/client certs, service-account key pair
#   .cluster/etcd/             etcd data
#
# Ports (all on 127.0.0.1; override through the environment):
#   KUBEGAN_APISERVER_PORT   6443   kube-apiserver (https)
#   KUBEGAN_ETCD_PORT        2379   etcd client (http); peer port = this + 1
#   KUBEGAN_KCM_PORT         10257  kube-controller-manager healthz (https)
#   KUBEGAN_SCHEDULER_PORT   10259  kube-scheduler healthz (https)
# Other settings:
#   KUBEGAN_CLUSTER_DIR      state dir (default <repo>/.cluster)
#   KUBEGAN_NODE_GRACE       kube-controller-manager --node-monitor-grace-period (default 20s)
#   KUBEGAN_KWOK_STAGES      KWOK stage config (default hack/kwok/stages.yaml)
#   KUBEGAN_NODE_LEASE_SECONDS  KWOK's node Lease duration; it renews every quarter of it (default 40)
#   KUBEGAN_KWOK_PARALLELISM KWOK's node Lease and stage workers (default: KWOK's own, 4); with
#                            1000 fake nodes on a busy machine 4 cannot renew every Lease in time
#                            and nodes flap NotReady (bench/operator_scale.py sets 16)
#   KUBEGAN_PROFILING        true: the apiserver serves /debug/pprof (benchmarks; default false)
#   KUBEGAN_UP_TIMEOUT       seconds to wait for each component (default 120)
#   KUBEGAN_NATIVE_GANG      true: Kubernetes' own gang scheduling (alpha in 1.36):
#                            feature gates GenericWorkload and GangScheduling on the apiserver,
#                            scheduler and controller-manager, and the apiserver serves
#                            scheduling.k8s.io/v1alpha2 (Workload, PodGroup). Default false. Read
#                            at start: a control plane already up keeps the flags it started with.
set -Eeuo pipefail
trap 'echo "cluster-up.sh: FAILED at line $LINENO: $BASH_COMMAND (logs: $LOGS)" >&2' ERR

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"
CLUSTER_DIR="${KUBEGAN_CLUSTER_DIR:-$REPO_ROOT/.cluster}"
APISERVER_PORT="${KUBEGAN_APISERVER_PORT:-6443}"
ETCD_PORT="${KUBEGAN_ETCD_PORT:-2379}"
ETCD_PEER_PORT="$((ETCD_PORT + 1))"
KCM_PORT="${KUBEGAN_KCM_PORT:-10257}"
SCHEDULER_PORT="${KUBEGAN_SCHEDULER_PORT:-10259}"
NODE_GRACE="${KUBEGAN_NODE_GRACE:-20s}"
KWOK_STAGES="${KUBEGAN_KWOK_STAGES:-$HACK_DIR/kwok/stages.yaml}"
NODE_LEASE_SECONDS="${KUBEGAN_NODE_LEASE_SECONDS:-40}"
KWOK_PARALLELISM="${KUBEGAN_KWOK_PARALLELISM:-}"
TIMEOUT="${KUBEGAN_UP_TIMEOUT:-120}"
PROFILING="${KUBEGAN_PROFILING:-false}"
NATIVE_GANG="${KUBEGAN_NATIVE_GANG:-false}"
SERVICE_CIDR=10.0.0.0/24
POD_CIDR=10.244.0.0/16

BIN="$CLUSTER_DIR/bin"; PKI="$CLUSTER_DIR/pki"; LOGS="$CLUSTER_DIR/logs"; PIDS="$CLUSTER_DIR/pids"
KCFG_DIR="$CLUSTER_DIR/kubeconfigs"; ADMIN_KUBECONFIG="$CLUSTER_DIR/kubeconfig"
APISERVER_URL="https://127.0.0.1:$APISERVER_PORT"

log() { printf '[cluster-up %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[cluster-up] ERROR: %s\n' "$*" >&2; exit 1; }

kubectl() { "$BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }

# Extra flags for Kubernetes' native gang scheduling (KUBEGAN_NATIVE_GANG): the gates on every
# component that reads them (the apiserver validates pods' schedulingGroup, the scheduler runs
# the gang plugin, the controller-manager runs the Workload/PodGroup controllers).
GANG_GATES=()
GANG_API=()
case "$NATIVE_GANG" in
  true)
    # shellcheck disable=SC2054  # one argument: --feature-gates takes a comma list
    GANG_GATES=(--feature-gates=GenericWorkload=true,GangScheduling=true)
    GANG_API=(--runtime-config=scheduling.k8s.io/v1alpha2=true) ;;
  false) ;;
  *) echo "cluster-up.sh: KUBEGAN_NATIVE_GANG must be true or false, not '$NATIVE_GANG'" >&2; exit 2 ;;
esac

# ---------------------------------------------------------------- processes
pid_alive() {  # pid_alive <name>: the pid file's process runs the expected binary
  local f="$PIDS/$1.pid" pid
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f" 2>/dev/null)"; [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  grep -q "$CLUSTER_DIR" "/proc/$pid/cmdline" 2>/dev/null   # not a recycled pid
}

start_proc() {  # start_proc <name> <binary> args...
  local name="$1"; shift
  echo "=== $(date -u +%FT%TZ) cluster-up.sh starting $name" >>"$LOGS/$name.log"
  # setsid: own session/process group, survives this script; cluster-down kills the group.
  setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$name.pid"
  log "started $name (pid $!, log ${LOGS#"$REPO_ROOT/"}/$name.log)"
}

# Free means bindable now the way the component binds it: on 127.0.0.1 with SO_REUSEADDR, as
# every Go server does. So a listener counts (and an established connection that owns the port
# as a client: a connect probe would call that "free"), but connections of a cluster stopped a
# moment ago that are still closing (TIME_WAIT; FIN-WAIT-1 towards a removed real node) do
# not: they do not keep the component from binding. The one port helper of the repo decides
# (trainer/kubegan_trainer/launch/ports.py).
port_free() {
  python3 "$REPO_ROOT/trainer/kubegan_trainer/launch/ports.py" --check "$1" --host 127.0.0.1 --reuse-addr 2>/dev/null
}
require_port_free() {  # require_port_free <port> <what>
  port_free "$1" || die "port $1 ($2) is in use by another process; set ${3} to another port or run hack/cluster-down.sh"
}

wait_for() {  # wait_for <name> <description> <command...>
  local name="$1" what="$2"; shift 2
  local deadline=$((SECONDS + TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    if ! pid_alive "$name"; then
      tail -n 30 "$LOGS/$name.log" >&2 || true
      die "$name exited while waiting for $what (log: $LOGS/$name.log)"
    fi
    ((SECONDS < deadline)) || { tail -n 30 "$LOGS/$name.log" >&2 || true; die "timed out after ${TIMEOUT}s waiting for $what"; }
    sleep 1
  done
}

# ---------------------------------------------------------------- certificates
# P-256 keys: an RSA-2048 key costs about 0.2 CPU s to generate, and each control plane and
# real node makes several (the test tiers start dozens); a P-256 key costs well under 0.01 s,
# and every component here (apiserver, kubelet, kubectl, Prometheus, Python) accepts them.
new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

gen_cert() {  # gen_cert <name> <subject> <extensions...>  (signed by the local CA)
  local name="$1" subj="$2" ext="$3"
  [[ -s "$PKI/$name.crt" && -s "$PKI/$name.key" ]] && return 0
  new_key "$PKI/$name.key"
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  printf '%b\n' "$ext" >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

gen_pki() {
  mkdir -p "$PKI"; chmod 700 "$PKI"
  if [[ ! -s "$PKI/ca.crt" ]]; then
    log "generating certificates in ${PKI#"$REPO_ROOT/"}"
    rm -f "$PKI"/*.crt "$PKI"/*.key   # a new CA invalidates every leaf
    new_key "$PKI/ca.key"
    openssl req -x509 -new -nodes -key "$PKI/ca.key" -subj "/CN=kubegan-local-ca" -days 3650 -sha256 \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
      -out "$PKI/ca.crt" 2>/dev/null
  fi
  local client="basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth"
  gen_cert apiserver "/CN=kube-apiserver" \
    "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  gen_cert admin "/O=system:masters/CN=kubegan-admin" "$client"
  gen_cert controller-manager "/CN=system:kube-controller-manager" "$client"
  gen_cert scheduler "/CN=system:kube-scheduler" "$client"
  gen_cert front-proxy-client "/CN=front-proxy-client" "$client"   # aggregation layer / requestheader auth
  # The apiserver's identity towards real kubelets (logs, exec, port-forward); real-node-up.sh
  # binds it to system:kubelet-api-admin, and the kubelets authorize it by webhook.
  gen_cert apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client" "$client"
  # KWOK patches node and pod status of arbitrary nodes: give it cluster-admin rights.
  gen_cert kwok "/O=system:masters/CN=kwok-controller" "$client"
  if [[ ! -s "$PKI/sa.key" ]]; then
    new_key "$PKI/sa.key"   # service-account tokens signed ES256
    openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  fi
}

write_kubeconfig() {  # write_kubeconfig <file> <cert-name> <user>
  local file="$1" cert="$2" user="$3"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kubegan-local
  cluster:
    server: $APISERVER_URL
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/$cert.crt")
    client-key-data: $(base64 -w0 <"$PKI/$cert.key")
contexts:
- name: kubegan-local
  context: {cluster: kubegan-local, user: $user, namespace: default}
current-context: kubegan-local
EOF
  chmod 600 "$file"
}

# ---------------------------------------------------------------- components
apiserver_ready() {
  curl -fsS --max-time 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "$APISERVER_URL/readyz" | grep -qx ok
}
etcd_healthy() { curl -fsS --max-time 3 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }
healthz_ok() { curl -fsSk --max-time 3 "https://127.0.0.1:$1/healthz" | grep -qx ok; }

start_etcd() {
  if pid_alive etcd && etcd_healthy; then log "etcd: running"; return; fi
  pid_alive etcd && die "etcd is running but unhealthy (see $LOGS/etcd.log); run hack/cluster-down.sh"
  require_port_free "$ETCD_PORT" "etcd client" KUBEGAN_ETCD_PORT
  require_port_free "$ETCD_PEER_PORT" "etcd peer" KUBEGAN_ETCD_PORT
  mkdir -p "$CLUSTER_DIR/etcd"; chmod 700 "$CLUSTER_DIR/etcd"
  start_proc etcd "$BIN/etcd" \
    --name=kubegan --data-dir="$CLUSTER_DIR/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="kubegan=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync=true --quota-backend-bytes=4294967296 --log-level=warn
  wait_for etcd "etcd /health" etcd_healthy
  log "etcd: healthy on 127.0.0.1:$ETCD_PORT"
}

start_apiserver() {
  if pid_alive kube-apiserver && apiserver_ready; then log "kube-apiserver: running"; return; fi
  if pid_alive kube-apiserver; then
    log "kube-apiserver: running, waiting for /readyz"
  else
    require_port_free "$APISERVER_PORT" "kube-apiserver" KUBEGAN_APISERVER_PORT
    start_proc kube-apiserver "$BIN/kube-apiserver" \
      --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
      --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
      --cert-dir="$PKI" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
      --client-ca-file="$PKI/ca.crt" \
      --requestheader-client-ca-file="$PKI/ca.crt" --requestheader-allowed-names=front-proxy-client \
      --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
      --requestheader-extra-headers-prefix=X-Remote-Extra- \
      --proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key" \
      --authorization-mode=Node,RBAC \
      --enable-admission-plugins=NodeRestriction \
      --service-account-issuer=https://kubernetes.default.svc.cluster.local \
      --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
      --service-cluster-ip-range="$SERVICE_CIDR" \
      --endpoint-reconciler-type=none \
      --kubelet-preferred-address-types=InternalIP,Hostname \
      --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
      --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
      --kubelet-certificate-authority="$PKI/ca.crt" \
      --allow-privileged=true --profiling="$PROFILING" --anonymous-auth=true \
      --enable-bootstrap-token-auth=false --event-ttl=1h \
      ${GANG_GATES[@]+"${GANG_GATES[@]}"} ${GANG_API[@]+"${GANG_API[@]}"}
  fi
  wait_for kube-apiserver "kube-apiserver /readyz" apiserver_ready
  log "kube-apiserver: ready at $APISERVER_URL"
}

start_controller_manager() {
  if pid_alive kube-controller-manager && healthz_ok "$KCM_PORT"; then log "kube-controller-manager: running"; return; fi
  if ! pid_alive kube-controller-manager; then
    require_port_free "$KCM_PORT" "kube-controller-manager" KUBEGAN_KCM_PORT
    local kc="$KCFG_DIR/controller-manager.kubeconfig"
    start_proc kube-controller-manager "$BIN/kube-controller-manager" \
      --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
      --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
      --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
      --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
      --use-service-account-credentials=true --controllers='*' \
      --service-cluster-ip-range="$SERVICE_CIDR" --cluster-name=kubegan \
      --node-monitor-grace-period="$NODE_GRACE" --node-monitor-period=2s \
      --flex-volume-plugin-dir="$CLUSTER_DIR/flexvolume" \
      --leader-elect=false --profiling=false ${GANG_GATES[@]+"${GANG_GATES[@]}"}
  fi
  wait_for kube-controller-manager "kube-controller-manager /healthz" healthz_ok "$KCM_PORT"
  log "kube-controller-manager: healthy (node-monitor-grace-period=$NODE_GRACE)"
}

start_scheduler() {
  if pid_alive kube-scheduler && healthz_ok "$SCHEDULER_PORT"; then log "kube-scheduler: running"; return; fi
  if ! pid_alive kube-scheduler; then
    require_port_free "$SCHEDULER_PORT" "kube-scheduler" KUBEGAN_SCHEDULER_PORT
    local kc="$KCFG_DIR/scheduler.kubeconfig"
    start_proc kube-scheduler "$BIN/kube-scheduler" \
      --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
      --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" \
      --leader-elect=false --profiling=false ${GANG_GATES[@]+"${GANG_GATES[@]}"}
  fi
  wait_for kube-scheduler "kube-scheduler /healthz" healthz_ok "$SCHEDULER_PORT"
  log "kube-scheduler: healthy"
}

start_kwok() {
  if pid_alive kwok; then log "kwok: running"; return; fi
  [[ -f "$KWOK_STAGES" ]] || die "missing KWOK stage config $KWOK_STAGES"
  cp -f "$KWOK_STAGES" "$CLUSTER_DIR/kwok-stages.yaml"
  local configs=(--config="$CLUSTER_DIR/kwok-stages.yaml")
  if [[ -n "$KWOK_PARALLELISM" ]]; then
    cat >"$CLUSTER_DIR/kwok-options.yaml" <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodeLeaseParallelism: $KWOK_PARALLELISM
  nodePlayStageParallelism: $KWOK_PARALLELISM
  podPlayStageParallelism: $KWOK_PARALLELISM
EOF
    configs+=(--config="$CLUSTER_DIR/kwok-options.yaml")
  fi
  local before=0
  [[ -f "$LOGS/kwok.log" ]] && before="$(wc -l <"$LOGS/kwok.log")"
  start_proc kwok "$BIN/kwok" \
    --kubeconfig="$KCFG_DIR/kwok.kubeconfig" \
    "${configs[@]}" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --cidr="$POD_CIDR" --node-lease-duration-seconds="$NODE_LEASE_SECONDS"
  # kwok serves no health endpoint here; it logs "Watch nodes" once its informers start.
  kwok_watching() { [[ "$(tail -n "+$((before + 2))" "$LOGS/kwok.log")" == *'"msg":"Watch nodes"'* ]]; }
  wait_for kwok "kwok to start watching nodes" kwok_watching
  log "kwok: running (manages nodes annotated kwok.x-k8s.io/node=fake)"
}

wait_default_serviceaccount() {
  local deadline=$((SECONDS + TIMEOUT))
  until kubectl -n default get serviceaccount default >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "serviceaccount default/default was not created (see $LOGS/kube-controller-manager.log)"
    sleep 1
  done
  log "namespace default and serviceaccount default/default exist"
}

install_crds() {
  local crd_dir="$REPO_ROOT/crds"
  if ! compgen -G "$crd_dir/*.yaml" >/dev/null && ! compgen -G "$crd_dir/*.yml" >/dev/null; then
    log "no CRD files in crds/ yet; skipping CRD install"
    return
  fi
  [[ -f "$crd_dir/gantrainingjobs.kubegan.io.yaml" ]] || log "note: crds/gantrainingjobs.kubegan.io.yaml not found; applying what is there"
  log "applying CRDs from crds/"
  kubectl apply --server-side --force-conflicts -f "$crd_dir" >&2
  local deadline=$((SECONDS + TIMEOUT))
  # kubectl wait fails at once ("<nil> is of the type <nil>") on a CRD the apiserver has not
  # written any condition on yet (seen on a loaded machine): ask again until the deadline.
  until kubectl wait --for=condition=Established --timeout=10s -f "$crd_dir" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || die "CRDs in crds/ not Established after ${TIMEOUT}s"
    sleep 0.5
  done
  # Established is not the end: the apiserver answers 429 "storage is (re)initializing" for
  # a moment after; wait until the resource can really be listed so clients start clean.
  until kubectl get gantrainingjobs.kubegan.io -A >/dev/null 2>&1; do
    (( SECONDS < deadline )) || die "gantrainingjobs cannot be listed after ${TIMEOUT}s"
    sleep 0.5
  done
}

main() {
  log "building / reusing binaries"
  bash "$HACK_DIR/build-binaries.sh" --link "$BIN"
  mkdir -p "$LOGS" "$PIDS" "$KCFG_DIR"
  gen_pki
  write_kubeconfig "$ADMIN_KUBECONFIG" admin kubegan-admin
  write_kubeconfig "$KCFG_DIR/controller-manager.kubeconfig" controller-manager system:kube-controller-manager
  write_kubeconfig "$KCFG_DIR/scheduler.kubeconfig" scheduler system:kube-scheduler
  write_kubeconfig "$KCFG_DIR/kwok.kubeconfig" kwok kwok-controller
  cat >"$CLUSTER_DIR/env" <<EOF
# source this file: kubectl/helm/kwok from .cluster/bin, admin kubeconfig
export KUBECONFIG="$ADMIN_KUBECONFIG"
export PATH="$BIN:\$PATH"
EOF

  local all_up=1 c
  for c in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do pid_alive "$c" || all_up=0; done
  if ((all_up)) && etcd_healthy && apiserver_ready && healthz_ok "$KCM_PORT" && healthz_ok "$SCHEDULER_PORT"; then
    log "cluster already up and healthy"
  fi
  start_etcd
  start_apiserver
  start_controller_manager
  start_scheduler
  start_kwok
  wait_default_serviceaccount
  install_crds
  log "cluster is up: $APISERVER_URL"
  log "  export KUBECONFIG=$ADMIN_KUBECONFIG   (or: source ${CLUSTER_DIR#"$REPO_ROOT/"}/env)"
  log "  kubectl: $BIN/kubectl   logs: $LOGS/"
}

main "$@"
