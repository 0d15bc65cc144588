#!/usr/bin/env bash
# run38/dev.sh OUT: a diagnostic build (not committed: 9614d39 plus a log of VM 2's intervals and completions,
# SLUICE_DIAG): overhead-100us-loga and nooveruse-dfq.
set -u
out=$1; x=$(cd "$(dirname "$0")" && pwd)
gunzip -c $x/sluicectl.gz > $out/sl && chmod +x $out/sl
for s in overhead-100us-loga nooveruse-dfq; do
  SLUICE_DIAG=$out/$s.diag timeout 60 $out/sl bench run bench/specs-gpu/$s.yaml --json --native=false > $out/$s.json 2> $out/$s.err || echo FAIL $s
  python3 -c "
import json; r=json.load(open('$out/$s.json'))
print('$s', ' '.join(f\"{v['name']}:{100*v['accounting_error']:+.2f}\" for v in r['vms']))"
  gzip $out/$s.diag; rm -f $out/$s.json
done
rm -f $out/sl
