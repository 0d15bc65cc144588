#!/bin/bash
# GPU system calls on the cuda backend: the second device run behind syscalls.md
# (one caller at window 0; the coalescing window, set with --weight 1 beside it).
# Run from the repository root with bin/ built by `make build`; results in $OUT.
set -x
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
id; uname -r; nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv
unshare -Ur true && echo "user namespaces: ok"
S=/tmp/s; rm -rf $S; mkdir -p $S
export SLUICE_SOCKET=$S/s.sock
bin/sluiced --backend cuda --socket $S/s.sock --state-dir $S/state >$OUT/sluiced.log 2>&1 &
for i in $(seq 50); do [ -S $S/s.sock ] && break; sleep 0.2; done
EP=$(bin/sluicectl vm create a) || { cat $OUT/sluiced.log; exit 1; }
vmget() { echo "== $1"; bin/sluicectl vm get a --json; } 
vmget created >>$OUT/vm.log
V=$S/state/volumes/a
echo "the quick brown fox jumps over the lazy dog" >$V/x
head -c 64M /dev/urandom >$V/bench.bin
chmod 644 $V/x $V/bench.bin
A="bin/sluice-agent --endpoint $EP"
SD=$(pgrep -x sluiced); W=$(pgrep -f sluice-gpu-worker | head -1)
PX=$(bin/sluicectl vm get a --json | sed -n 's/.*"proxy_pid": *\([0-9]*\).*/\1/p')
echo "sluiced $SD proxy $PX worker $W"
CPU="--cpu-pid $SD --cpu-pid $PX --cpu-pid $W"
# one caller: the pread round trips, generic and fastcall, without contention
timeout 120 $A run syscall-bench --channel 1 --backend cuda --json --label "window 0, one caller" \
  --callers 1 --calls 2000 --pread-path /bench.bin --pread-callers 1 --pread-calls 4096 $CPU >$OUT/bench_window0_1caller.json
cat $OUT/bench_window0_1caller.json
vmget "after bench window 0, one caller" >>$OUT/vm.log
# vm set with --weight 1 (unchanged): the API server refuses an update of the syscall settings alone
bin/sluicectl vm set a --weight 1 --syscall-window 20us --syscall-batch 1024
vmget "window set" >>$OUT/vm.log
timeout 240 $A run syscall-bench --channel 2 --backend cuda --json --label "window 20us batch 1024" \
  --pread-path /bench.bin $CPU >$OUT/bench_window20us.json
cat $OUT/bench_window20us.json
vmget "after bench window 20us" >>$OUT/vm.log
tail -20 $OUT/sluiced.log
