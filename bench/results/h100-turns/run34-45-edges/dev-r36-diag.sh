#!/usr/bin/env bash
# run36/dev.sh OUT: a diagnostic build (not committed: 8b1a599 plus per-VM bill sums, SLUICE_DIAG, and tracing on
# while a VM waits with work beside a running one, SLUICE_EARLY).
set -u
out=$1; x=$(cd "$(dirname "$0")" && pwd)
gunzip -c $x/sluicectl.gz > $out/sl && chmod +x $out/sl
run() { # name spec early
  SLUICE_EARLY=$3 SLUICE_DIAG=$out/$1.diag timeout 60 $out/sl bench run bench/specs-gpu/$2.yaml --json --native=false > $out/$1.json 2> $out/$1.err || echo FAIL $1
  python3 -c "
import json; r=json.load(open('$out/$1.json'))
print('$1', ' '.join(f\"{v['name']}:{100*v['accounting_error']:+.2f}:true={v['true_gpu_ns']/1e6:.1f}:k={v['bill_kinds_ns']['alone']/1e6:.1f}/{v['bill_kinds_ns']['traced']/1e6:.1f}/{v['bill_kinds_ns']['even']/1e6:.1f}\" for v in r['vms']))"
  cat $out/$1.diag
}
run noo-base nooveruse-dfq ""
run noo-early nooveruse-dfq 1
run noon-early nooveruse-none 1
run eq16-early equal16-dfq 1
run eq16-early2 equal16-dfq 1
run skew-early skew-none 1
run mixed-early mixed-none 1
rm -f $out/sl
