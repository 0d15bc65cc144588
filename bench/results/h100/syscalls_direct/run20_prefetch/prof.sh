#!/usr/bin/env bash
# prof.sh OUT: machine facts; a CPU profile of sluiced during 1024 warp callers x 16M calls;
# then warp callers 128..1024 (poller ns/call, empty passes).
set -u
x=$(cd $(dirname "$0"); pwd); out=$1; mkdir -p $out; chmod 1777 $out
lscpu | grep -E 'Model name|^CPU\(s\)|L3' > $out/machine.txt; nvidia-smi -L >> $out/machine.txt 2>&1
which perf >> $out/machine.txt 2>&1
one() { # tag callers calls envs...
  tag=$1 n=$2 calls=$3; shift 3
  o=$out/$tag; mkdir -p $o
  dir=$(mktemp -d /tmp/sluice-p-XXXXXX); chmod 711 $dir
  export SLUICE_SOCKET=$dir/sluiced.sock
  env "$@" $x/${B:-cur}/sluiced --backend cuda --max-command 30s --socket $SLUICE_SOCKET --state-dir $dir/state >$o/sluiced.log 2>&1 &
  daemon=$!
  for _ in $(seq 100); do [ -S $SLUICE_SOCKET ] && break; sleep 0.1; done
  ep=$($x/cur/sluicectl vm create bench --channels 4 --region-size 256MiB)
  sleep 1
  $x/cur/sluicectl vm get bench --json > $o/vm0.json
  timeout 100 $x/cur/sluice-agent --endpoint "$ep" run syscall-bench --backend cuda --json --channel 2 --caller warp --callers $n --calls $calls > $o/n.json
  $x/cur/sluicectl vm get bench --json > $o/vm1.json
  kill $daemon; wait $daemon; rm -rf $dir; tail -3 $o/sluiced.log
  python3 - $o $tag <<'PY'
import json,sys
o,b=sys.argv[1:]
try:
  v0=json.load(open(o+'/vm0.json'))['syscalls']; v1=json.load(open(o+'/vm1.json'))['syscalls']
  n=json.load(open(o+'/n.json'))['null'][0]
except Exception as e:
  print(f"{b}: failed: {e}"); sys.exit()
scan=v1['scan_ns']-v0['scan_ns']; taken=sum(v1['calls'].values())-sum(v0['calls'].values())
bp=v1['batches']-v0['batches']; sp=v1['scan_passes']-v0['scan_passes']
print(f"{b}: {n['calls_per_s']/1e6:.2f} M/s p50 {n['p50_ns']/1e3:.1f} us  poller {scan/max(taken,1):.0f} ns/call  {taken/max(bp,1):.0f} calls/batch, {100*(sp-bp)/max(sp,1):.0f}% passes empty")
PY
}
{
shift; one prof-1024 1024 16384000 SLUICE_CPU_PROFILE=$out/prof-1024/sluiced.pprof "$@"
[ -n "${SCALE:-}" ] && for r in 1 2; do for n in 128 256 512 1024; do one scale-$n-r$r $n 4096000; done; done
} 2>&1 | tee $out/summary.txt
