#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME (default 3s) each.
#
# A finding makes the go tool write the failing input under the package's
# testdata/fuzz/ and fail; that fails this script, with the tool's output.
# The fuzzing engine itself sometimes fails on a small loaded machine without
# a finding ("fuzzing process hung or terminated unexpectedly", a worker's
# coordination timeout, or "context deadline exceeded" as -fuzztime ends: seen
# on a 2-core machine with targets as plain as FuzzHeapPath, about once per
# run of all ~50 targets). Such a failure leaves no input behind; it is printed
# and the target is run again, up to three times in all, and fails this script
# if every run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-3s}
log=$(mktemp)
# inputs lists a target's saved inputs (none yet is fine).
inputs() { find "$1/testdata/fuzz/$2" -type f 2>/dev/null | sort | md5sum || true; }
trap 'rm -f "$log"' EXIT

for pkg in $($GO list ./...); do
  dir=$($GO list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/func //'); do
    echo "fuzz $pkg $f"
    for try in 1 2 3; do
      before=$(inputs "$dir" "$f")
      if $GO test -run '^$' -fuzz "^$f\$" -fuzztime "$FUZZTIME" "$pkg" >"$log" 2>&1; then
        break
      fi
      cat "$log"
      after=$(inputs "$dir" "$f")
      if [ "$before" != "$after" ]; then
        echo "fuzz: $f found a failing input (saved under $dir/testdata/fuzz/$f)" >&2
        exit 1
      fi
      if [ "$try" = 3 ]; then
        echo "fuzz: $f failed three times" >&2
        exit 1
      fi
      echo "fuzz: $f failed without a finding (fuzzing engine); running it again" >&2
    done
  done
done
