#!/bin/sh
# The sim's host cost per command before and after its device files
# (BenchmarkCommandRate, mediator/backend/sim), interleaved: 10 rounds of
# before then after, 50000 commands each. Before: 352c1b8 (main with the
# benchmark only), with this checkout's cmdrate_test.go; after: this
# checkout. Writes go-bench-before.txt, go-bench-after.txt and
# summary.json here. Run from the repository root.
set -eu
out=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git archive 352c1b8 | tar -x -C "$tmp"
cp mediator/backend/sim/cmdrate_test.go "$tmp/mediator/backend/sim/"
(cd "$tmp/mediator/backend/sim" && go test -c -o "$tmp/before.test" .)
(cd mediator/backend/sim && go test -c -o "$tmp/after.test" .)
: >"$out/go-bench-before.txt"
: >"$out/go-bench-after.txt"
for i in 1 2 3 4 5 6 7 8 9 10; do
	for w in before after; do
		"$tmp/$w.test" -test.run xxx -test.bench CommandRate -test.benchtime 50000x -test.benchmem >>"$out/go-bench-$w.txt"
	done
done
python3 - "$out" <<'PY'
import json, re, statistics, sys
out = sys.argv[1]
res = {}
for w in ("before", "after"):
    for line in open(f"{out}/go-bench-{w}.txt"):
        m = re.match(r"BenchmarkCommandRate/(\S+)-\d+\s+\d+\s+([\d.]+) ns/op", line)
        if m:
            res.setdefault(m.group(1), {}).setdefault(w, []).append(float(m.group(2)))
summary = {k: {w: {"median_ns": statistics.median(v), "min_ns": min(v), "runs_ns": v} for w, v in d.items()} for k, d in res.items()}
for k, d in summary.items():
    d["added_ns_median"] = round(d["after"]["median_ns"] - d["before"]["median_ns"], 1)
    d["added_ns_min"] = round(d["after"]["min_ns"] - d["before"]["min_ns"], 1)
    print(f'{k:12} median before {d["before"]["median_ns"]:9.1f} after {d["after"]["median_ns"]:9.1f} (+{d["added_ns_median"]}); '
          f'min before {d["before"]["min_ns"]:9.1f} after {d["after"]["min_ns"]:9.1f} (+{d["added_ns_min"]}) ns')
json.dump({"command": "sh bench/results/simcrash/run.sh", "benchmark": "BenchmarkCommandRate", "unit": "ns per command, host time; median and min of 10 interleaved runs", "results": summary}, open(f"{out}/summary.json", "w"), indent=1)
PY
