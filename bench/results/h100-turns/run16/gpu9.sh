#!/usr/bin/env bash
# gpu9.sh OUT ROUNDS: head (tighter sweeps) vs unseen (a command never seen running billed from the sweep before)
set -u
out=$1 rounds=$2; mkdir -p $out/r
S=bench/specs-gpu
for r in $(seq $rounds); do for b in head unseen; do
  c=.devbin/$b/sluicectl
  for x in alone-10us-depth1 alone-5us-depth1 alone-5us-depth32 alone-10us-depth32; do timeout 150 $c bench run $S/$x.yaml --json > $out/r/$x-$b-r$r.json 2>/dev/null || echo FAIL $x; done
  for x in mixed-turns depths-turns; do timeout 150 $c bench run $S/$x.yaml --json --native=false > $out/r/$x-$b-r$r.json 2>/dev/null || echo FAIL $x; done
done; done
python3 bench/results/h100-turns/summarize.py $out/r | sed 's/^/  /'
tar czf $out/all.tgz -C $out r
