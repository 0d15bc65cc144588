#!/usr/bin/env bash
# A/B of two builds on the GPU, interleaved in one device run so that the
# machine instance is the same for both (GPU null-call round trips vary by
# ±0.5 µs between instances of the same machine type): ROUNDS times, build
# A then build B, each through syscalls_poller_run.sh's GPU part (sluiced on
# cuda, one VM, null calls at 1 and 32 callers × 20000 and 1024 callers ×
# 200, phases 0 and 3), into OUT/rN/{base,new}-*.
#
#   bench/results/h100/syscalls_ab_run.sh ADIR BDIR OUT [ROUNDS]
# Each DIR holds sluiced, sluice-proxy, sluicectl and sluice-agent (static).
# With SLUICE_SYSCALL_NULL_HERE=1 in the environment sluiced's poller answers
# null calls itself (the diagnostic that prices the proxy hop).
set -euo pipefail
a=${1:?usage: ADIR BDIR OUT [ROUNDS]} b=${2:?} out=${3:?} rounds=${4:-3}
here=$(cd "$(dirname "$0")" && pwd)
for r in $(seq "$rounds"); do
	ROUNDS=" " "$here/syscalls_poller_run.sh" "$a" "$b" "$out/r$r" >/dev/null 2>&1
done
for r in $(seq "$rounds"); do
	for t in base new; do
		echo "r$r $t $(grep -hE '"(callers|p50_ns|calls_per_s)"' "$out/r$r/$t-small.json" "$out/r$r/$t-1024.json" | tr -d '\n ')"
	done
done
