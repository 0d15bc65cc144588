#!/usr/bin/env bash
# ringexp.sh OUT ROUNDS: ring experiment; per round, env variants; phases mode 3 (slots+hints) vs 67 (ring)
set -u
out=$1 rounds=$2; mkdir -p $out
bin=.devbin/ring
for r in $(seq $rounds); do for envs in "SLUICE_SYSCALL_RING=1" "SLUICE_SYSCALL_RING=1 SLUICE_SYSCALL_NULL_HERE=1"; do
  tag=$(echo "$envs" | tr " =" "__"); o=$out/$tag-r$r; mkdir -p $o
  dir=$(mktemp -d /tmp/sluice-ab-XXXXXX); chmod 711 $dir
  export SLUICE_SOCKET=$dir/sluiced.sock
  env $envs $bin/sluiced --backend cuda --max-command 30s --socket $SLUICE_SOCKET --state-dir $dir/state >$o/sluiced.log 2>&1 &
  daemon=$!
  for _ in $(seq 100); do [ -S $SLUICE_SOCKET ] && break; sleep 0.1; done
  ep=$($bin/sluicectl vm create bench --channels 4 --region-size 256MiB)
  sleep 1
  for mode in 3 67 3 67; do
    $bin/sluicectl vm get bench --json > $o/vm-$mode-0.json
    timeout 60 $bin/sluice-agent --endpoint "$ep" run syscall-bench --backend cuda --json --channel 2 --callers 1 --calls 100 --phases $mode --phase-callers 1024,1 --phase-iterations 4000 > $o/ph-$mode.json
    $bin/sluicectl vm get bench --json > $o/vm-$mode-1.json
    python3 - $o $mode "$tag" $r <<'PY'
import json,sys
o,m,t,r=sys.argv[1:]
v0=json.load(open(f'{o}/vm-{m}-0.json'))['syscalls']; v1=json.load(open(f'{o}/vm-{m}-1.json'))['syscalls']
ph=json.load(open(f'{o}/ph-{m}.json'))['phases']
served=v1['served']-v0['served']; scan=v1['scan_ns']-v0['scan_ns']; busy=v1.get('poller_busy_ns',0)-v0.get('poller_busy_ns',0)
p1024=[p for p in ph if p['callers']==1024][0]; p1=[p for p in ph if p['callers']==1][0]
print(f"{t} r{r} mode {m}: 1024 {p1024['gpu_calls_per_s']/1e6:.2f} M/s  scan {scan/max(served,1):.0f} ns/call busy {busy/max(served,1):.0f} ns/call served {served} raced {v1.get('raced',0)} lost {v1.get('lost',0)} | 1 caller p50 {p1['total_p50_ns']/1e3:.2f} us p99 {p1['total_p99_ns']/1e3:.2f}")
PY
  done
  kill $daemon; wait $daemon; rm -rf $dir
done; done 2>&1 | tee $out/summary.txt
