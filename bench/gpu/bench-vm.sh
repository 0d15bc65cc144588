# Sourced by the GPU system-call benchmark scripts (bench/gpu/syscalls.sh,
# bench/results/h100/syscalls_poller_run.sh): one sluiced on the cuda
# backend with one VM, as they all need it.
#
# start_bench_vm BINDIR LOG [SLUICED FLAG...] [-- VM CREATE FLAG...]
#   starts BINDIR/sluiced in a fresh directory (the socket and the state;
#   its output to LOG) with --backend cuda, --max-command 30s (a benchmark
#   kernel makes thousands of calls, which may take longer than the default
#   half second: the watchdog must not end it) and the flags given; creates
#   VM "bench" with the VM flags and waits for its proxy. It sets dir,
#   daemon (sluiced's pid), ep (the VM's endpoint) and cpu (--cpu-pid flags
#   for sluiced, the proxy and the GPU worker, for sluice-agent).
# stop_bench_vm
#   stops that sluiced and removes its directory.

start_bench_vm() {
	local bin=$1 log=$2 sflags=() worker proxy
	shift 2
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		sflags+=("$1")
		shift
	done
	[ $# -gt 0 ] && shift
	dir=$(mktemp -d /tmp/sluice-bench-XXXXXX)
	chmod 711 "$dir"
	export SLUICE_SOCKET=$dir/sluiced.sock
	"$bin/sluiced" --backend cuda --max-command 30s "${sflags[@]}" --socket "$SLUICE_SOCKET" --state-dir "$dir/state" >"$log" 2>&1 &
	daemon=$!
	for _ in $(seq 100); do [ -S "$SLUICE_SOCKET" ] && break; sleep 0.1; done
	ep=$("$bin/sluicectl" vm create bench "$@")
	for _ in $(seq 100); do
		proxy=$("$bin/sluicectl" vm get bench --json | sed -n 's/.*"proxy_pid": *\([0-9]*\).*/\1/p')
		[ -n "$proxy" ] && break
		sleep 0.1
	done
	worker=$(pgrep -f 'sluice-gpu-worker' | head -1 || true)
	cpu=(--cpu-pid "$daemon" --cpu-pid "$proxy")
	if [ -n "$worker" ]; then cpu+=(--cpu-pid "$worker"); fi
}

stop_bench_vm() {
	if [ -n "${daemon:-}" ]; then
		kill "$daemon" 2>/dev/null || true
		wait "$daemon" 2>/dev/null || true
	fi
	if [ -n "${dir:-}" ]; then rm -rf "$dir"; fi
	daemon= dir=
}
