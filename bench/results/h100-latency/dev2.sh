#!/usr/bin/env bash
# dev2.sh OUT: the alone-* GPU specs with their native baselines, two rounds.
set -u
out=$1; x=$(cd "$(dirname "$0")" && pwd); mkdir -p $out/bench
for r in 1 2; do for s in alone-10us-depth1 alone-10us-depth32 alone-5us-depth1 alone-5us-depth32 alone-10ms-depth4; do
  timeout 90 $x/cur/sluicectl bench run bench/specs-gpu/$s.yaml --json > $out/bench/$s-r$r.json 2>$out/bench/$s-r$r.err || echo "$s r$r failed: $(tail -2 $out/bench/$s-r$r.err)"
done; done
python3 bench/results/h100-turns/summarize.py $out/bench | tee $out/summary.txt
