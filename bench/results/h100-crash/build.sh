#!/usr/bin/env bash
# build.sh: the cuda backend's test binary of this branch (workercrash), static, gzipped as
# .devbin/h12/cuda.test.gz, for dev.sh on the GPU host. Run from the repository root.
set -eu
x=.devbin/h12
mkdir -p $x
CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o $x/cuda.test ./mediator/backend/cuda
gzip -9f $x/cuda.test
echo "built $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+dirty')" | tee $x/builds.txt
du -h $x/cuda.test.gz
