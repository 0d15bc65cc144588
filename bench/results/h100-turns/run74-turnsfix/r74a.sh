#!/usr/bin/env bash
# r74a.sh OUT: GPU tests, the turns-fairness specs twice, the daemon demo on the GPU; tars into OUT/r74a.tgz
set -u
out=$1; x=$(cd "$(dirname "$0")" && pwd)/..; b=/tmp/b74; mkdir -p $b $out/a
for f in $x/run74/*.gz; do gunzip -c $f > $b/$(basename $f .gz); chmod +x $b/$(basename $f .gz); done
{ nproc; uptime; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; grep -m1 "model name" /proc/cpuinfo; cat /sys/devices/system/clocksource/clocksource0/current_clocksource; } > $out/a/host.txt
(cd mediator/backend/cuda && SLUICE_REQUIRE_GPU=1 timeout 200 $b/cuda.test -test.run TestGPU -test.v) > $out/a/gpu-tests.txt 2>&1; echo "gpu tests rc $?"
grep -E "^(--- |ok|FAIL|PASS)" $out/a/gpu-tests.txt | tail -20
for round in 1 2; do
for s in longkernel-turns mixed-turns equal8-dfq depths-turns skew3-turns weights13-turns; do
  j=$out/a/r$round-$s.json
  timeout 60 $b/sluicectl bench run bench/specs-gpu/$s.yaml --json --native=false > $j 2> ${j%.json}.err || echo FAIL $s
  python3 -c "
import json; r=json.load(open('$j'))
arb=r.get('arbitration') or 'driver'
print('r$round $s', arb, 'jain %.3f util %.1f'%(r['jain_index'],100*r['utilization']), ' '.join(f\"{v['name']}:{100*v.get('share',0):.1f}%/b{100*(v.get('accounting_error') or 0):+.1f}/p99 {v.get('latency_p99_ns',0)/1e6:.1f}ms\" for v in r['vms']))" || true
done; done
SLUICED_ARGS="--backend cuda" DEMO_SECONDS=8 BIN=$b timeout 120 deploy/demo.sh > $out/a/daemon-demo.txt 2>&1; echo "demo rc $?"; tail -25 $out/a/daemon-demo.txt
tar czf $out/r74a.tgz -C $out a && rm -rf $out/a
