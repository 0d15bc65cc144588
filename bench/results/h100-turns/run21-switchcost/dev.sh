#!/usr/bin/env bash
# .devbin/h27/dev.sh OUT: on the H100, from the repository root. First the branch's cuda GPU tests
# (TestGPUSwitchOverhead logs the calibrated f three times and its cost), then longkernel-dfq and skew3-driver,
# `sluicectl bench run SPEC --json --native=false`, by base and branch, two rounds interleaved (the order reversed
# in round 2). Needs build.sh's outputs beside it. Results: OUT/h27.tgz (JSONs, stderr, GPU test log, summary,
# builds) and OUT/summary.txt, printed at the end (per run: arbitration, overhead, the branch's switch overhead and
# f, per VM share / bill error against the truth / p50 / p99 / kernels). Stops starting runs after 240 s.
set -u
out=$1; x=$(cd "$(dirname "$0")" && pwd); r=$out/r; mkdir -p $r
for b in base branch; do
  for p in sluicectl cuda.test; do gunzip -c $x/$p-$b.gz > $out/$p-$b && chmod +x $out/$p-$b; done
done
start=$(date +%s)
(cd mediator/backend/cuda && SLUICE_REQUIRE_GPU=1 timeout 150 $out/cuda.test-branch -test.run GPU -test.count=1 -test.v) > $r/gpu-tests.log 2>&1
echo "GPU tests rc=$? at $(( $(date +%s) - start )) s"
grep -E "^(--- |FAIL|ok|PASS)|switch|calibration|measured at Open" $r/gpu-tests.log | head -60
one() { # build spec
  local b=$1 spec=$2 tag=$2-$1
  if (( $(date +%s) - start > 240 )); then echo "SKIP $tag-r$n (time)"; return; fi
  timeout 60 $out/sluicectl-$b bench run $x/specs/$spec.yaml --json --native=false > $r/$tag-r$n.json 2> $r/$tag-r$n.err ||
    echo "FAIL $tag-r$n: $(tail -2 $r/$tag-r$n.err)"
}
for n in 1 2; do
  for s in longkernel-dfq skew3-driver; do
    if (( n == 1 )); then one base $s; one branch $s; else one branch $s; one base $s; fi
  done
  echo "round $n done at $(( $(date +%s) - start )) s"
done
python3 $x/summarize.py $r > $out/summary.txt 2>&1
grep -hi "switch overhead" $r/*.err >> $out/summary.txt
cp $x/builds.txt $out/
tar czf $out/h27.tgz -C $out r summary.txt builds.txt
rm -rf $r $out/sluicectl-* $out/cuda.test-*
cat $out/builds.txt $out/summary.txt
