#!/usr/bin/env bash
# .devbin/h21/dev.sh OUT: on the H100, the think-time anticipation and auto as the default against the base, two
# rounds interleaved (the order of the builds reversed in round 2): for each of nooveruse, equal8, skew3, mixed,
# depths, longkernel, `sluicectl bench run SPEC --json --native=false` by
#   base-driver    the base on the -driver twin (what main does by default),
#   base-auto      the base on the -auto twin (auto before this branch: depths' depth-1 VM got 2%),
#   branch-default the branch on the -dfq spec as written (its default: the result must say arbitration auto);
# then alone-10us-depth1 with --rounds 3 (and its native baseline) by base and branch. Needs build.sh's outputs
# beside it. Results: OUT/h21.tgz (the JSONs, stderr, summary, builds) and OUT/summary.txt, printed at the end
# (bench/results/h100-turns/summarize.py: arbitration, Jain, busy, per VM share/bill error/p50/p99/kernels).
# About 5 minutes; stops starting runs after 480 s so that a summary always comes back.
set -u
out=$1; x=$(cd "$(dirname "$0")" && pwd); r=$out/r; mkdir -p $r
for b in base branch; do gunzip -c $x/sluicectl-$b.gz > $out/sluicectl-$b && chmod +x $out/sluicectl-$b; done
start=$(date +%s)
one() { # build spec tag [args...]
  local b=$1 spec=$2 tag=$3; shift 3
  if (( $(date +%s) - start > 480 )); then echo "SKIP $tag-r$n (time)"; return; fi
  timeout 120 $out/sluicectl-$b bench run $x/specs/$spec.yaml --json "$@" > $r/$tag-r$n.json 2> $r/$tag-r$n.err ||
    echo "FAIL $tag-r$n: $(tail -2 $r/$tag-r$n.err)"
}
for n in 1 2; do
  for s in nooveruse equal8 skew3 mixed depths longkernel; do
    if (( n == 1 )); then
      one base $s-driver $s-base-driver --native=false
      one base $s-auto $s-base-auto --native=false
      one branch $s-dfq $s-branch-default --native=false
    else
      one branch $s-dfq $s-branch-default --native=false
      one base $s-auto $s-base-auto --native=false
      one base $s-driver $s-base-driver --native=false
    fi
  done
  echo "round $n done at $(( $(date +%s) - start )) s"
done
n=1
one base alone-10us-depth1 alone-10us-depth1-base --rounds 3
one branch alone-10us-depth1 alone-10us-depth1-branch --rounds 3
echo "all done at $(( $(date +%s) - start )) s"
python3 $x/summarize.py $r > $out/summary.txt 2>&1
cp $x/builds.txt $out/
tar czf $out/h21.tgz -C $out r summary.txt builds.txt
rm -rf $r $out/sluicectl-base $out/sluicectl-branch
cat $out/builds.txt $out/summary.txt
