#!/usr/bin/env bash
# r4/dev.sh OUT: main with every branch of the session merged, under its default (auto): bench/specs-gpu's
# {depths,mixed,skew3,equal8,nooveruse,longkernel}-dfq.yaml, two rounds, --native=false; alone-10us-depth1 --rounds 3.
set -u
out=$1; x=$(cd "$(dirname "$0")" && pwd); r=$out/r; mkdir -p $r
gunzip -c $x/sluicectl.gz > $out/sl && chmod +x $out/sl
for n in 1 2; do for s in depths mixed skew3 equal8 nooveruse longkernel; do
  timeout 60 $out/sl bench run bench/specs-gpu/$s-dfq.yaml --json --native=false > $r/$s-r$n.json 2> $r/$s-r$n.err || echo "FAIL $s"
done; done
n=1; timeout 100 $out/sl bench run bench/specs-gpu/alone-10us-depth1.yaml --json --rounds 3 > $r/alone-10us-depth1-r1.json 2> $r/alone-10us-depth1-r1.err || echo FAIL alone
python3 $x/summarize.py $r > $out/summary.txt 2>&1
cp $x/builds.txt $out/
tar czf $out/r4.tgz -C $out r summary.txt builds.txt
rm -rf $r $out/sl
cat $out/builds.txt $out/summary.txt
