#!/usr/bin/env bash
# build.sh: static sluicectl of base (main's HEAD when the hand-off work started, 0fc8305) and new (this
# branch's HEAD), gzipped under .devbin/h13/{base,new}/sluicectl.gz. Run from the repository root.
set -eu
x=.devbin/h13; base=0fc8305
build() { # dir out
  (cd "$1" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$2" ./controller/cmd/sluicectl)
  gzip -9f "$2"
}
mkdir -p $x/base $x/new
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
git archive "$base" | tar -x -C "$tmp"
build "$tmp" "$PWD/$x/base/sluicectl"
build "$PWD" "$PWD/$x/new/sluicectl"
echo "base $(git rev-parse --short $base), new $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+dirty')" | tee $x/builds.txt
du -ch $x/base/sluicectl.gz $x/new/sluicectl.gz | tail -1
