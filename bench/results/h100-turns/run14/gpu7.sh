#!/usr/bin/env bash
# gpu7.sh OUT ROUNDS: nobody over-uses: dfq vs none under the driver, and dfq under turns (HEAD build), interleaved
set -u
out=$1 rounds=$2; mkdir -p $out/r $out/specs
S=bench/specs-gpu
sed 's/^\(policy: .*\)$/\1\ntuning: {arbitration: turns}/' $S/nooveruse-dfq.yaml > $out/specs/nooveruse-turns.yaml
c=.devbin/head/sluicectl
for r in $(seq $rounds); do
  for x in $S/nooveruse-none.yaml $S/nooveruse-dfq.yaml $out/specs/nooveruse-turns.yaml; do
    n=$(basename $x .yaml)
    timeout 150 $c bench run $x --json --native=false > $out/r/$n-r$r.json 2> $out/r/$n-r$r.err || echo "FAIL $n"
  done
done
python3 bench/results/h100-turns/summarize.py $out/r | sed 's/^/  /'
tar czf $out/all.tgz -C $out r specs
