#!/usr/bin/env bash
# gpu2.sh OUT: turns vs driver on the GPU specs (current build), the record fix A/B (prev vs cur) on turns specs,
# quantum sweep on depths-turns, alone specs with native. Results tarred.
set -u
out=$1; mkdir -p $out/specs $out/r
cur=.devbin/cur/sluicectl prev=.devbin/prev/sluicectl
one() { # ctl spec name [--native=false]
  timeout 150 $1 bench run $2 --json ${4:-} > $out/r/$3.json 2> $out/r/$3.err || echo "FAIL $3 $(tail -2 $out/r/$3.err)"
  python3 - $out/r/$3.json <<'PY'
import json,sys
try: r=json.load(open(sys.argv[1]))
except Exception as e: print(sys.argv[1], "no result", e); sys.exit()
vms=" ".join(f"{v['name']}:{100*v.get('share',0):.1f}%/bill{100*(v.get('accounting_error') or 0):+.1f}%/p99 {v.get('latency_p99_ns',0)/1e3:.0f}us/k{v.get('kernels',0)}" for v in r['vms'])
nat=r.get('native') or {}
vn=nat.get('vs_native_busy'); vn=f"{vn:.3f}" if vn else "-"
print(f"{sys.argv[1].split('/')[-1][:-5]}: jain {r['jain_index']:.3f} util {100*r['utilization']:.1f}% ovh {r.get('gpu_overhead_ns',0)/1e6:.0f}ms maxvms {r.get('max_vms_in_flight')} vsnative {vn} | {vms}")
PY
}
S=bench/specs-gpu
for x in mixed skew3 depths skew weights13; do
  one $cur $S/$x-dfq.yaml $x-driver --native=false
  one $cur $S/$x-turns.yaml $x-turns --native=false
done
for x in mixed skew3 depths; do one $prev $S/$x-turns.yaml $x-turns-prevbuild --native=false; done
for x in equal8-dfq nooveruse-dfq equal16-dfq; do
  sed 's/^\(policy: .*\)$/\1\ntuning: {arbitration: turns}/' $S/$x.yaml > $out/specs/$x-turns.yaml
  one $cur $S/$x.yaml $x-driver --native=false
  one $cur $out/specs/$x-turns.yaml $x-turns --native=false
done
for q in 1ms 2ms; do
  sed "s/arbitration: turns/arbitration: turns, quantum: $q/" $S/depths-turns.yaml > $out/specs/depths-turns-q$q.yaml
  grep -q "quantum: $q" $out/specs/depths-turns-q$q.yaml || echo "quantum edit failed: $(grep tuning $S/depths-turns.yaml)"
  one $cur $out/specs/depths-turns-q$q.yaml depths-turns-q$q --native=false
done
for x in alone-10us-depth1 alone-10us-depth32 alone-5us-depth32 alone-10ms-depth4; do one $cur $S/$x.yaml $x; done
tar czf $out/all.tgz -C $out r specs
