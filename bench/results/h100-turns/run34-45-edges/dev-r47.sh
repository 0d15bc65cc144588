#!/usr/bin/env bash
# run47/dev.sh OUT MODE: the build of builds.txt (the rounds tracer, each VM billed its whole count: exact-count.patch).
# MODE a: the cuda GPU tests, then equal16-dfq three times and equal8-dfq, skew-none, skew3-none, mixed-none, nooveruse-dfq, nooveruse-none, weights-none, load-10pct, depths-dfq, overhead-100us-loga once,
# --native=false. MODE b: every bench/specs-gpu spec once (--native=false but for the alone-* specs).
set -u
uptime
out=$1; mode=$2; x=$(cd "$(dirname "$0")" && pwd); r=$out/r; mkdir -p $r
gunzip -c $x/sluicectl.gz > $out/sl && chmod +x $out/sl
if [ $mode = a ]; then
  gunzip -c $x/cuda.test.gz > mediator/backend/cuda/cuda.test && chmod +x mediator/backend/cuda/cuda.test
  (cd mediator/backend/cuda && SLUICE_REQUIRE_GPU=1 timeout 200 ./cuda.test -test.run GPU -test.count=1 -test.v > $r/gpu.log 2>&1; echo "gpu tests exit $?" >> $r/gpu.log)
  grep -E "^(--- FAIL|gpu tests exit)|MEASURED: VM" $r/gpu.log; grep -c -- "--- PASS" $r/gpu.log
  for s in equal16-dfq equal16-dfq.2 equal16-dfq.3 equal8-dfq skew-none skew3-none mixed-none nooveruse-dfq nooveruse-none weights-none load-10pct depths-dfq overhead-100us-loga; do
    timeout 60 $out/sl bench run bench/specs-gpu/${s%.*}.yaml --json --native=false > $r/$s.json 2> $r/$s.err || echo "FAIL $s"
  done
else
  for f in bench/specs-gpu/*.yaml; do
    s=$(basename $f .yaml); nat=--native=false
    case $s in alone-*) nat=;; esac
    timeout 90 $out/sl bench run $f --json $nat > $r/$s.json 2> $r/$s.err || echo "FAIL $s"
  done
fi
python3 $x/summarize.py $r > $out/summary.txt 2>&1
python3 - $r >> $out/summary.txt <<'PY'
import json, sys, glob
worst = []
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    try: r = json.load(open(f))
    except Exception as e: print('no result', f, e); continue
    print(f.split('/')[-1][:-5], ' '.join(f"{v['name']}:{100*v['accounting_error']:+.1f}" for v in r['vms'] if v.get('accounting_error') is not None))
    for v in r['vms']:
        e = v.get('accounting_error')
        if e is not None: worst.append((abs(e), f.split('/')[-1][:-5], v['name'], e))
worst.sort(reverse=True)
print('largest bill errors:', [(s, n, round(100*e, 2)) for _, s, n, e in worst[:10]])
PY
cp $x/builds.txt $x/dev.sh $x/summarize.py $out/
tar czf $out/r47$mode.tgz -C $out r summary.txt builds.txt
rm -rf $r $out/sl mediator/backend/cuda/cuda.test
tail -25 $out/summary.txt
