#!/usr/bin/env bash
# dev1.sh OUT: GPU tests, longkernel turns/driver (prev vs cur), syscall ring confirmation.
set -u
out=$1; x=$(dirname "$0"); mkdir -p $out/bench
(cd mediator/backend/cuda && SLUICE_REQUIRE_GPU=1 timeout 250 ../../../$x/cuda.test -test.count=1 -test.v 2>&1 | grep -E "^(=== RUN|--- |PASS|FAIL|ok)|GPU:" | grep -v "=== RUN" > ../../../$out/gpu-tests.txt; tail -3 ../../../$out/gpu-tests.txt)
for r in 1 2; do for b in prev cur; do for s in longkernel-turns longkernel-dfq; do
  timeout 60 $x/$b/sluicectl bench run $x/$s.yaml --json --native=false > $out/bench/$s-$b-r$r.json 2>$out/bench/$s-$b-r$r.err || echo "$s $b r$r failed: $(tail -2 $out/bench/$s-$b-r$r.err)"
done; done; done
python3 bench/results/h100-turns/summarize.py $out/bench | tee $out/bench/summary.txt
CALLS=4096000 $x/ab.sh $out/ab 4 cur:work-item cur:warp 2>&1 | grep -v "^sluice" | tail -8
