#!/usr/bin/env bash
# run25/dev.sh OUT: the cuda GPU tests, then the policy-none specs (the driver's time slicing, billed by the tracers)
# two rounds each, and the default (auto) specs and a VM alone once, --native=false but for the VM alone.
set -u
out=$1; x=$(cd "$(dirname "$0")" && pwd); r=$out/r; mkdir -p $r
gunzip -c $x/cuda.test.gz > mediator/backend/cuda/cuda.test && chmod +x mediator/backend/cuda/cuda.test
gunzip -c $x/sluicectl.gz > $out/sl && chmod +x $out/sl
(cd mediator/backend/cuda && SLUICE_REQUIRE_GPU=1 timeout 200 ./cuda.test -test.run GPU -test.count=1 -test.v > $r/gpu.log 2>&1; echo "gpu tests exit $?" >> $r/gpu.log)
grep -E "^(--- |gpu tests exit)|MEASURED" $r/gpu.log
for n in 1 2; do for s in skew-none weights-none nooveruse-none skew3-none mixed-none; do
  timeout 60 $out/sl bench run bench/specs-gpu/$s.yaml --json --native=false > $r/$s-r$n.json 2> $r/$s-r$n.err || echo "FAIL $s"
done; done
for s in skew-dfq mixed-dfq skew3-dfq equal8-dfq depths-dfq weights13-dfq; do
  timeout 60 $out/sl bench run bench/specs-gpu/$s.yaml --json --native=false > $r/$s-r1.json 2> $r/$s-r1.err || echo "FAIL $s"
done
timeout 100 $out/sl bench run bench/specs-gpu/alone-10us-depth1.yaml --json > $r/alone-10us-depth1-r1.json 2> $r/alone-10us-depth1-r1.err || echo "FAIL alone"
python3 $x/summarize.py $r > $out/summary.txt 2>&1
cp $x/builds.txt $x/dev.sh $x/summarize.py $out/
tar czf $out/r25.tgz -C $out r summary.txt builds.txt
rm -rf $r $out/sl
cat $out/builds.txt $out/summary.txt
