#!/bin/bash
# usage: run.sh SLUICECTL OUTDIR: runs the sim specs this change touches
# (bench/specs/{depths,skew,mixed,nooveruse,equal8,weights13,longkernel,hog,deepqueue}*.yaml)
# through SLUICECTL bench run --json, one JSON per spec into OUTDIR.
set -euo pipefail
bin=$(realpath "$1"); out=$(realpath -m "$2"); mkdir -p "$out"
cd "$(git rev-parse --show-toplevel)"
for spec in bench/specs/{depths,skew,mixed,nooveruse,equal8,weights13,longkernel,hog,deepqueue}*.yaml; do
  "$bin" bench run --json "$spec" > "$out/$(basename "$spec" .yaml).json"
done
