#!/usr/bin/env bash
# dev.sh OUT: arbitration auto against the driver's time slicing (and turns on nooveruse) on the H100, two rounds
# interleaved; every run `sluicectl bench run SPEC --json --native=false`, SPEC the twins in .devbin/h15/specs of
# bench/specs-gpu with tuning: {arbitration: driver|turns|auto}. Needs .devbin/h15/sluicectl.gz (build.sh).
# Results: OUT/h15.tgz (the JSON, stderr, summary) and OUT/summary.txt, printed at the end. About 4 minutes.
set -u
out=$1; x=$(dirname "$0"); r=$out/r; mkdir -p $r
gunzip -c $x/sluicectl.gz > $out/sluicectl && chmod +x $out/sluicectl
P=$x/specs
one() { # spec-name
  timeout 60 $out/sluicectl bench run $P/$1.yaml --json --native=false > $r/$1-r$n.json 2> $r/$1-r$n.err ||
    echo "FAIL $1-r$n: $(tail -2 $r/$1-r$n.err)"
}
start=$(date +%s)
for n in 1 2; do
  for a in driver turns auto; do one nooveruse-$a; done
  for s in equal8 skew3 mixed depths alone-10us-depth1 longkernel; do
    for a in driver auto; do one $s-$a; done
  done
  echo "round $n done at $(( $(date +%s) - start )) s"
done
python3 - $r > $out/summary.txt <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    name = os.path.basename(f)[:-5]
    try:
        res = json.load(open(f))
    except Exception as e:
        print(f"{name}: no result ({e})"); continue
    bills = [100 * (v.get('accounting_error') or 0) for v in res['vms']]
    worst = max(bills, key=abs) if bills else 0
    arb = res.get('arbitration') or 'driver'
    if arb == 'auto':
        arb = (f"auto->{res.get('arbitration_in_force')} switches {res.get('arbitration_switches', 0)} "
               f"turns-periods {res.get('turns_periods', 0)}/{res.get('periods', 0)}")
    def out(v):
        o = v.get('outstanding')
        return f"/out {100*o:.0f}%" if o is not None else ""
    vms = " ".join(f"{v['name']}:{100*v.get('share',0):.1f}%/bill{100*(v.get('accounting_error') or 0):+.1f}%"
                   f"/p50 {v.get('latency_p50_ns',0)/1e3:.0f}us/p99 {v.get('latency_p99_ns',0)/1e3:.0f}us/k{v.get('kernels',0)}{out(v)}"
                   for v in res['vms'])
    print(f"{name}: [{arb}] jain {res['jain_index']:.3f} busy {100*res['utilization']:.1f}% overhead {res.get('gpu_overhead_ns',0)/1e6:.0f}ms "
          f"kernels {res.get('kernels',0)} worst-bill {worst:+.1f}% vms-in-flight {res.get('max_vms_in_flight')} | {vms}")
PY
cp $x/builds.txt $out/ 2>/dev/null
tar czf $out/h15.tgz -C $out r summary.txt $(cd $out && ls builds.txt 2>/dev/null)
rm -rf $r $out/sluicectl
cat $out/summary.txt
