#!/usr/bin/env bash
# run35/dev.sh OUT: a diagnostic build (not committed: 8b1a599 plus a per-credit log while tracing, SLUICE_DIAG):
# equal16-dfq three times.
set -u
out=$1; x=$(cd "$(dirname "$0")" && pwd)
gunzip -c $x/sluicectl.gz > $out/sl && chmod +x $out/sl
for i in 1 2 3; do
  SLUICE_DIAG=$out/d$i.txt timeout 60 $out/sl bench run bench/specs-gpu/equal16-dfq.yaml --json --native=false > $out/e$i.json 2> $out/e$i.err || echo FAIL
  python3 -c "
import json; r=json.load(open('$out/e$i.json'))
print(' '.join(f\"{v['name']}:{100*v['accounting_error']:+.1f}:{v['bill_kinds_ns']['alone']/1e6:.1f}/{v['bill_kinds_ns']['even']/1e6:.1f}\" for v in r['vms']))"
  gzip $out/d$i.txt
done
rm -f $out/sl
