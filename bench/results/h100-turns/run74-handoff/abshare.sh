#!/usr/bin/env bash
# abshare.sh OUT A B ROUNDS SPEC...: A's build against B's, alternating on one host; prints jain, each VM's share and
# bill error, p99; JSONs into OUT/abB.tgz.
set -u
out=$1; a=$2; b=$3; rounds=$4; shift 4; x=$(cd "$(dirname "$0")" && pwd)/..
for n in $a $b; do gunzip -c $x/run$n/sluicectl.gz > $out/s$n && chmod +x $out/s$n; done
nproc; uptime; nvidia-smi --query-gpu=name --format=csv,noheader
# The host, to tell hosts apart where bills differ by host: CPU model and clock source.
grep -m1 "model name" /proc/cpuinfo; cat /sys/devices/system/clocksource/clocksource0/current_clocksource
for round in $(seq $rounds); do
  for s in "$@"; do
    for n in $a $b; do
      j=$out/r$round-b$n-$s.json
      timeout 60 $out/s$n bench run bench/specs-gpu/$s.yaml --json --native=false > $j 2> ${j%.json}.err || echo FAIL $(tail -c 300 ${j%.json}.err)
      python3 -c "
import json; r=json.load(open('$j'))
arb=r.get('arbitration') or 'driver'
if arb=='auto': arb='auto:%d/%d'%(r.get('turns_periods',0),r.get('periods',0))
print('r$round b$n $s', arb, 'jain %.3f util %.1f'%(r['jain_index'],100*r['utilization']), ' '.join(f\"{v['name']}:{100*v.get('share',0):.1f}%/b{100*(v.get('accounting_error') or 0):+.1f}/p99 {v.get('latency_p99_ns',0)/1e6:.1f}ms\" for v in r['vms']))" || true
    done
  done
done
tar czf $out/ab$b.tgz -C $out $(cd $out && ls r*-b*.json)
rm -f $out/s$a $out/s$b $out/r*-b*.json $out/r*-b*.err
