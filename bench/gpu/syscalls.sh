#!/usr/bin/env bash
# GPU system calls on an NVIDIA GPU: starts sluiced with the cuda backend and
# one VM, then runs `sluice-agent run syscall-bench` (null-call round trips
# and calls/s at 1, 32 and 1024 callers, pread 4 KiB generic vs fastcall, the
# host CPU of sluiced, the proxy and the GPU worker per call) without and with
# a coalescing window. Writes syscalls-window0.json, syscalls-window20us.json,
# the daemon's log and the VM's counters into OUTDIR.
#
#   bench/gpu/syscalls.sh BINDIR OUTDIR
#
# BINDIR holds sluiced, sluice-proxy, sluicectl and sluice-agent (make build;
# without Go on the GPU machine, build them elsewhere and carry them). Needs
# root (the proxy's sandbox maps an id range into its user namespace).
set -euo pipefail
bin=$(cd "${1:?usage: syscalls.sh BINDIR OUTDIR}" && pwd)
out=${2:?usage: syscalls.sh BINDIR OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
. "$(dirname "$0")/bench-vm.sh"
trap stop_bench_vm EXIT
start_bench_vm "$bin" "$out/syscalls-sluiced.log" -- --channels 4
vol=$("$bin/sluicectl" vm get bench --json | sed -n 's/.*"volume": *"\([^"]*\)".*/\1/p')
head -c 64M /dev/urandom >"$vol/bench.bin"
chmod 644 "$vol/bench.bin"
agent=("$bin/sluice-agent" --endpoint "$ep" run syscall-bench --backend cuda --json --pread-path /bench.bin "${cpu[@]}")
"${agent[@]}" --channel 1 --label "window 0" >"$out/syscalls-window0.json"
"$bin/sluicectl" vm set bench --syscall-window 20us --syscall-batch 1024 >/dev/null
"${agent[@]}" --channel 2 --label "window 20us, batch 1024" >"$out/syscalls-window20us.json"
"$bin/sluicectl" vm get bench --json >"$out/syscalls-vm.json"
