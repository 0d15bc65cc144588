#!/usr/bin/env bash
# run26/dev.sh OUT: every bench/specs-gpu spec once (--native=false but for the alone-* specs), by the build of
# builds.txt.
set -u
out=$1; x=$(cd "$(dirname "$0")" && pwd); r=$out/r; mkdir -p $r
gunzip -c $x/sluicectl.gz > $out/sl && chmod +x $out/sl
for f in bench/specs-gpu/*.yaml; do
  s=$(basename $f .yaml); nat=--native=false
  case $s in alone-*) nat=;; esac
  timeout 90 $out/sl bench run $f --json $nat > $r/$s.json 2> $r/$s.err || echo "FAIL $s"
done
python3 $x/summarize.py $r > $out/summary.txt 2>&1
python3 - $r >> $out/summary.txt <<'PY'
import json, sys, glob
worst = []
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    try: r = json.load(open(f))
    except Exception as e: print('no result', f, e); continue
    for v in r['vms']:
        e = v.get('accounting_error')
        if e is not None: worst.append((abs(e), f.split('/')[-1][:-5], v['name'], e))
worst.sort(reverse=True)
print('largest bill errors:', [(s, n, round(100*e, 2)) for _, s, n, e in worst[:8]])
PY
cp $x/builds.txt $x/dev.sh $x/summarize.py $out/
tar czf $out/r26.tgz -C $out r summary.txt builds.txt
rm -rf $r $out/sl
cat $out/builds.txt; tail -1 $out/summary.txt; grep -c . $out/summary.txt
