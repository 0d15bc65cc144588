#!/usr/bin/env bash
# ab44/dev.sh OUT: A/B of run43's build (b42f08d) against run44's (aae4f7d), alternating on one host, on skew-none,
# skew3-none, nooveruse-dfq and mixed-none (--native=false).
set -u
out=$1; x=$(cd "$(dirname "$0")" && pwd)
gunzip -c $x/../run43/sluicectl.gz > $out/s43 && gunzip -c $x/../run44/sluicectl.gz > $out/s44 && chmod +x $out/s43 $out/s44
uptime
for s in skew-none skew3-none nooveruse-dfq mixed-none; do
  for b in 43 44; do
    timeout 60 $out/s$b bench run bench/specs-gpu/$s.yaml --json --native=false > $out/b$b-$s.json 2> $out/b$b-$s.err || echo FAIL
    python3 -c "
import json; r=json.load(open('$out/b$b-$s.json'))
print('b$b $s', ' '.join(f\"{v['name']}:{100*v['accounting_error']:+.1f}\" for v in r['vms']))"
  done
done
tar czf $out/ab44.tgz -C $out $(cd $out && ls b*.json)
rm -f $out/s43 $out/s44 $out/b*.json $out/b*.err
