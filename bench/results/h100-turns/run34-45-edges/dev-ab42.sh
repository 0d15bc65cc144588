#!/usr/bin/env bash
# ab42/dev.sh OUT: A/B of run41's build against run42's, alternating, on load-10pct, nooveruse-dfq,
# overhead-100us-loga, depths-dfq and equal8-dfq (--native=false), twice each.
set -u
out=$1; x=$(cd "$(dirname "$0")" && pwd)
gunzip -c $x/../run41/sluicectl.gz > $out/s41 && gunzip -c $x/../run42/sluicectl.gz > $out/s42 && chmod +x $out/s41 $out/s42
nproc; uptime
for round in 1 2; do
  for b in 41 42; do
    for s in load-10pct nooveruse-dfq overhead-100us-loga depths-dfq equal8-dfq; do
      timeout 60 $out/s$b bench run bench/specs-gpu/$s.yaml --json --native=false > $out/r$round-$b-$s.json 2> $out/r$round-$b-$s.err || echo FAIL
      python3 -c "
import json; r=json.load(open('$out/r$round-$b-$s.json'))
print('r$round b$b $s', ' '.join(f\"{v['name']}:{100*v['accounting_error']:+.1f}\" for v in r['vms']))"
    done
  done
done
tar czf $out/ab42.tgz -C $out $(cd $out && ls r*.json)
rm -f $out/s41 $out/s42 $out/r*.json $out/r*.err
