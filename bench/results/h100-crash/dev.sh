#!/usr/bin/env bash
# dev.sh [OUT]: the cuda backend's GPU tests (TestGPU..., among them TestGPUCrashAdopt: a mediator
# process killed with SIGKILL, its VM's worker adopted from a stand-in fd store; and TestGPUKeepAdopt)
# on this machine's GPU, from mediator/backend/cuda, as `SLUICE_REQUIRE_GPU=1 ./cuda.test -test.run GPU
# -test.count=1 -test.v`. Needs .devbin/h12/cuda.test.gz (build.sh). Run from the repository root;
# the log goes to OUT/gpu.log (OUT defaults to $OUT, else /tmp). Under 3 minutes.
set -u
x=$(cd "$(dirname "$0")" && pwd); out=${1:-${OUT:-/tmp}}; mkdir -p "$out"
gunzip -c "$x/cuda.test.gz" > mediator/backend/cuda/cuda.test && chmod +x mediator/backend/cuda/cuda.test
cd mediator/backend/cuda
SLUICE_REQUIRE_GPU=1 timeout 170 ./cuda.test -test.run GPU -test.count=1 -test.v -test.timeout 165s > "$out/gpu.log" 2>&1
rc=$?
grep -E '^(--- |=== RUN|PASS|FAIL|ok)|crash|adopted|kept in|outlived' "$out/gpu.log" | grep -v '^=== RUN' | tail -60
echo "exit $rc (log: $out/gpu.log)"
exit $rc
