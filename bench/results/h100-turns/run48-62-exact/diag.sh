#!/usr/bin/env bash
# diag.sh OUT RUN ROUNDS SPEC...: RUN's sluicectl (.devbin/runRUN/sluicectl.gz) on each spec, ROUNDS times, with the hop
# diagnostic (SLUICE_CUDA_HOPS); prints each run's bills, counters and the billing hops; JSONs into OUT/rRUN.tgz.
set -u
uptime; nproc
out=$1; run=$2; rounds=$3; shift 3; x=$(cd "$(dirname "$0")" && pwd)/../run$run; r=$out/r; mkdir -p $r
gunzip -c $x/sluicectl.gz > $out/sl && chmod +x $out/sl
for round in $(seq $rounds); do for s in "$@"; do
  SLUICE_CUDA_HOPS=$r/$s.$round.hops.json timeout 60 $out/sl bench run bench/specs-gpu/$s.yaml --json --native=false > $r/$s.$round.json 2> $r/$s.$round.err || echo "FAIL $s"
done; done
python3 - $r > $out/diag.txt <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + '/*.hops.json')):
    h = json.load(open(f)); res = json.load(open(f.replace('.hops.json', '.json')))
    hs = {x['hop']: x for x in h['hops']}
    print(f.split('/')[-1][:-10], 'bills', ' '.join(f"{v['name']}:{100*(v.get('accounting_error') or 0):+.1f}" for v in res['vms']), h.get('counters'))
    for k in ['bill_less_kernel', 'seen_span_less_kernel', 'kernel_gap', 'sweep_after_delivery', 'delivering_sweep', 'hand_off', 'kernel', 'kernel_start_to_start_seen', 'kernel_end_to_end_seen', 'completer_sweep', 'submit_to_worker_read', 'launched_to_kernel_start']:
        x = hs.get(k)
        if x: print(f"   {k:28s} n {x['n']:7d} mean {x.get('mean_ns',0)/1e3:8.2f} p10 {x['p10_ns']/1e3:8.2f} p50 {x['p50_ns']/1e3:8.2f} p90 {x['p90_ns']/1e3:8.2f} p99 {x['p99_ns']/1e3:8.2f} us")
PY
tar czf $out/r$run.tgz -C $out r diag.txt
rm -rf $r $out/sl
cat $out/diag.txt
