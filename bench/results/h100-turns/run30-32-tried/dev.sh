#!/usr/bin/env bash
# run32/dev.sh OUT: equal16-dfq twice, nooveruse-dfq, depths-dfq, skew-none, mixed-none, skew3-none, weights-none, equal8-dfq once, --native=false,
# by the build of builds.txt.
set -u
out=$1; x=$(cd "$(dirname "$0")" && pwd); r=$out/r; mkdir -p $r
gunzip -c $x/sluicectl.gz > $out/sl && chmod +x $out/sl
for s in equal16-dfq equal16-dfq nooveruse-dfq depths-dfq skew-none mixed-none skew3-none weights-none equal8-dfq; do
  timeout 60 $out/sl bench run bench/specs-gpu/$s.yaml --json --native=false > $r/$s-$RANDOM.json 2> /dev/null || echo "FAIL $s"
done
python3 $x/summarize.py $r > $out/summary.txt 2>&1
python3 - $r >> $out/summary.txt <<'PY'
import json, sys, glob
worst = []
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    r = json.load(open(f))
    for v in r['vms']:
        e = v.get('accounting_error')
        if e is not None: worst.append((abs(e), f.split('/')[-1][:-5], v['name'], e))
worst.sort(reverse=True)
print('largest bill errors:', [(s, n, round(100*e, 2)) for _, s, n, e in worst[:10]])
PY
cp $x/builds.txt $x/dev.sh $x/summarize.py $out/
tar czf $out/r32.tgz -C $out r summary.txt builds.txt
rm -rf $r $out/sl
cat $out/builds.txt; tail -1 $out/summary.txt
