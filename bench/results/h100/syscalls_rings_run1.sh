#!/bin/bash
# Device run: the syscalls Go benchmarks (before/after) and the GPU
# syscall-bench (bench/gpu/syscalls.sh) before/after. Results in $OUT/results.tgz.
set -x
R=/tmp/res; mkdir -p $R
G=$PWD/build/gpubench
cp $G/after/sluicectl $G/after/sluice-agent $G/before/
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv > $R/device.txt; nproc >> $R/device.txt; uname -r >> $R/device.txt
for v in before after; do
  (cd /tmp && SLUICE_PROXY_BIN=$G/$v/sluice-proxy timeout 100 $G/$v/sysbench.test -test.run '^$' -test.bench . -test.benchtime 2000x 2>&1 | grep -v INFO > $R/gobench-$v.txt)
  cat $R/gobench-$v.txt
done
for v in before after; do
  timeout 200 bash bench/gpu/syscalls.sh $G/$v $R/gpu-$v
  echo "== $v"; cat $R/gpu-$v/syscalls-window0.json $R/gpu-$v/syscalls-window20us.json
done
tar -C $R -czf $OUT/results.tgz .
