#!/usr/bin/env bash
# build.sh: a static sluicectl of this branch's HEAD (arbitration auto), gzipped as .devbin/h15/sluicectl.gz.
# Run from the repository root.
set -eu
x=.devbin/h15
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o $x/sluicectl ./controller/cmd/sluicectl
gzip -9f $x/sluicectl
echo "auto $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+dirty')" | tee $x/builds.txt
du -h $x/sluicectl.gz
