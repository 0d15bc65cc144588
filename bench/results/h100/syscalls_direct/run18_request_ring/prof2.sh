#!/usr/bin/env bash
# prof.sh BINDIR OUT: sluiced on cuda with a CPU profile, one VM, null calls at 1024 callers (long) and 1 caller.
set -u
bin=$1 out=$2; mkdir -p $out
dir=$(mktemp -d /tmp/sluice-prof-XXXXXX); chmod 711 $dir
export SLUICE_SOCKET=$dir/sluiced.sock
SLUICE_CPU_PROFILE=$out/sluiced.prof $bin/sluiced --backend cuda --max-command 30s --socket $SLUICE_SOCKET --state-dir $dir/state >$out/sluiced.log 2>&1 &
daemon=$!
for _ in $(seq 100); do [ -S $SLUICE_SOCKET ] && break; sleep 0.1; done
ep=$($bin/sluicectl vm create bench --channels 4 --region-size ${REGION:-64MiB})
sleep 1
$bin/sluicectl vm get bench --json > $out/vm-before.json
timeout 100 $bin/sluice-agent --endpoint "$ep" run syscall-bench --backend cuda --json --channel 2 --callers 1024 --calls ${CALLS:-2048000} > $out/null-1024.json
$bin/sluicectl vm get bench --json > $out/vm-after.json
[ -n "${ONE:-}" ] && timeout 100 $bin/sluice-agent --endpoint "$ep" run syscall-bench --backend cuda --json --channel 1 --callers 1 --calls 100000 > $out/null-1.json
kill $daemon; wait $daemon
