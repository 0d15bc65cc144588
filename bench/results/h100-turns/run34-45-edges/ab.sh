#!/usr/bin/env bash
# ab.sh OUT A B ROUNDS SPEC...: run A's build against run B's (.devbin/runA/ and runB/, gzipped static sluicectl),
# alternating on one host, each SPEC (bench/specs-gpu/SPEC.yaml, --native=false) ROUNDS times, from the repository
# root; prints each VM's bill error and its tracer's count against its kernels' own time, JSONs into OUT/abB.tgz.
set -u
out=$1; a=$2; b=$3; rounds=$4; shift 4; x=$(cd "$(dirname "$0")" && pwd)/..
for n in $a $b; do gunzip -c $x/run$n/sluicectl.gz > $out/s$n && chmod +x $out/s$n; done
nproc; uptime
for round in $(seq $rounds); do
  for s in "$@"; do
    for n in $a $b; do
      j=$out/r$round-b$n-$s.json
      timeout 60 $out/s$n bench run bench/specs-gpu/$s.yaml --json --native=false > $j 2> ${j%.json}.err || echo FAIL
      python3 -c "
import json; r=json.load(open('$j'))
print('r$round b$n $s', ' '.join(f\"{v['name']}:{100*v['accounting_error']:+.1f}/tr{100*(v['bill_kinds_ns'].get('tracer',0)/max(1,v['true_gpu_ns'])-1):+.0f}\" for v in r['vms']))"
    done
  done
done
tar czf $out/ab$b.tgz -C $out $(cd $out && ls r*-b*.json)
rm -f $out/s$a $out/s$b $out/r*-b*.json $out/r*-b*.err
