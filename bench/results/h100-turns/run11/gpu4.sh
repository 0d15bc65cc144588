#!/usr/bin/env bash
# gpu4.sh OUT ROUNDS: cur (HEAD) vs spin (the GPU worker spins 100 us on an empty ring before it sleeps)
set -u
out=$1 rounds=$2; mkdir -p $out/r $out/specs
S=bench/specs-gpu
sed 's/^\(policy: .*\)$/\1\ntuning: {arbitration: turns}/' $S/nooveruse-dfq.yaml > $out/specs/nooveruse-turns.yaml
one() { # ctl spec name [--native=false]
  timeout 150 $1 bench run $2 --json ${4:-} > $out/r/$3.json 2> $out/r/$3.err || echo "FAIL $3 $(tail -2 $out/r/$3.err)"
}
for r in $(seq $rounds); do for b in cur spin; do
  c=.devbin/$b/sluicectl
  for x in alone-10us-depth1 alone-5us-depth32; do one $c $S/$x.yaml $x-$b-r$r; done
  for x in nooveruse-dfq mixed-turns skew3-turns equal8-dfq; do one $c $S/$x.yaml $x-$b-r$r --native=false; done
  one $c $out/specs/nooveruse-turns.yaml nooveruse-turns-$b-r$r --native=false
done; done
python3 bench/results/h100-turns/summarize.py $out/r | sed 's/^/  /'
tar czf $out/all.tgz -C $out r specs
