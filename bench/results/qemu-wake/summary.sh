#!/usr/bin/env bash
# bench/results/qemu-wake/summary.sh LOG: one row per case of a run.sh log: its p50 and p99 (µs) in each round, and
# the guest's QEMU CPU seconds where run.sh measured them.
set -euo pipefail
grep '^round ' "${1:?usage: summary.sh LOG}" | while read -r _ round name rest; do
  json=${rest% qemu_cpu_s *}
  cpu=-; [ "$json" != "$rest" ] && cpu=${rest##* qemu_cpu_s }
  jq -r --arg n "$name" --arg r "$round" --arg c "$cpu" \
    '(.round_trip_ns // .turnaround_ns) as $s | [$n, $r, ($s.p50 / 1000 | floor), ($s.p99 / 1000 | floor), $c] | @tsv' <<<"$json"
done | sort -s -k1,1 | awk -F'\t' '
  $1 != last { if (last != "") print row; row = sprintf("| %s |", $1); last = $1 }
  { row = row sprintf(" %s / %s / %s |", $3, $4, $5) }
  END { print row }'
