#!/usr/bin/env bash
# `make test`: every tier in its own pytest process, in lanes that run at the same time.
#
# A lane is a list of steps run one after the other: a tier (unit, trainer, helm, monitoring,
# cluster, e2e: `make test-<tier>`), a make target that later tiers of the lane need
# (install-control-plane: Debian packages, the control plane and the real nodes' binaries;
# install-addons: Karpenter and Kueue; images), `after:<step>`, which waits until another
# lane's step has passed, or `any:<step>`, a step that several lanes offer to run: the first
# lane to reach it runs it, the others go on. The lanes run side by side. The default:
#
#   unit, trainer-rest, any:trainer-tf     need only .venv
#   install-control-plane, install-addons, the control plane, Karpenter and Kueue
#     helm, monitoring, cluster,
#     any:trainer-tf
#   after:install-control-plane, images,   the control plane and node binaries, the images
#     e2e                                  (not the add-ons: they build beside the images)
#
# The trainer tier runs as two steps (make test-trainer-rest: tests/trainer without tests/
# trainer/tf; make test-trainer-tf), because run whole it was the last step left, for nine
# minutes with the CPU 33-77 % busy. Its TensorFlow half goes to the lane that is free first:
# with warm caches the second lane (its cluster tier ends minutes before trainer-rest); on a
# new machine the first (the second is still building Go binaries then).
#
# So a new machine builds its control plane while the unit and trainer tiers run, and the
# tiers that mostly wait (a control plane, kubelets, containers) run beside the ones that
# compute. Every test is written to pass with CPU-bound processes beside it; the cluster tier
# and the e2e tier have control planes, ports and real-node sites of their own.
#
# Environment:
#   KUBEGAN_TEST_LANES  lanes separated by spaces, steps of a lane by commas (default above;
#                       "install-system,images,unit,trainer,helm,monitoring,cluster,e2e" runs
#                       everything in turn)
#   KUBEGAN_TEST_LOGS   where each step's whole output goes (default .test-logs/)
#
# Each output line is prefixed with its step. The summary gives each step's result, minutes
# and CPU minutes (on 2 cores the tiers share the CPU: while it is all busy, only fewer CPU
# seconds shorten `make test`; a lane layout helps only where a core would sit idle), then
# each failed step's FAILED/ERROR lines and its first assertion lines (CI keeps only the
# tail); the exit status is 1 when a step failed, after every lane has run. A failed install
# step (or one a lane waits for) skips the rest of its lane: its tiers are reported not run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

LANES="${KUBEGAN_TEST_LANES:-unit,trainer-rest,any:trainer-tf install-control-plane,install-addons,helm,monitoring,cluster,any:trainer-tf after:install-control-plane,images,e2e}"
TIERS=" unit trainer trainer-rest trainer-tf helm monitoring cluster e2e "
LOGS="${KUBEGAN_TEST_LOGS:-.test-logs}"
mkdir -p "$LOGS"
: > "$LOGS/summary"
rm -rf "$LOGS"/.claimed.*

children_cpu() {  # children_cpu <var>: CPU seconds (user + system) of this lane's finished children
  # `times` in this shell, not in $(...): a forked subshell starts with no children's usage.
  local file="$LOGS/.cpu.$BASHPID"
  times > "$file"
  printf -v "$1" '%s' "$(awk 'NR == 2 {
    split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%d", u[1] * 60 + u[2] + s[1] * 60 + s[2]
  }' "$file")"
  rm -f "$file"
}

run_step() {  # run_step <step>: "<step> <passed|FAILED> <seconds> <CPU seconds>" into the summary
  local step="$1" started rc target cpu cpu_after
  target="$step"
  children_cpu cpu
  # KUBEGAN_PREREQS_DONE: the lane made the tier's prerequisites already.
  [[ "$TIERS" == *" $step "* ]] && target="test-$step"
  started=$(date +%s)
  echo "=== make $target ($(date +%H:%M:%S))"
  # KUBEGAN_STOP_CLUSTER: a tier stops the control plane it started before the next one runs.
  KUBEGAN_STOP_CLUSTER=1 make --no-print-directory "$target" KUBEGAN_PREREQS_DONE=1 \
    > >(tee "$LOGS/$step.log" | sed -u "s/^/[$step] /") 2>&1
  rc=$?
  local result=passed
  ((rc == 0)) || result=FAILED
  # CPU: the step's processes and what they waited for; not daemons they left to init (real
  # nodes' kubelets and containers), so the e2e tier's figure is a floor.
  children_cpu cpu_after
  echo "$step $result $(($(date +%s) - started)) $((cpu_after - cpu))" >> "$LOGS/summary"
  return "$rc"
}

wait_for() {  # wait_for <step>: until another lane's step is in the summary; fails unless it passed
  local step="$1"
  # A step no lane runs is not waited for (KUBEGAN_TEST_LANES without it).
  local offered=" ${LANES//,/ } "
  [[ "${offered//any:/}" == *" $step "* ]] || return 0
  echo "=== waiting for $step ($(date +%H:%M:%S))"
  until grep -q "^$step " "$LOGS/summary"; do sleep 5; done
  grep -q "^$step passed " "$LOGS/summary"
}

run_lane() {  # run_lane <step,step,...>
  local step
  IFS=, read -ra steps <<< "$1"
  for step in "${steps[@]}"; do
    if [[ "$step" == after:* ]]; then
      wait_for "${step#after:}" && continue
      echo "=== ${step#after:} failed: the rest of its lane does not run"
      return
    fi
    if [[ "$step" == any:* ]]; then
      step="${step#any:}"
      # mkdir is atomic: exactly one lane claims the step.
      mkdir "$LOGS/.claimed.$step" 2>/dev/null || continue
    fi
    if ! run_step "$step" && [[ "$TIERS" != *" $step "* ]]; then
      echo "=== $step failed: the rest of its lane does not run"
      return
    fi
  done
}

started=$(date +%s)
pids=()
for lane in $LANES; do
  run_lane "$lane" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done

echo
echo "make test: $(($(date +%s) - started)) s in all (lanes: $LANES)"
printf '%-15s %-7s %7s %11s\n' step result minutes CPU-minutes
failed=""
while read -r step result seconds cpu; do
  awk -v t="$step" -v r="$result" -v s="$seconds" -v c="$cpu" \
    'BEGIN {printf "%-15s %-7s %7.1f %11.1f\n", t, r, s / 60, c / 60}'
  [[ "$result" == passed ]] || failed+=" $step"
done < "$LOGS/summary"
for lane in $LANES; do
  IFS=, read -ra steps <<< "$lane"
  for step in "${steps[@]}"; do
    [[ "$step" == after:* ]] && continue
    step="${step#any:}"
    grep -q "^$step " "$LOGS/summary" || [[ "$failed" == *" $step(not-run)"* ]] \
      || failed+=" $step(not-run)"
  done
done
if [[ -n "$failed" ]]; then
  # CI keeps only the tail of the output: repeat what each failed tier says failed, last.
  for step in $failed; do
    [[ -f "$LOGS/$step.log" ]] || continue
    echo "--- $step: what failed (whole output: $LOGS/$step.log)"
    grep -E '^(FAILED|ERROR) ' "$LOGS/$step.log" | cut -c1-300 | tail -n 20
    grep -E '^E  ' "$LOGS/$step.log" | cut -c1-300 | head -n 30
  done
  echo "make test: failed:$failed"
  exit 1
fi
echo "make test: every tier passed"
