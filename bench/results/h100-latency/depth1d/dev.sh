#!/usr/bin/env bash
# dev.sh OUT: issue 14's depth-1 latency and depth-32 throughput on the GPU, four builds interleaved (build.sh:
# base, code, yield, new; see BUILDS). Run from the repository root (or anywhere: it finds the specs two folders up),
# with this folder carried. About 6 minutes; it starts no run that could end past about 8.5.
#   1. the hop diagnostic (SLUICE_CUDA_HOPS) on alone-10us-depth1 and alone-5us-depth1, new and base
#   2. a Go CPU profile (SLUICE_CPU_PROFILE) of new on alone-10us-depth1
#   3. 3 rounds of alone-10us-depth1, alone-5us-depth1, alone-5us-depth32, alone-10us-depth32, each round every
#      build once per spec, the builds' order rotating from round to round (one Sluice run and one native run each)
#   4. new's own interleaved comparison (sluicectl bench run --rounds 3) of the four specs
# Everything goes into ONE tar, OUT/h14.tgz (summary.txt in it); the summary is printed.
set -u
out=${1:?usage: dev.sh OUT}
x=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$x/../.." && pwd)
specs=$root/bench/specs-gpu
w=$(mktemp -d)
mkdir -p "$out" "$w/bin" "$w/bench" "$w/hops" "$w/interleaved"
builds="base code yield new"
for b in $builds; do
	gunzip -c "$x/$b.sluicectl.gz" > "$w/bin/$b" && chmod +x "$w/bin/$b"
done
cp "$x/BUILDS" "$x/dev.sh" "$x/summarize.py" "$w/"
{
	nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
	echo "cpus: $(nproc); $(grep -m1 'model name' /proc/cpuinfo)"
	echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
	uname -r
} > "$w/host.txt"
SECONDS=0
run() { # run BUILD SPEC FILE ROUNDS [env...]
	local b=$1 s=$2 f=$3 n=$4
	shift 4
	if [ $((SECONDS + 20 * n)) -gt 500 ]; then # a run takes about 5 s a round: stay within 9 minutes
		echo "SKIPPED (time): $b $s $f" | tee -a "$w/skipped.txt"
		return
	fi
	local extra=()
	[ "$b" != base ] && extra=(--rounds "$n") # base predates --rounds (it runs each once)
	env "$@" timeout $((60 * n)) "$w/bin/$b" bench run "$specs/$s.yaml" --json "${extra[@]}" > "$f.json" 2> "$f.err" ||
		echo "FAILED: $b $s ($f): $(tail -3 "$f.err")"
}
for s in alone-10us-depth1 alone-5us-depth1; do
	for b in new base; do
		run $b $s "$w/hops/$s-$b" 1 SLUICE_CUDA_HOPS="$w/hops/$s-$b.hops.json"
	done
done
run new alone-10us-depth1 "$w/hops/profile-new" 1 SLUICE_CPU_PROFILE="$w/hops/alone-10us-depth1-new.cpu.pprof"
order=($builds)
for r in 1 2 3; do
	for s in alone-10us-depth1 alone-5us-depth1 alone-5us-depth32 alone-10us-depth32; do
		for i in 0 1 2 3; do
			b=${order[$(((i + r - 1) % 4))]}
			run $b $s "$w/bench/$s-$b-r$r" 1
		done
	done
done
for s in alone-10us-depth1 alone-5us-depth1 alone-5us-depth32 alone-10us-depth32; do
	run new $s "$w/interleaved/$s" 3
done
echo "wall: ${SECONDS}s" >> "$w/host.txt"
python3 "$x/summarize.py" "$w" > "$w/summary.txt" 2>&1
tar czf "$out/h14.tgz" -C "$w" --exclude=./bin .
cat "$w/summary.txt"
rm -rf "$w"
