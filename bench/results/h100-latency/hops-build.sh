#!/usr/bin/env bash
# build.sh: builds what dev.sh runs into this folder (static, stripped; about 22 MiB):
#   new/sluicectl   this branch (depth1): the hop diagnostic, inline delivery, the worker's socket check off the
#                   launch path
#   base/sluicectl  the commit the branch started from (its merge base with main), for an A/B in the same run
set -euo pipefail
x=$(cd "$(dirname "$0")" && pwd)
root=$(git -C "$x" rev-parse --show-toplevel)
mkdir -p "$x/new" "$x/base"
(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$x/new/sluicectl" ./controller/cmd/sluicectl)
base=$(git -C "$root" merge-base HEAD main)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$root" archive "$base" | tar -x -C "$tmp"
(cd "$tmp" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$x/base/sluicectl" ./controller/cmd/sluicectl)
echo "$base" > "$x/base/COMMIT"
git -C "$root" rev-parse HEAD > "$x/new/COMMIT"
du -sh "$x"
