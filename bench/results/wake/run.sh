#!/bin/bash
# Completion latency of a process guest against sluiced, for the binaries
# (sluiced, sluicectl, sluice-agent) in each BIN directory given, ROUNDS times
# in turn:
#   nop:      sluice-agent run latency (NOP round trips) on the null backend
#             and on the sim (wall clock; then with spin_ns=1500000: the sim
#             spins for due completions instead of waiting for its timers);
#   throttle: sluice-agent run throttle --depth 1 of KERNEL_US kernels on the
#             sim (wall clock, spin_ns=1500000: the sim spins for due
#             completions, so only the guest's wait differs), with the
#             agent's CPU time (user+sys, bash's time).
# Usage: run.sh BIN... (env COUNT 20000, KERNELS 2000, KERNEL_US 300, ROUNDS 3,
# AGENT_ARGS: extra sluice-agent flags)
set -u
COUNT=${COUNT:-20000}
KERNELS=${KERNELS:-2000}
KERNEL_US=${KERNEL_US:-300}
ROUNDS=${ROUNDS:-3}
TIMEFORMAT='agent cpu %U user %S sys %R wall'
nproc; uname -r; grep -m1 "model name" /proc/cpuinfo
# squeeze prints the result on one line (jq's filter where jq is there).
squeeze() { if command -v jq >/dev/null; then jq -c "$JQ"; else tr -d ' \n'; echo; fi; }

# run BIN LABEL SLUICED_ARGS -- AGENT_ARGS...
run() {
  local bin=$1 label=$2 be=$3
  shift 4
  local d p ep
  d=$(mktemp -d /tmp/slw.XXXX)
  "$bin/sluiced" --socket "$d/s.sock" --state-dir "$d/st" $be --proxy off --log-level warn & p=$!
  for _ in $(seq 50); do [ -S "$d/s.sock" ] && break; sleep 0.1; done
  ep=$("$bin/sluicectl" --socket "$d/s.sock" vm create lat --channels 1)
  printf '== %s %s %s: ' "$label" "$bin" "$be"
  { time "$bin/sluice-agent" --endpoint "$ep" ${AGENT_ARGS:-} "$@" --json | squeeze; } 2>&1
  kill "$p"; wait "$p"
  rm -rf "$d"
}

for r in $(seq "$ROUNDS"); do
  for bin in "$@"; do
    JQ='.round_trip_ns'
    for be in "--backend null" "--backend sim --clock wall" "--backend sim --clock wall --backend-params spin_ns=1500000"; do
      run "$bin" "round $r nop" "$be" -- run latency --count "$COUNT" --warmup 1000
    done
    JQ='{kernels, turnaround_ns}'
    run "$bin" "round $r throttle ${KERNEL_US}us depth 1" "--backend sim --clock wall --backend-params spin_ns=1500000" -- \
      run throttle --kernel-us "$KERNEL_US" --depth 1 --kernels "$KERNELS" --duration 0
  done
done
