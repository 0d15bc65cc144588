#!/bin/bash
# Measurements on the GPU host's CPUs (no GPU used): doorbell paths and sim speed.
set -u
cd "$(dirname "$0")"
nproc; uname -r; grep -m1 "model name" /proc/cpuinfo
./vm.test -test.run '^$' -test.bench DoorbellToDispatch -test.benchtime 50000x -test.count 3
./ivshmem.test -test.run '^$' -test.bench 'Doorbell|Notify' -test.benchtime 2s
./sim.test -test.run '^$' -test.bench 'VirtualThroughput|WallLateness' -test.benchtime 2s
d=$(mktemp -d)
for be in "--backend sim --clock virtual" "--backend sim --clock wall --backend-params cmd_ns=0"; do
  ./sluiced --socket $d/s.sock --state-dir $d/st $be --log-level warn & p=$!
  sleep 0.5
  ./sluicectl --socket $d/s.sock vm create lat --channels 1 >/dev/null 2>&1
  echo "== agent latency, $be"
  ./sluice-agent --endpoint $d/vms/lat.sock run latency --count 50000 --json
  kill $p; wait $p
done
rm -rf $d
