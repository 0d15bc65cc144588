#!/bin/bash
# GPU system calls on the cuda backend: the device run behind syscalls.md.
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
timeout 60 $A run syscall null --backend cuda --json
timeout 60 $A run syscall openat AT_FDCWD /x O_RDONLY --backend cuda
timeout 60 $A run wordcount /x --backend cuda --json
vmget "after the three checks" >>$OUT/vm.log
SD=$(pgrep -x sluiced); W=$(pgrep -f sluice-gpu-worker | head -1)
PX=$(bin/sluicectl vm get a --json | sed -n 's/.*"proxy_pid": *\([0-9]*\).*/\1/p')
echo "sluiced $SD proxy $PX worker $W"
timeout 240 $A run syscall-bench --channel 1 --backend cuda --json --label "window 0" \
  --cpu-pid $SD --cpu-pid $PX --cpu-pid $W --pread-path /bench.bin >$OUT/bench_window0.json
cat $OUT/bench_window0.json
vmget "after bench window 0" >>$OUT/vm.log
bin/sluicectl vm set a --syscall-window 20us --syscall-batch 1024
timeout 200 $A run syscall-bench --channel 2 --backend cuda --json --label "window 20us batch 1024" \
  --cpu-pid $SD --cpu-pid $PX --cpu-pid $W >$OUT/bench_window20us.json
cat $OUT/bench_window20us.json
vmget "after bench window 20us" >>$OUT/vm.log
tail -20 $OUT/sluiced.log
