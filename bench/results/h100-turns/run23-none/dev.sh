#!/usr/bin/env bash
# r5/dev.sh OUT: bench/specs-gpu's policy-none specs (the driver's arbitration in force) and weights13, two rounds,
# --native=false, by 23fe98a.
set -u
out=$1; x=$(cd "$(dirname "$0")" && pwd); r=$out/r; mkdir -p $r
gunzip -c $x/sluicectl.gz > $out/sl && chmod +x $out/sl
for n in 1 2; do for s in skew-none weights-none nooveruse-none weights13-dfq kernel-length-100us load-50pct; do
  timeout 60 $out/sl bench run bench/specs-gpu/$s.yaml --json --native=false > $r/$s-r$n.json 2> $r/$s-r$n.err || echo "FAIL $s"
done; done
python3 $x/summarize.py $r > $out/summary.txt 2>&1
cp $x/builds.txt $out/
tar czf $out/r5.tgz -C $out r summary.txt builds.txt
rm -rf $r $out/sl
cat $out/builds.txt $out/summary.txt
