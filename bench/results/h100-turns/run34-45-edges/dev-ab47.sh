#!/usr/bin/env bash
# run47/ab.sh OUT: after dev.sh a, run45's build against run47's, alternating, on mixed-none, skew-none, skew3-none,
# mixed-none again.
set -u
out=$1; x=$(cd "$(dirname "$0")" && pwd)
gunzip -c $x/../run45/sluicectl.gz > $out/s45 && gunzip -c $x/sluicectl.gz > $out/s47 && chmod +x $out/s45 $out/s47
for s in mixed-none skew-none skew3-none mixed-none; do
  for b in 45 47; do
    timeout 60 $out/s$b bench run bench/specs-gpu/$s.yaml --json --native=false > $out/ab-b$b-$s.json 2> $out/ab-b$b-$s.err || echo FAIL
    python3 -c "
import json; r=json.load(open('$out/ab-b$b-$s.json'))
print('b$b $s', ' '.join(f\"{v['name']}:{100*v['accounting_error']:+.1f}/tr{100*(v['bill_kinds_ns'].get('tracer',0)/max(1,v['true_gpu_ns'])-1):+.0f}\" for v in r['vms']))"
  done
done
tar czf $out/ab47.tgz -C $out $(cd $out && ls ab-*.json)
rm -f $out/s45 $out/s47 $out/ab-*.json $out/ab-*.err
