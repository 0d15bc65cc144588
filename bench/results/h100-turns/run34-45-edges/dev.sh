#!/usr/bin/env bash
# dev.sh OUT MODE RUN [CONTROL]: run RUN's build (.devbin/runRUN/: builds.txt, the gzipped static sluicectl and
# cuda.test, ../summarize.py) on the GPU, from the repository root; results into OUT, rRUNMODE.tgz.
# MODE a: the cuda GPU tests, then $SPECS (default: equal16-dfq three times and equal8-dfq, skew-none, skew3-none,
# mixed-none, nooveruse-dfq, nooveruse-none, weights-none, load-10pct, depths-dfq, overhead-100us-loga once),
# --native=false. MODE b: every bench/specs-gpu spec once (--native=false but for the alone-* specs). MODE c: the
# build of CONTROL (a run number) against RUN's, alternating twice, on the low-load specs.
set -u
uptime
out=$1; mode=$2; run=$3; x=$(cd "$(dirname "$0")" && pwd)/../run$run; r=$out/r; mkdir -p $r
specs=${SPECS:-"equal16-dfq equal16-dfq.2 equal16-dfq.3 equal8-dfq skew-none skew3-none mixed-none nooveruse-dfq nooveruse-none weights-none load-10pct depths-dfq overhead-100us-loga"}
gunzip -c $x/sluicectl.gz > $out/sl && chmod +x $out/sl
if [ $mode = a ]; then
  gunzip -c $x/cuda.test.gz > mediator/backend/cuda/cuda.test && chmod +x mediator/backend/cuda/cuda.test
  (cd mediator/backend/cuda && SLUICE_REQUIRE_GPU=1 timeout 200 ./cuda.test -test.run GPU -test.count=1 -test.v > $r/gpu.log 2>&1; echo "gpu tests exit $?" >> $r/gpu.log)
  grep -E "^(--- FAIL|gpu tests exit)|MEASURED: VM" $r/gpu.log; grep -c -- "--- PASS" $r/gpu.log
  for s in $specs; do
    timeout 60 $out/sl bench run bench/specs-gpu/${s%.*}.yaml --json --native=false > $r/$s.json 2> $r/$s.err || echo "FAIL $s"
  done
elif [ $mode = c ]; then
  ctl=$4
  gunzip -c $x/../run$ctl/sluicectl.gz > $out/slc && chmod +x $out/slc
  for round in 1 2; do for b in $ctl $run; do
    bin=$out/sl; [ $b = $ctl ] && bin=$out/slc
    for s in load-10pct load-20pct load-30pct overhead-100us-loga skew3-dfq; do
      timeout 60 $bin bench run bench/specs-gpu/$s.yaml --json --native=false > $r/b$b-$s.$round.json 2> $r/b$b-$s.$round.err || echo "FAIL $s"
    done
  done; done
  rm -f $out/slc
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
cp $x/builds.txt $out/
tar czf $out/r$run$mode.tgz -C $out r summary.txt builds.txt
rm -rf $r $out/sl mediator/backend/cuda/cuda.test
tail -25 $out/summary.txt
