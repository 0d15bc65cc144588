#!/usr/bin/env bash
# dev.sh OUT: issue 12's bills against the truth on the GPU after bills2 (about 3-4 minutes with both builds).
# Runs each spec below through `sluicectl bench run SPEC --json --native=false` (cuda backend in process) with
# duration 1s (longkernel: 2s), under arbitration driver and turns where the spec has a twin, for the build in
# .devbin/h6/cur and, if present, .devbin/h6/base (interleaved; the alone-* specs twice, as rounds r1 and r2),
# then prints per VM bill vs truth % and the sum of the truths and of the bills against the run's duration.
# Build first with BASE=1a0bb5c .devbin/h6/build.sh (base: main when bills2 began; cur: this tree).
set -u
out=$1; x=$(cd "$(dirname "$0")" && pwd); root=$(cd "$x/../.." && pwd)
mkdir -p "$out/specs" "$out/bench"
cd "$root"
dur() { sed -e "s/^duration: .*/duration: $2/" "$1"; }
turns() { # the spec under arbitration turns (5 ms quantum), unless it says so already
  if grep -q '^tuning:' "$1"; then cat; else sed -e 's/^policy: \(.*\)/policy: \1\ntuning: {arbitration: turns}/'; fi
}
g=bench/specs-gpu
for s in skew3-dfq skew-dfq equal8-dfq mixed-dfq; do
  dur $g/$s.yaml 1s > "$out/specs/$s-driver.yaml"
  dur $g/$s.yaml 1s | turns $g/$s.yaml > "$out/specs/$s-turns.yaml"
done
dur $g/longkernel-dfq.yaml 2s > "$out/specs/longkernel-driver.yaml"
dur $g/longkernel-turns.yaml 2s > "$out/specs/longkernel-turns.yaml"
for s in alone-5us-depth1 alone-5us-depth32 alone-10us-depth1 alone-10us-depth32; do
  dur $g/$s.yaml 1s > "$out/specs/$s.yaml"
done
builds=cur; [ -x "$x/base/sluicectl" ] && builds="base cur"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/device.txt" 2>&1
for f in "$out"/specs/*.yaml; do
  s=$(basename "$f" .yaml)
  rounds=r1; case $s in alone-*) rounds="r1 r2";; esac
  for r in $rounds; do
    for b in $builds; do
      timeout 60 "$x/$b/sluicectl" bench run "$f" --json --native=false > "$out/bench/$s.$r.$b.json" 2> "$out/bench/$s.$r.$b.err" \
        || echo "$s $r ($b) failed: $(tail -2 "$out/bench/$s.$r.$b.err")"
    done
  done
done
python3 - "$out/bench" <<'PY' | tee "$out/summary.txt"
import json, sys, glob, os
worst = {}
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    try:
        r = json.load(open(f))
    except Exception as e:
        print(os.path.basename(f), 'unreadable:', e); continue
    name = os.path.basename(f)[:-5]
    b = name.rsplit('.', 1)[1]
    vms = []
    for v in r['vms']:
        e = v.get('accounting_error')
        e = 100 * e if e is not None else float('nan')
        worst[b] = max(worst.get(b, 0), abs(e))
        vms.append(f"{v['name']} {e:+.2f}% (truth {v['true_gpu_ns']/1e6:.1f} ms, k{v['kernels']})")
    d = r['duration_ns']
    tsum = sum(v['true_gpu_ns'] for v in r['vms']) / d
    bsum = sum(v['accounted_gpu_ns'] for v in r['vms']) / d
    print(f"{name:35s} util {100*r['utilization']:.1f}% overhead {r.get('gpu_overhead_ns',0)/1e6:.0f} ms truths {100*tsum:.0f}% bills {100*bsum:.0f}% of the duration | " + ", ".join(vms))
for b, w in sorted(worst.items()):
    print(f"{b}: worst |bill - truth| {w:.2f}%")
PY
