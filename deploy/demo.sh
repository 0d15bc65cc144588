#!/usr/bin/env bash
# make demo: start sluiced on the simulated GPU (wall clock), two process
# guests with a 10x kernel-length skew, watch them with `sluicectl top`, then
# stop everything and print a per-VM summary. Leaves nothing behind.
set -euo pipefail

BIN=${BIN:-bin}
DEMO_SECONDS=${DEMO_SECONDS:-20}
BIN=$(cd "$BIN" && pwd)
dir=$(mktemp -d /tmp/sluice-demo.XXXXXX)
# The VMs' system-call sandboxes (ids of their own) must reach their volumes
# under the state dir: others may search the demo's directory, not list it.
chmod 711 "$dir"
sock=$dir/sluiced.sock
ctl() { "$BIN/sluicectl" --socket "$sock" "$@"; }
pids=()

cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [[ -n "${daemon:-}" ]]; then
    kill -TERM "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
  fi
  rm -rf "$dir"
  exit "$rc"
}
trap cleanup EXIT INT TERM

echo "== starting sluiced (backend sim, wall clock) in $dir"
"$BIN/sluiced" --socket "$sock" --state-dir "$dir/state" --backend sim --clock wall ${SLUICED_ARGS:-} \
  --log-level warn 2>"$dir/sluiced.log" &
daemon=$!
for _ in $(seq 100); do
  ctl version >/dev/null 2>&1 && break
  kill -0 "$daemon" 2>/dev/null || { cat "$dir/sluiced.log"; exit 1; }
  sleep 0.1
done
ctl version

ep_short=$(ctl vm create short --weight 1 --channels 1)
ep_long=$(ctl vm create long --weight 1 --channels 1)
echo "== vm short: endpoint $ep_short (throttle: 100 us kernels, back to back)"
echo "== vm long:  endpoint $ep_long (throttle: 1000 us kernels, back to back)"

"$BIN/sluice-agent" --endpoint "$ep_short" run throttle --kernel-us 100 --sleep-us 0 \
  --depth "${DEMO_DEPTH:-16}" --duration "${DEMO_SECONDS}s" >"$dir/short.out" 2>&1 &
pids+=($!)
"$BIN/sluice-agent" --endpoint "$ep_long" run throttle --kernel-us 1000 --sleep-us 0 \
  --depth "${DEMO_DEPTH:-16}" --duration "${DEMO_SECONDS}s" >"$dir/long.out" 2>&1 &
pids+=($!)

ctl top --interval 1s --duration "${DEMO_SECONDS}s"

status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
pids=()

echo
echo "== summary"
for vm in short long; do
  echo "-- vm $vm: what the mediator accounted"
  ctl vm usage "$vm"
  echo "-- vm $vm: what the guest agent measured"
  cat "$dir/$vm.out"
done
echo
case " ${SLUICED_ARGS:-} " in
*" --backend cuda "* | *" --backend=cuda "*)
  echo "On a real GPU the driver time-slices between the VMs' contexts (each in a GPU worker process of its"
  echo "own), so the two guests get about half of the GPU each whatever their kernel length; dfq keeps it"
  echo "so and makes weights work. Each command is billed its share of the stretches where both VMs ran:"
  echo "the bills add up to the time the GPU was busy (bench/results/h100/README.md has the numbers)."
  ;;
*)
  echo "The GPU round-robins commands, so the VM with 10x longer kernels gets most of the GPU time."
  echo "Each guest keeps DEMO_DEPTH=${DEMO_DEPTH:-16} kernels in flight so the GPU stays busy despite this"
  echo "machine's ~1 ms timer slack. Accounted GPU time is exact. Policy dfq (the default) holds the"
  echo "long-kernel VM back (HELD column), yet here it still gets about 3/4 of the GPU: alone, the short"
  echo "guest cannot keep the GPU busy (each refill waits for a completion it sees through a sleeping poll,"
  echo "~1 ms late), so a period in which the long VM is held leaves the GPU partly idle, and dfq, being"
  echo "work-conserving, lets it run again. In-process guests (sluicectl bench run) refill at once and even"
  echo "out (Jain 0.999). Compare: SLUICED_ARGS='--policy none' make demo."
  ;;
esac
exit "$status"
