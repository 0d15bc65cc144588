#!/usr/bin/env bash
# build.sh: the static sluicectl builds dev.sh runs, gzipped, into this folder (about 19 MiB):
#   base   0fc8305  main when the depth1d branch started
#   code   77f9467  + the worker stamps a THROTTLE's code after its launch call (completer waits for it)
#   yield  4441d91  + the completer and deliverer yield as internal/spin says (rarely on >= 4 CPUs)
#   new    depth1d HEAD: + decoder 8 bytes at a time, fewer clock reads (channel, bench guest, completer sweep),
#          ring entries of two aligned cache lines with a stamp the worker spins on (worker protocol 2)
# Each is `CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' ./controller/cmd/sluicectl` of that commit's tree.
set -euo pipefail
x=$(cd "$(dirname "$0")" && pwd)
root=$(git -C "$x" rev-parse --show-toplevel)
build() { # build NAME COMMIT
	local tmp
	tmp=$(mktemp -d)
	git -C "$root" archive "$2" | tar -x -C "$tmp"
	(cd "$tmp" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$x/$1.sluicectl" ./controller/cmd/sluicectl)
	rm -rf "$tmp"
	gzip -f -9 "$x/$1.sluicectl"
	echo "$1 $(git -C "$root" rev-parse "$2")" >> "$x/BUILDS.tmp"
}
: > "$x/BUILDS.tmp"
build base 0fc8305
build code 77f9467
build yield 4441d91
build new HEAD
mv "$x/BUILDS.tmp" "$x/BUILDS"
cat "$x/BUILDS"
du -ch "$x"/*.gz | tail -1
