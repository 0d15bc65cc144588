#!/usr/bin/env bash
# r74h.sh OUT ROUNDS: turns specs with the hand-off on (as written) and off, alternating; tars into OUT/r74h.tgz
set -u
out=$1; rounds=$2; x=$(cd "$(dirname "$0")" && pwd)/..; b=/tmp/b74; mkdir -p $b $out/h
[ -x $b/sluicectl ] || { gunzip -c $x/run74/sluicectl.gz > $b/sluicectl; chmod +x $b/sluicectl; }
for round in $(seq $rounds); do
for s in ${SPECS:-weights13-turns depths-turns skew3-turns}; do
  for v in on off; do
    f=bench/specs-gpu/$s.yaml; [ $v = off ] && f=$x/specs74/$s-nohandoff.yaml
    j=$out/h/r$round-$v-$s.json
    timeout 60 $b/sluicectl bench run $f --json --native=false > $j 2> ${j%.json}.err || echo FAIL $s
    python3 -c "
import json; r=json.load(open('$j'))
print('r$round $v $s', 'jain %.3f util %.1f sw %.1f ovh %.1f'%(r['jain_index'],100*r['utilization'],r['switch_overhead_ns']/1e6,r['gpu_overhead_ns']/1e6), ' '.join(f\"{v['name']}:{100*v.get('share',0):.1f}%/b{100*(v.get('accounting_error') or 0):+.1f}/p99 {v.get('latency_p99_ns',0)/1e6:.1f}ms\" for v in r['vms']))" || true
  done
done; done
tar czf $out/r74h.tgz -C $out h && rm -rf $out/h
