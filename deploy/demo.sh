#!/usr/bin/env bash
# make demo: start sluiced on the simulated GPU (wall clock) and run two
# process guests with a 10x kernel-length skew, each with sluice-agent's
# defaults (kernels back to back), twice: first under policy none (accounting
# only), then under dfq (the default). `sluicectl top` shows each phase live;
# the summary prints both side by side: each VM's share of the GPU time,
# Jain's index, and each VM's bill against what its guest counted (its
# completed kernels times their length). DEMO_SECONDS is both phases
# together. Leaves nothing behind.
set -euo pipefail

BIN=${BIN:-bin}
DEMO_SECONDS=${DEMO_SECONDS:-20}
BIN=$(cd "$BIN" && pwd)
phase_s=$(awk -v s="$DEMO_SECONDS" 'BEGIN { print s / 2 }')
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

# num FIELD: the first integer FIELD of the JSON object on stdin.
num() { grep -o "\"$1\": *[0-9]*" | head -n 1 | grep -o '[0-9]*$'; }

echo "== starting sluiced --backend sim --clock wall${SLUICED_ARGS:+ $SLUICED_ARGS} in $dir (later flags win)"
"$BIN/sluiced" --socket "$sock" --state-dir "$dir/state" --backend sim --clock wall ${SLUICED_ARGS:-} \
  --log-level warn 2>"$dir/sluiced.log" &
daemon=$!
for _ in $(seq 100); do
  ctl version >/dev/null 2>&1 && break
  kill -0 "$daemon" 2>/dev/null || { cat "$dir/sluiced.log"; exit 1; }
  sleep 0.1
done
ctl version

vms=(short long)
declare -A kernel_us=([short]=100 [long]=1000)
for vm in "${vms[@]}"; do
  ep=$(ctl vm create "$vm" --weight 1 --channels 1)
  declare "ep_$vm=$ep"
  echo "== vm $vm: endpoint $ep (sluice-agent run throttle --kernel ${kernel_us[$vm]}us: kernels back to back)"
done

# phase POLICY: switch to POLICY, run both guests for phase_s seconds and
# watch them; record each VM's bill (usage before and after) and the phase's
# wall time.
phase() {
  local policy=$1 vm ep
  ctl policy set "$policy" >/dev/null
  # The switch takes effect at the next period's end.
  for _ in $(seq 100); do
    ctl policy get | grep -qw "$policy" && break
    sleep 0.05
  done
  echo
  echo "== phase: policy $policy, ${phase_s} s"
  for vm in "${vms[@]}"; do ctl vm usage "$vm" --json >"$dir/$vm.$policy.before"; done
  local t0 t1
  t0=$(date +%s%N)
  for vm in "${vms[@]}"; do
    ep=ep_$vm
    "$BIN/sluice-agent" --endpoint "${!ep}" run throttle --kernel "${kernel_us[$vm]}us" \
      --duration "${phase_s}s" --json >"$dir/$vm.$policy.json" 2>"$dir/$vm.$policy.err" &
    pids+=($!)
  done
  ctl top --interval 2s --duration "${phase_s}s"
  local status=0
  for p in "${pids[@]}"; do wait "$p" || status=$?; done
  pids=()
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000)) >"$dir/$policy.wall_us"
  for vm in "${vms[@]}"; do
    ctl vm usage "$vm" --json >"$dir/$vm.$policy.after"
    if [[ $status -ne 0 || ! -s "$dir/$vm.$policy.json" ]]; then
      echo "sluice-agent on vm $vm failed:"
      cat "$dir/$vm.$policy.err"
      return 1
    fi
  done
}

phase none
phase dfq

# row VM POLICY: share, bill and the guest's own count in one phase.
declare -A billed counted share
for policy in none dfq; do
  total=0
  for vm in "${vms[@]}"; do
    b0=$(num gpu_ns <"$dir/$vm.$policy.before")
    b1=$(num gpu_ns <"$dir/$vm.$policy.after")
    billed[$vm.$policy]=$((b1 - b0))
    counted[$vm.$policy]=$(num submitted_gpu_ns <"$dir/$vm.$policy.json")
    total=$((total + b1 - b0))
  done
  for vm in "${vms[@]}"; do
    share[$vm.$policy]=$(awk -v b="${billed[$vm.$policy]}" -v t="$total" 'BEGIN { printf "%.1f%%", t ? 100 * b / t : 0 }')
  done
  declare "busy_$policy=$(awk -v t="$total" -v w="$(cat "$dir/$policy.wall_us")" 'BEGIN { printf "%.1f%%", 100 * t / (w * 1000) }')"
  declare "jain_$policy=$(awk -v a="${billed[short.$policy]}" -v b="${billed[long.$policy]}" \
    'BEGIN { printf "%.3f", (a + b) * (a + b) / (2 * (a * a + b * b)) }')"
done

# cols SHARE BILLED_NS COUNTED_NS: one phase's columns for a VM: its share,
# its bill and its guest's count in seconds, and how the two compare.
cols() {
  awk -v s="$1" -v b="$2" -v c="$3" 'BEGIN {
    if (b == c) cmp = "exact"; else cmp = sprintf("%+.2f%%", c ? 100 * (b - c) / c : 0)
    printf "%6s  %8.3f s  %8.3f s  %-7s", s, b / 1e9, c / 1e9, cmp }'
}

echo
{
  echo "== summary: each phase ${phase_s} s; BILLED: the GPU time sluiced billed the VM; GUEST: what its guest"
  echo "   counted (its completed kernels x their length)"
  printf '%-15s   %-38s   %-38s\n' "" "policy none (accounting only)" "policy dfq (the default)"
  printf '%-15s   %6s  %10s  %10s  %-7s   %6s  %10s  %10s  %-7s\n' "VM     KERNEL" SHARE BILLED GUEST "" SHARE BILLED GUEST ""
  for vm in "${vms[@]}"; do
    printf '%-6s %-8s   %s   %s\n' "$vm" "${kernel_us[$vm]} us" \
      "$(cols "${share[$vm.none]}" "${billed[$vm.none]}" "${counted[$vm.none]}")" \
      "$(cols "${share[$vm.dfq]}" "${billed[$vm.dfq]}" "${counted[$vm.dfq]}")"
  done
  printf '%-15s   %6s  %-30s   %6s\n' "Jain's index" "$jain_none" "" "$jain_dfq"
  printf '%-15s   %6s  %-30s   %6s\n' "GPU busy" "$busy_none" "" "$busy_dfq"
} | sed 's/ *$//'
