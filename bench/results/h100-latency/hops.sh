#!/usr/bin/env bash
# dev.sh OUT: issue 14's depth-1 latency on the GPU, for the lead to run on the H100 (run from the repository root or
# anywhere: it finds the specs beside it). Needs build.sh's binaries in this folder. About 2.5 minutes.
#   1. the hop diagnostic (SLUICE_CUDA_HOPS) on the alone 10 µs and 5 µs depth-1 specs: where a command's time goes,
#      per hop, for Sluice and for the native loop; then the same with SLUICE_NATIVE_STREAM_MARKERS=1 (the native
#      loop with the two cuStreamWriteValue64 markers a GPU worker puts around a LAUNCH)
#   2. the alone 10 µs / 5 µs, depth 1 / depth 32 specs, two rounds, this branch (new) and its base interleaved
# Everything lands in OUT; OUT/summary.txt is the summary (also printed).
set -u
out=${1:?usage: dev.sh OUT}
x=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$x/../.." && pwd)
specs=$root/bench/specs-gpu
mkdir -p "$out/hops" "$out/bench"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1 || true
run() { # run BUILD SPEC OUTFILE [env...]
  local b=$1 s=$2 f=$3; shift 3
  env "$@" timeout 60 "$x/$b/sluicectl" bench run "$specs/$s.yaml" --json > "$f.json" 2> "$f.err" ||
    echo "FAILED: $b $s ($f): $(tail -3 "$f.err")"
}
for s in alone-10us-depth1 alone-5us-depth1; do
  run new $s "$out/hops/$s" SLUICE_CUDA_HOPS="$out/hops/$s.hops.json"
  run new $s "$out/hops/$s-memops" SLUICE_CUDA_HOPS="$out/hops/$s-memops.hops.json" SLUICE_NATIVE_STREAM_MARKERS=1
done
for r in 1 2; do
  for s in alone-10us-depth1 alone-5us-depth1 alone-10us-depth32 alone-5us-depth32; do
    for b in new base; do run $b $s "$out/bench/$s-$b-r$r"; done
  done
done
python3 "$x/summarize.py" "$out" | tee "$out/summary.txt"
