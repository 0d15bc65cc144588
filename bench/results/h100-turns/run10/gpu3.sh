#!/usr/bin/env bash
# gpu3.sh OUT ROUNDS: cur (ffa85f1) vs split (completions delivered by their own goroutine), interleaved
set -u
out=$1 rounds=$2; mkdir -p $out/r
one() { # ctl spec name [--native=false]
  timeout 150 $1 bench run $2 --json ${4:-} > $out/r/$3.json 2> $out/r/$3.err || echo "FAIL $3 $(tail -2 $out/r/$3.err)"
  python3 - $out/r/$3.json <<'PY'
import json,sys
try: r=json.load(open(sys.argv[1]))
except Exception as e: print(sys.argv[1], "no result", e); sys.exit()
vms=" ".join(f"{v['name']}:{100*v.get('share',0):.1f}%/bill{100*(v.get('accounting_error') or 0):+.1f}%/p50 {v.get('latency_p50_ns',0)/1e3:.0f}us/p99 {v.get('latency_p99_ns',0)/1e3:.0f}us/k{v.get('kernels',0)}" for v in r['vms'])
nat=r.get('native') or {}
vn=nat.get('vs_native_busy'); vn=f"{vn:.3f}" if vn else "-"
print(f"{sys.argv[1].split('/')[-1][:-5]}: jain {r['jain_index']:.3f} util {100*r['utilization']:.1f}% ovh {r.get('gpu_overhead_ns',0)/1e6:.0f}ms vsnative {vn} | {vms}")
PY
}
S=bench/specs-gpu
for r in $(seq $rounds); do for b in cur split; do
  c=.devbin/$b/sluicectl
  for x in alone-10us-depth32 alone-5us-depth32 alone-10us-depth1; do one $c $S/$x.yaml $x-$b-r$r; done
  for x in skew3-turns mixed-turns depths-turns skew3-dfq equal8-dfq; do one $c $S/$x.yaml $x-$b-r$r --native=false; done
done; done
tar czf $out/all.tgz -C $out r
