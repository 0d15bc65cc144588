#!/usr/bin/env bash
# dev.sh OUT: turns with the pipelined hand-off (new) against turns without it (base = 0fc8305) and the
# driver's time slicing, on the H100, two rounds interleaved; every run `sluicectl bench run SPEC --json
# --native=false`. Needs .devbin/h13/{base,new}/sluicectl.gz (build.sh). Results: OUT/h13.tgz (the JSON,
# stderr, summary) and OUT/summary.txt, printed at the end. About 5-6 minutes.
set -u
out=$1; x=$(dirname "$0"); r=$out/r; mkdir -p $r
for b in base new; do gunzip -c $x/$b/sluicectl.gz > $out/sluicectl-$b && chmod +x $out/sluicectl-$b; done
S=bench/specs-gpu P=$x/specs
one() { # build spec name
  timeout 60 $out/sluicectl-$1 bench run $2 --json --native=false > $r/$3.json 2> $r/$3.err || echo "FAIL $3: $(tail -2 $r/$3.err)"
}
start=$(date +%s)
for n in 1 2; do
  one new  $S/nooveruse-none.yaml       nooveruse-none-r$n
  one new  $S/nooveruse-dfq.yaml        nooveruse-driver-r$n
  one base $P/nooveruse-turns.yaml      nooveruse-turns-base-r$n
  one new  $P/nooveruse-turns.yaml      nooveruse-turns-new-r$n
  one new  $P/nooveruse-turns-nohandoff.yaml nooveruse-turns-new-nohandoff-r$n
  for b in base new; do
    one $b $S/mixed-turns.yaml          mixed-turns-$b-r$n
    one $b $S/skew3-turns.yaml          skew3-turns-$b-r$n
    one $b $P/equal8-turns.yaml         equal8-turns-$b-r$n
    one $b $P/alone-10us-depth1-turns.yaml alone-10us-depth1-turns-$b-r$n
    one $b $S/longkernel-turns.yaml     longkernel-turns-$b-r$n
  done
  one new  $P/mixed-turns-nohandoff.yaml mixed-turns-new-nohandoff-r$n
  one new  $S/alone-10us-depth1.yaml    alone-10us-depth1-driver-r$n
  echo "round $n done at $(( $(date +%s) - start )) s"
done
python3 - $r > $out/summary.txt <<'PY'
import json, sys, glob, os
rows = []
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    name = os.path.basename(f)[:-5]
    try:
        res = json.load(open(f))
    except Exception as e:
        print(f"{name}: no result ({e})"); continue
    bills = [100 * (v.get('accounting_error') or 0) for v in res['vms']]
    worst = max(bills, key=abs) if bills else 0
    vms = " ".join(f"{v['name']}:{100*v.get('share',0):.1f}%/bill{100*(v.get('accounting_error') or 0):+.1f}%"
                   f"/p50 {v.get('latency_p50_ns',0)/1e3:.0f}us/p99 {v.get('latency_p99_ns',0)/1e3:.0f}us/k{v.get('kernels',0)}"
                   for v in res['vms'])
    print(f"{name}: jain {res['jain_index']:.3f} busy {100*res['utilization']:.1f}% overhead {res.get('gpu_overhead_ns',0)/1e6:.0f}ms "
          f"kernels {res.get('kernels',0)} worst-bill {worst:+.1f}% vms-in-flight {res.get('max_vms_in_flight')} | {vms}")
PY
cp $x/builds.txt $out/ 2>/dev/null
tar czf $out/h13.tgz -C $out r summary.txt $(cd $out && ls builds.txt 2>/dev/null)
rm -rf $r $out/sluicectl-base $out/sluicectl-new
cat $out/summary.txt
