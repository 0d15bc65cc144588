#!/usr/bin/env bash
# Where a GPU null call's time goes (cuda backend): sluiced at --log-level
# debug (the poller's scan passes and the host's service time, READY seen to
# FINISHED written, in its log), one VM with a 64 MiB region, then
#   - sluice-agent run syscall-bench: null calls at 1 and 32 callers (20000
#     calls), and at 1024 callers in steady state (200 calls per caller);
#   - the diagnostic sluice_sys_null_phases in modes 0 (the library's path),
#     1 (no cookie lock), 3 (no lock, no state read at the claim), 7 (and no
#     nanosleep), 15 (and a relaxed free), at 1, 32 and 1024 callers;
# and the VM's counters. Writes into OUTDIR.
#
#   bench/results/h100/syscalls_phases_run.sh BINDIR OUTDIR
set -euo pipefail
bin=$(cd "${1:?usage: BINDIR OUTDIR}" && pwd)
out=${2:?usage: BINDIR OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
dir=$(mktemp -d /tmp/sluice-phases-XXXXXX)
chmod 711 "$dir"
export SLUICE_SOCKET=$dir/sluiced.sock
"$bin/sluiced" --backend cuda --log-level debug --socket "$SLUICE_SOCKET" --state-dir "$dir/state" >"$out/sluiced.log" 2>&1 &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$SLUICE_SOCKET" ] && break; sleep 0.1; done
ep=$("$bin/sluicectl" vm create bench --channels 4 --region-size 64MiB)
for _ in $(seq 100); do
	proxy=$("$bin/sluicectl" vm get bench --json | sed -n 's/.*"proxy_pid": *\([0-9]*\).*/\1/p')
	[ -n "$proxy" ] && break
	sleep 0.1
done
worker=$(pgrep -f 'sluice-gpu-worker' | head -1 || true)
cpu=(--cpu-pid "$daemon" --cpu-pid "$proxy")
[ -n "$worker" ] && cpu+=(--cpu-pid "$worker")
agent=("$bin/sluice-agent" --endpoint "$ep" run syscall-bench --backend cuda --json "${cpu[@]}")
"${agent[@]}" --channel 1 --callers 1,32 --calls 20000 --label "null 1, 32" >"$out/null_small.json"
"${agent[@]}" --channel 2 --callers 1024 --calls 204800 --label "null 1024 steady" >"$out/null_1024.json"
"${agent[@]}" --channel 3 --callers 1 --calls 1 --phases 0,1,3,7,15 --phase-callers 1,32,1024 \
	--phase-iterations 40 --label "phases" >"$out/phases.json"
"$bin/sluicectl" vm get bench --json >"$out/vm.json"
