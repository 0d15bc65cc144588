#!/usr/bin/env bash
# prof3.sh BINDIR OUT: CPU profiles of sluiced and the VM's proxy at 1024 null callers (CALLS).
set -u
bin=$1 out=$2; mkdir -p $out
dir=$(mktemp -d /tmp/sluice-prof-XXXXXX); chmod 711 $dir
pd=$(mktemp -d /tmp/sluice-pprof-XXXXXX); chmod 1777 $pd
export SLUICE_SOCKET=$dir/sluiced.sock
SLUICE_CPU_PROFILE=$out/sluiced.prof SLUICE_PROXY_CPU_PROFILE=$pd/proxy.prof SLUICE_PROXY_CPU_PROFILE_SECONDS=${PSECS:-5} $bin/sluiced --backend cuda --max-command 30s --socket $SLUICE_SOCKET --state-dir $dir/state >$out/sluiced.log 2>&1 &
daemon=$!
for _ in $(seq 100); do [ -S $SLUICE_SOCKET ] && break; sleep 0.1; done
ep=$($bin/sluicectl vm create bench --channels 4 --region-size 256MiB)
sleep 1
$bin/sluicectl vm get bench --json > $out/vm-before.json
timeout 100 $bin/sluice-agent --endpoint "$ep" run syscall-bench --backend cuda --json --channel 2 --callers 1024 --calls ${CALLS:-20480000} > $out/null-1024.json
$bin/sluicectl vm get bench --json > $out/vm-after.json
sleep ${PWAIT:-3}
kill $daemon; wait $daemon
cp $pd/proxy.prof.* $out/ 2>/dev/null; ls -la $pd
