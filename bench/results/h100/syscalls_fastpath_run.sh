#!/usr/bin/env bash
# Before/after of the ready map, owned slots and the one-read result (cuda
# backend), in one device run: sluiced at --log-level debug, one VM with a
# 64 MiB region, then
#   - syscall-bench null at 1, 32 (20000 calls) and 1024 callers (steady, 200
#     calls each), owned slots (the default) and --shared-slots (the lock);
#   - the same with the poller's ready map off (SLUICE_SYSCALL_READY_MAP=off,
#     a second sluiced): full scans only, as before;
#   - sluice_sys_null_phases modes 0, 1, 3, 7, 16 (no hint), 32 (old result
#     read), 35 (owned + known seq + old read) at 1, 32, 1024 callers.
#
#   bench/results/h100/syscalls_fastpath_run.sh BINDIR OUTDIR
set -euo pipefail
bin=$(cd "${1:?usage: BINDIR OUTDIR}" && pwd)
out=${2:?usage: BINDIR OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
one() { # TAG [env...]: one sluiced, one VM, the runs
	tag=$1
	shift
	dir=$(mktemp -d /tmp/sluice-fast-XXXXXX)
	chmod 711 "$dir"
	export SLUICE_SOCKET=$dir/sluiced.sock
	env "$@" "$bin/sluiced" --backend cuda --log-level debug --socket "$SLUICE_SOCKET" --state-dir "$dir/state" >"$out/$tag-sluiced.log" 2>&1 &
	daemon=$!
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
	agent=(timeout 100 "$bin/sluice-agent" --endpoint "$ep" run syscall-bench --backend cuda --json "${cpu[@]}")
	"${agent[@]}" --channel 1 --callers 1,32 --calls 20000 --label "$tag own 1,32" >"$out/$tag-own-small.json" || true
	"${agent[@]}" --channel 2 --callers 1024 --calls 204800 --label "$tag own 1024" >"$out/$tag-own-1024.json" || true
	"${agent[@]}" --channel 1 --callers 1,32 --calls 20000 --shared-slots --label "$tag shared 1,32" >"$out/$tag-shared-small.json" || true
	"${agent[@]}" --channel 2 --callers 1024 --calls 204800 --shared-slots --label "$tag shared 1024" >"$out/$tag-shared-1024.json" || true
	if [ "$tag" = map ]; then
		"${agent[@]}" --channel 3 --callers 1 --calls 1 --phases 0,1,3,7,16,32,35 --phase-callers 1,32,1024 \
			--phase-iterations 40 --label "phases" >"$out/$tag-phases.json" || true
	fi
	"$bin/sluicectl" vm get bench --json >"$out/$tag-vm.json" || true
	kill $daemon 2>/dev/null || true
	wait $daemon 2>/dev/null || true
	rm -rf "$dir"
}
one map
one nomap SLUICE_SYSCALL_READY_MAP=off
