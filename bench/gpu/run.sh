#!/usr/bin/env bash
# Runs the GPU benchmark specs (bench/specs-gpu/*.yaml, backend cuda) with a
# sluicectl binary and writes one JSON result per spec into OUTDIR, plus
# device.txt (GPU, driver, date, host) and commands.txt (every command run).
# The overhead pair runs REPEAT times interleaved (off, loga, off, loga, ...):
# the first pair is overhead-100us-{off,loga}.json, later ones -rN.json. Every
# spec's result has the native baseline beside Sluice's (sluicectl bench run
# prints it on a GPU) except the overhead repeats (--native=false).
#
#   bench/gpu/run.sh SLUICECTL OUTDIR [SPEC...]
#
# make bench-gpu calls it on a machine with Go and a GPU; without Go, build
# sluicectl elsewhere (CGO_ENABLED=0 go build ./controller/cmd/sluicectl) and
# carry it.
set -euo pipefail
ctl=${1:?usage: run.sh SLUICECTL OUTDIR [SPEC...]}
out=${2:?usage: run.sh SLUICECTL OUTDIR [SPEC...]}
shift 2
repeat=${REPEAT:-15}
here=$(cd "$(dirname "$0")/../.." && pwd)
specs=("$@")
if [ ${#specs[@]} -eq 0 ]; then
	specs=("$here"/bench/specs-gpu/*.yaml)
fi
mkdir -p "$out"
{
	date -u +"date: %Y-%m-%dT%H:%M:%SZ"
	echo "host: $(hostname) ($(nproc) CPUs, $(uname -r))"
	nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /' || echo "gpu: (nvidia-smi not found)"
	nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -1 || true
} > "$out/device.txt"
: > "$out/commands.txt"
run() { # name spec [flags]
	echo "$ctl bench run --json ${*:3} $2 > $1.json" >> "$out/commands.txt"
	echo "bench spec $1" >&2
	"$ctl" bench run --json "${@:3}" "$2" > "$out/$1.json"
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for spec in "${specs[@]}"; do
	name=$(basename "$spec" .yaml)
	case $name in
	overhead-*-loga) continue ;; # run with its off twin below
	overhead-*-off)
		base=${name%-off}
		for i in $(seq 1 "$repeat"); do
			suffix=; flags=()
			[ "$i" -gt 1 ] && suffix=-r$i && flags=(--native=false)
			for acc in off loga; do
				s="$(dirname "$spec")/$base-$acc.yaml"
				cp "$s" "$tmp/$base-$acc$suffix.yaml"
				run "$base-$acc$suffix" "$tmp/$base-$acc$suffix.yaml" "${flags[@]}"
			done
		done
		;;
	*) run "$name" "$spec" ;;
	esac
done
