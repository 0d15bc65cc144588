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
dir=$(mktemp -d /tmp/sluice-syscalls-XXXXXX)
chmod 711 "$dir"
export SLUICE_SOCKET=$dir/sluiced.sock
# --max-command: a run's kernels make thousands of calls each, which may take
# longer than the default half second; the watchdog must not end them.
"$bin/sluiced" --backend cuda --max-command 30s --socket "$SLUICE_SOCKET" --state-dir "$dir/state" >"$out/syscalls-sluiced.log" 2>&1 &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$SLUICE_SOCKET" ] && break; sleep 0.1; done
ep=$("$bin/sluicectl" vm create bench --channels 4)
vol=$("$bin/sluicectl" vm get bench --json | sed -n 's/.*"volume": *"\([^"]*\)".*/\1/p')
head -c 64M /dev/urandom >"$vol/bench.bin"
chmod 644 "$vol/bench.bin"
for _ in $(seq 100); do
	proxy=$("$bin/sluicectl" vm get bench --json | sed -n 's/.*"proxy_pid": *\([0-9]*\).*/\1/p')
	[ -n "$proxy" ] && break
	sleep 0.1
done
worker=$(pgrep -f 'sluice-gpu-worker' | head -1 || true)
cpu=(--cpu-pid "$daemon" --cpu-pid "$proxy")
[ -n "$worker" ] && cpu+=(--cpu-pid "$worker")
agent=("$bin/sluice-agent" --endpoint "$ep" run syscall-bench --backend cuda --json --pread-path /bench.bin "${cpu[@]}")
"${agent[@]}" --channel 1 --label "window 0" >"$out/syscalls-window0.json"
"$bin/sluicectl" vm set bench --syscall-window 20us --syscall-batch 1024 >/dev/null
"${agent[@]}" --channel 2 --label "window 20us, batch 1024" >"$out/syscalls-window20us.json"
"$bin/sluicectl" vm get bench --json >"$out/syscalls-vm.json"
