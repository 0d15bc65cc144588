#!/usr/bin/env bash
# run33/dev.sh OUT: after the read-through (builds.txt): the cuda GPU tests, then skew-none, mixed-none, equal16-dfq
# and depths-dfq once, --native=false.
set -u
out=$1; x=$(cd "$(dirname "$0")" && pwd); r=$out/r; mkdir -p $r
gunzip -c $x/cuda.test.gz > mediator/backend/cuda/cuda.test && chmod +x mediator/backend/cuda/cuda.test
gunzip -c $x/sluicectl.gz > $out/sl && chmod +x $out/sl
(cd mediator/backend/cuda && SLUICE_REQUIRE_GPU=1 timeout 200 ./cuda.test -test.run GPU -test.count=1 -test.v > $r/gpu.log 2>&1; echo "gpu tests exit $?" >> $r/gpu.log)
grep -E "^(--- FAIL|gpu tests exit)|MEASURED: VM" $r/gpu.log; grep -c -- "--- PASS" $r/gpu.log
for s in skew-none mixed-none equal16-dfq depths-dfq; do
  timeout 60 $out/sl bench run bench/specs-gpu/$s.yaml --json --native=false > $r/$s.json 2> $r/$s.err || echo "FAIL $s"
done
python3 $x/summarize.py $r > $out/summary.txt 2>&1
cp $x/builds.txt $x/dev.sh $out/
tar czf $out/r33.tgz -C $out r summary.txt builds.txt
python3 - $r <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    r = json.load(open(f))
    print(f.split('/')[-1][:-5], ' '.join(f"{v['name']}:{100*v['accounting_error']:+.1f}" for v in r['vms']))
PY
rm -rf $r $out/sl
