#!/usr/bin/env bash
# .devbin/h27/build.sh: run from the repository root of the switchcost branch (no GPU needed). Builds static
# sluicectl and cuda.test binaries of the base (BASE, default: main where the branch began) and of this branch's
# HEAD, gzipped as {sluicectl,cuda.test}-{base,branch}.gz, and writes the specs dev.sh runs into .devbin/h27/specs:
# bench/specs-gpu/longkernel-dfq.yaml as written (auto keeps the driver there: 200 ms kernels beside 1 ms ones) and
# skew3-driver.yaml, skew3-dfq.yaml under {arbitration: driver}.
set -eu
x=.devbin/h27
base=${BASE:-$(git merge-base HEAD main)}
mkdir -p $x/specs
tmp=$(mktemp -d)
trap 'rm -rf $tmp' EXIT
build() { # dir suffix
  (cd "$1" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/sluicectl-$2" ./controller/cmd/sluicectl &&
    CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o "$tmp/cuda.test-$2" ./mediator/backend/cuda)
  gzip -9c "$tmp/sluicectl-$2" > $x/sluicectl-$2.gz
  gzip -9c "$tmp/cuda.test-$2" > $x/cuda.test-$2.gz
}
mkdir "$tmp/base"
git archive "$base" | tar -x -C "$tmp/base"
build "$tmp/base" base
build . branch
cp bench/specs-gpu/longkernel-dfq.yaml $x/specs/
src=bench/specs-gpu/skew3-dfq.yaml
grep -q '^tuning:' $src && { echo "$src has a tuning line already: write its twin by hand" >&2; exit 1; }
{ echo "# skew3-dfq.yaml under arbitration driver (h27 dev twin)"; sed "/^policy:/a tuning: {arbitration: driver}" $src; } > $x/specs/skew3-driver.yaml
{ echo "base $(git rev-parse --short "$base")"
  echo "branch $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+dirty')"; } | tee $x/builds.txt
du -h $x/*.gz
