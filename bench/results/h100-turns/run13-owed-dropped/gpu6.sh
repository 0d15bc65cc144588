#!/usr/bin/env bash
# gpu5.sh OUT ROUNDS: bank (HEAD) vs owed (turns end early for a VM owed time; the holder keeps a quarter quantum in flight while others wait)
set -u
out=$1 rounds=$2; mkdir -p $out/r $out/specs
S=bench/specs-gpu
for x in nooveruse-dfq equal8-dfq; do sed 's/^\(policy: .*\)$/\1\ntuning: {arbitration: turns}/' $S/$x.yaml > $out/specs/${x%-dfq}-turns.yaml; done
one() { timeout 150 $1 bench run $2 --json --native=false > $out/r/$3.json 2> $out/r/$3.err || echo "FAIL $3 $(tail -2 $out/r/$3.err)"; }
for r in $(seq $rounds); do for b in bank owed; do
  c=.devbin/$b/sluicectl
  for x in depths-turns mixed-turns skew3-turns weights13-turns; do one $c $S/$x.yaml $x-$b-r$r; done
  for x in nooveruse-turns equal8-turns; do one $c $out/specs/$x.yaml $x-$b-r$r; done
done; done
python3 bench/results/h100-turns/summarize.py $out/r | sed 's/^/  /'
tar czf $out/all.tgz -C $out r specs
