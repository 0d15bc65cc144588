#!/usr/bin/env bash
# Before/after of the poller's pass (chunked sweeps, batched hint clearing,
# one lock per batch, counts per pass): in one device run,
#   1. the forwarder's Go benchmarks (BenchmarkPollerSaturated: 1024 slots kept
#      busy by driver goroutines; BenchmarkNullRoundTrip), before and after
#      interleaved, 3 rounds, each with its own sluice-proxy (unsandboxed);
#   2. on the GPU (cuda backend), before and after in turn: sluiced, one VM,
#      sluice-agent run syscall-bench null at 1, 32 (20000 calls) and 1024
#      callers (200 calls each), phases 0 and 3 at 1, 32, 1024 callers, and
#      the VM's counters before and after the 1024 run (poller busy time).
#
#   bench/results/h100/syscalls_poller_run.sh BASEDIR NEWDIR OUTDIR
# Each DIR holds sluiced, sluice-proxy, sluicectl, sluice-agent and
# syscalls.test (go test -c ./mediator/internal/syscalls), all static.
set -euo pipefail
base=$(cd "${1:?usage: BASEDIR NEWDIR OUTDIR}" && pwd)
new=$(cd "${2:?usage: BASEDIR NEWDIR OUTDIR}" && pwd)
out=${3:?usage: BASEDIR NEWDIR OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
. "$(dirname "$0")/../../gpu/bench-vm.sh"
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader >"$out/device.txt" || true
nproc >>"$out/device.txt"
for round in ${ROUNDS:-1 2 3}; do
	for tag in base new; do
		dir=$base
		[ $tag = new ] && dir=$new
		SLUICE_PROXY_BIN=$dir/sluice-proxy "$dir/syscalls.test" -test.run '^$' \
			-test.bench 'PollerSaturated/proxy=binary|NullRoundTrip' -test.benchtime 2000000x \
			>>"$out/gobench-$tag.txt" 2>&1 || true
	done
done
gpu() { # TAG BINDIR
	tag=$1 bin=$2
	start_bench_vm "$bin" "$out/$tag-sluiced.log" --log-level debug -- --channels 4 --region-size 64MiB
	agent=(timeout 100 "$bin/sluice-agent" --endpoint "$ep" run syscall-bench --backend cuda --json "${cpu[@]}")
	"${agent[@]}" --channel 1 --callers 1,32 --calls 20000 --label "$tag 1,32" >"$out/$tag-small.json" || true
	"$bin/sluicectl" vm get bench --json >"$out/$tag-vm-before1024.json" || true
	"${agent[@]}" --channel 2 --callers 1024 --calls 204800 --label "$tag 1024" >"$out/$tag-1024.json" || true
	"$bin/sluicectl" vm get bench --json >"$out/$tag-vm-after1024.json" || true
	"${agent[@]}" --channel 3 --callers 1 --calls 1 --phases 0,3 --phase-callers 1,32,1024 \
		--phase-iterations 40 --label "$tag phases" >"$out/$tag-phases.json" || true
	stop_bench_vm
}
[ -z "${SKIP_BASE:-}" ] && gpu base "$base"
gpu new "$new"
