#!/bin/bash
# The doorbell path against its floor, side by side in one run, for the
# binaries (sluiced, sluicectl, sluice-agent) in each BIN directory given,
# ROUNDS times in turn, and bellbench (this folder's bellbench/, built into
# BELLBENCH):
#   floor:  bellbench floor (raw polling round trip between two processes);
#   nop:    sluice-agent run latency (NOP round trips) on the null backend,
#           then issue 14's two ratios for the round: its p50 over the
#           floor's p50 (at most 3) and its p99 over its own p50 (at most 3);
#   idle:   sluiced's CPU over IDLE_S seconds with VMS VMs, each with a guest
#           connected doing nothing (bellbench idle);
#   storm:  sluiced's CPU while bellbench storm rings one VM's channel 0 for
#           STORM_S seconds, the rate it rang at, the rate sluiced read its
#           doorbells at (/v1/stats doorbells) and the signals it took muted
#           (vm get: doorbells_limited); and how many lines sluiced logged
#           about it.
# CPU is utime+stime of sluiced from /proc/PID/stat over the interval, in
# per cent of one core.
# Usage: run.sh BIN... (env COUNT 20000, ROUNDS 3, VMS 4, IDLE_S 5,
# STORM_S 5, BELLBENCH bellbench binary, SLUICED_ARGS extra sluiced flags)
set -u
COUNT=${COUNT:-20000}
ROUNDS=${ROUNDS:-3}
VMS=${VMS:-4}
IDLE_S=${IDLE_S:-5}
STORM_S=${STORM_S:-5}
BB=${BELLBENCH:-bellbench}
nproc; uname -r; grep -m1 "model name" /proc/cpuinfo
squeeze() { if command -v jq >/dev/null; then jq -c "$1"; else tr -d ' \n'; echo; fi; }
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
# cpu PID SECONDS: sluiced's CPU over SECONDS, % of a core.
cpu() {
  local a b
  a=$(ticks "$1"); sleep "$2"; b=$(ticks "$1")
  awk -v t=$((b - a)) -v hz="$(getconf CLK_TCK)" -v s="$2" 'BEGIN { printf "%.2f%%", 100 * t / hz / s }'
}

# start BIN: sluiced on the null backend in a new dir D; sets D and P.
start() {
  D=$(mktemp -d /tmp/sldb.XXXX)
  "$1/sluiced" --socket "$D/s.sock" --state-dir "$D/st" --backend null --proxy off --log-level warn ${SLUICED_ARGS:-} 2>"$D/log" & P=$!
  for _ in $(seq 50); do [ -S "$D/s.sock" ] && break; sleep 0.1; done
}
stop() { kill "$P"; wait "$P"; grep -c "doorbell storm" "$D/log" | sed 's/^/   storm log lines: /'; rm -rf "$D"; }
# handled: the doorbells the storm VM's endpoint has read so far.
handled() { curl -s --unix-socket "$D/s.sock" http://sluiced/v1/stats | jq '.vms[] | select(.name == "storm") | .doorbells'; }

# ratios FLOOR_JSON NOP_JSON: the round's p50/floor and p99/p50.
ratios() {
  jq -rn --argjson f "$1" --argjson n "$2" \
    '"   p50/floor \($n.p50 / $f.p50 * 100 | round / 100), p99/p50 \($n.p99 / $n.p50 * 100 | round / 100)"'
}

for r in $(seq "$ROUNDS"); do
  floor=$("$BB" floor --count "$COUNT" | jq -c '.round_trip_ns')
  printf '== round %s floor: %s\n' "$r" "$floor"
  for bin in "$@"; do
    start "$bin"
    ep=$("$bin/sluicectl" --socket "$D/s.sock" vm create lat --channels 1)
    nop=$("$bin/sluice-agent" --endpoint "$ep" run latency --count "$COUNT" --warmup 1000 --json | jq -c '.round_trip_ns')
    printf '== round %s nop %s: %s\n' "$r" "$bin" "$nop"
    ratios "$floor" "$nop"
    pids=()
    for i in $(seq "$VMS"); do
      ep=$("$bin/sluicectl" --socket "$D/s.sock" vm create "idle$i" --channels 1)
      "$BB" idle --endpoint "$ep" --duration $((IDLE_S + 3))s & pids+=($!)
    done
    sleep 1
    printf '== round %s idle %s (%s guests): sluiced cpu %s\n' "$r" "$bin" "$VMS" "$(cpu "$P" "$IDLE_S")"
    wait "${pids[@]}"
    ep=$("$bin/sluicectl" --socket "$D/s.sock" vm create storm --channels 1)
    "$BB" storm --endpoint "$ep" --duration $((STORM_S + 1))s > "$D/storm.json" & sp=$!
    sleep 0.5
    h0=$(handled)
    c=$(cpu "$P" "$STORM_S")
    h1=$(handled)
    wait "$sp"
    printf '== round %s storm %s: sluiced cpu %s; rung %s/s, read %s/s; ' "$r" "$bin" "$c" \
      "$(jq '.per_second|floor' < "$D/storm.json")" "$(( (h1 - h0) / STORM_S ))"
    "$bin/sluicectl" --socket "$D/s.sock" vm get storm --json | squeeze '{doorbells_limited}'
    stop
  done
done
