#!/usr/bin/env bash
# .devbin/h21/build.sh: run from the repository root of the anticip branch (no GPU needed). Builds static sluicectl
# binaries of the base (BASE, default e73060b: main where the branch began, arbitration driver by default) and of
# this branch's HEAD (think-time anticipation, arbitration auto by default), gzipped as sluicectl-base.gz and
# sluicectl-branch.gz, and writes the specs dev.sh runs into .devbin/h21/specs: bench/specs-gpu's
# {depths,mixed,skew3,equal8,nooveruse,longkernel}-dfq.yaml as written (the branch runs them under its default) and
# their twins -driver and -auto (tuning: {arbitration: driver|auto}, for the base), and alone-10us-depth1.yaml.
set -eu
x=.devbin/h21
base=${BASE:-e73060b}
mkdir -p $x/specs
tmp=$(mktemp -d)
trap 'rm -rf $tmp' EXIT
git archive "$base" | tar -x -C "$tmp"
(cd "$tmp" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o sluicectl ./controller/cmd/sluicectl)
gzip -9c "$tmp/sluicectl" > $x/sluicectl-base.gz
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/sluicectl-branch" ./controller/cmd/sluicectl
gzip -9c "$tmp/sluicectl-branch" > $x/sluicectl-branch.gz
for s in depths mixed skew3 equal8 nooveruse longkernel; do
  src=bench/specs-gpu/$s-dfq.yaml
  grep -q '^tuning:' $src && { echo "$src has a tuning line already: write its twins by hand" >&2; exit 1; }
  cp $src $x/specs/$s-dfq.yaml
  for a in driver auto; do
    { echo "# $s-dfq.yaml under arbitration $a (h21 dev twin)"; sed "/^policy:/a tuning: {arbitration: $a}" $src; } > $x/specs/$s-$a.yaml
  done
done
cp bench/specs-gpu/alone-10us-depth1.yaml $x/specs/
cp bench/results/h100-turns/summarize.py $x/summarize.py
{ echo "base $(git rev-parse --short "$base")"
  echo "branch $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+dirty')"; } | tee $x/builds.txt
du -h $x/sluicectl-*.gz
