#!/usr/bin/env bash
# bench/results/doorbell/qemu.sh BEFORE_ROOT AFTER_ROOT [ROUNDS]: TCG pc guests (they poll), each
# round: the raw ivshmem ping-pong (bench/results/qemu-wake/pingpong) and
# NOP round trips through sluiced's null backend for BEFORE's and AFTER's
# binaries and guest image (bin/, build/guest/ of each tree), alternating.
# One JSON line per case; the ratio is NOP p50 / ping-pong p50 of the round.
# BACKEND=sim runs the sim on the wall clock (spinning for due completions,
# as bench/results/qemu-wake/run.sh) instead of the null backend.
set -euo pipefail
before=$(cd "$1" && pwd) after=$(cd "$2" && pwd) rounds=${3:-3}
root=$(cd "$(dirname "$0")/../../.." && pwd)
work=$(mktemp -d /tmp/h3qemu.XXXXXX)
pids=()
cleanup() {
  for v in before after; do
    [ -S "$work/$v/s.sock" ] && "$after/bin/sluicectl" --socket "$work/$v/s.sock" vm stop g --run-dir "$work/guests-$v" >/dev/null 2>&1 || true
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
image=$after/build/guest
backend=(--backend null)
[ "${BACKEND:-null}" = sim ] && backend=(--backend sim --clock wall --backend-params spin_ns=1500000)
CGO_ENABLED=0 go build -C "$root" -o "$work/pingpong" ./bench/results/qemu-wake/pingpong
mkdir -p "$work/overlay/sbin" && cp "$work/pingpong" "$work/overlay/sbin/sluice-agent"
(cd "$work/overlay" && find . | LC_ALL=C sort | cpio --quiet -o -H newc --owner=0:0 | gzip -9n) > "$work/overlay.gz"
cat "$image/initramfs.gz" "$work/overlay.gz" > "$work/pingpong-initramfs.gz"
"$work/pingpong" host --socket "$work/pp.sock" & pids+=($!)
for _ in $(seq 50); do [ -S "$work/pp.sock" ] && break; sleep 0.1; done
pingpong() {
  timeout 300 qemu-system-x86_64 -machine pc,accel=tcg -m 256 -smp 1 \
    -nodefaults -no-user-config -display none -no-reboot -bios /usr/share/qemu/qboot.rom \
    -kernel "$image/vmlinux" -initrd "$work/pingpong-initramfs.gz" \
    -append "console=ttyS0 quiet panic=-1 sluice.agent=guest,--mode,poll,--count,5000" \
    -serial stdio -chardev socket,id=pp,path="$work/pp.sock" -device ivshmem-doorbell,chardev=pp,vectors=6 |
    grep '^{' | tr -d '\r'
}
for v in before after; do
  eval "b=\$$v"
  mkdir -p "$work/$v"
  "$b/bin/sluiced" --socket "$work/$v/s.sock" --state-dir "$work/$v/state" ${backend[@]} --log-level warn --proxy off & pids+=($!)
  for _ in $(seq 50); do "$b/bin/sluicectl" --socket "$work/$v/s.sock" version >/dev/null 2>&1 && break; sleep 0.1; done
  "$b/bin/sluicectl" --socket "$work/$v/s.sock" vm start g --image "$b/build/guest" --run-dir "$work/guests-$v" >/dev/null
done
nop() { # V
  eval "b=\$$1"
  "$b/bin/sluicectl" --socket "$work/$1/s.sock" vm exec g --run-dir "$work/guests-$1" -- run latency --count 5000 --json | tr -d ' \n'
}
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  echo "round $r pingpong $(pingpong)"
  if [ $((r % 2)) = 1 ]; then echo "round $r nop-before $(nop before)"; echo "round $r nop-after $(nop after)"
  else echo "round $r nop-after $(nop after)"; echo "round $r nop-before $(nop before)"; fi
done
