#!/bin/bash
# Device run 2: the syscalls Go benchmarks, before (3098da5) and after (HEAD), 3 rounds each, interleaved.
G=$PWD/build/gpubench2
cat /sys/devices/system/clocksource/clocksource0/current_clocksource; nproc
for i in 1 2 3; do for v in before after; do
  echo "== $v round $i"
  (cd /tmp && SLUICE_PROXY_BIN=$G/$v/sluice-proxy timeout 100 $G/$v/sysbench.test -test.run '^$' -test.bench . -test.benchtime 2000x 2>&1 | grep -v INFO | grep ns/op) | tee -a $OUT/gobench-$v.txt
done; done
