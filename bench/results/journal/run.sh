#!/bin/sh
# The usage journal's cost: group commit latency (write, and write +
# fdatasync) on the disk holding TMPDIR, and the daemon's commit of 8 VMs
# paced at the default 5ms interval against the same daemon idle.
# Writes go-bench.json (go test -json) beside this script.
set -eu
cd "$(dirname "$0")/../../.."
out=bench/results/journal/go-bench.json
{
	go test -run '^$' -bench 'JournalCommit|EncodeDelta' -benchtime 2s -count 3 -json ./mediator/internal/usage/
	go test -run '^$' -bench 'JournalCommit' -benchtime 400x -count 3 -json ./mediator/internal/daemon/ 2>/dev/null
} >"$out"
# The benchmark lines (go test -json splits them over events).
jq -r 'select(.Action=="output") | .Output' "$out" | tr -d '\n' |
	sed 's/Benchmark/\nBenchmark/g' | sed 's/=== RUN.*//; s/PASS.*//' | grep 'ns/op' | tr -s ' \t' ' '
