#!/usr/bin/env bash
# bench/results/qemu-wake/run.sh: TCG guests' completion round trips, polling vs MSI-X interrupts, side by side.
#
#   make build guest-image && bench/results/qemu-wake/run.sh [ROUNDS] > bench/results/qemu-wake/build-machine.log
#
# Each round, in this order:
#   1. raw ivshmem ping-pong between a TCG guest and a host peer (pingpong/): in a pc guest (no IOMMU) and a q35 +
#      intel-iommu guest the guest spins on the answer (poll); in the q35 guest it also sleeps on vector 0's MSI-X
#      eventfd through vfio-pci (irq);
#   2. through sluiced (sim backend, wall clock, spinning for due completions): NOP round trips (run latency) in a pc guest (no IOMMU: polls), in a
#      --iommu guest with --no-wake (polls) and in the --iommu guest as it runs by default (spins 50 us, then sleeps
#      until the interrupt);
#   3. a depth-1 THROTTLE of 300 us kernels (turnaround: each wait is longer than the spin) in the pc guest and in
#      the --iommu guest.
# Every result is one JSON line, prefixed with its case name; the sluiced cases end with the CPU time the guest's QEMU
# process used meanwhile (a spinning guest keeps its vCPU busy, a sleeping one lets it halt). BIN (default bin) holds make build's binaries and
# GUEST_DIR (default build/guest) the guest image.
set -euo pipefail
rounds=${1:-3}
root=$(cd "$(dirname "$0")/../../.." && pwd)
bin=$(cd "${BIN:-$root/bin}" && pwd)
image=$(cd "${GUEST_DIR:-$root/build/guest}" && pwd)
work=$(mktemp -d /tmp/qemu-wake.XXXXXX)
pids=()
cleanup() {
  [ -S "$work/s.sock" ] && for g in poll irq; do "$bin/sluicectl" --socket "$work/s.sock" vm stop $g --run-dir "$work/guests" >/dev/null 2>&1 || true; done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The ping-pong guest: the guest image with pingpong as its /sbin/sluice-agent (a second cpio archive; the kernel
# unpacks both, the later entry wins).
CGO_ENABLED=0 go build -C "$root" -o "$work/pingpong" ./bench/results/qemu-wake/pingpong
mkdir -p "$work/overlay/sbin" && cp "$work/pingpong" "$work/overlay/sbin/sluice-agent"
(cd "$work/overlay" && find . | LC_ALL=C sort | cpio --quiet -o -H newc --owner=0:0 | gzip -9n) > "$work/overlay.gz"
cat "$image/initramfs.gz" "$work/overlay.gz" > "$work/pingpong-initramfs.gz"
"$work/pingpong" host --socket "$work/pp.sock" & pids+=($!)
for _ in $(seq 50); do [ -S "$work/pp.sock" ] && break; sleep 0.1; done

pingpong() { # MODE MACHINE: boot the guest on the ping-pong host, print its JSON line
  local machine=(-machine pc,accel=tcg) iommu=
  if [ "$2" = q35 ]; then machine=(-machine q35,accel=tcg -device intel-iommu,intremap=on) iommu=intel_iommu=on; fi
  timeout 300 qemu-system-x86_64 "${machine[@]}" -m 256 -smp 1 \
    -nodefaults -no-user-config -display none -no-reboot -bios /usr/share/qemu/qboot.rom \
    -kernel "$image/vmlinux" -initrd "$work/pingpong-initramfs.gz" \
    -append "console=ttyS0 quiet panic=-1 $iommu sluice.agent=guest,--mode,$1,--count,5000" \
    -serial stdio -chardev socket,id=pp,path="$work/pp.sock" -device ivshmem-doorbell,chardev=pp,vectors=6 |
    grep '^{' | tr -d '\r'
}

# spin_ns: the sim spins for completions due within 1.5 ms instead of sleeping on a timer that fires about 1 ms late
# here, so that the turnarounds show the guest's wait, not the sim's lateness.
"$bin/sluiced" --socket "$work/s.sock" --state-dir "$work/state" --backend sim --clock wall \
  --backend-params spin_ns=1500000 --log-level warn --proxy off & pids+=($!)
ctl() { "$bin/sluicectl" --socket "$work/s.sock" "$@"; }
for _ in $(seq 50); do ctl version >/dev/null 2>&1 && break; sleep 0.1; done
ctl vm start poll --image "$image" --run-dir "$work/guests" >/dev/null
ctl vm start irq --iommu --image "$image" --run-dir "$work/guests" >/dev/null
cpu() { # GUEST: its QEMU's user + system CPU time in clock ticks
  awk '{ print $14 + $15 }' "/proc/$(cat "$work/guests/$1/qemu.pid")/stat"
}
run() { # GUEST AGENT-ARGS...: one JSON line, then the guest's QEMU CPU seconds over it
  local g=$1 c0; shift
  c0=$(cpu "$g")
  ctl vm exec "$g" --run-dir "$work/guests" -- "$@" | tr -d '\n'
  echo " qemu_cpu_s $(awk -v a="$c0" -v b="$(cpu "$g")" -v t="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", (b - a) / t }')"
}

echo "# $(date -u +%FT%TZ) $(git -C "$root" rev-parse --short HEAD) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  echo "round $r pingpong-pc-poll $(pingpong poll pc)"
  echo "round $r pingpong-iommu-poll $(pingpong poll q35)"
  echo "round $r pingpong-iommu-irq $(pingpong irq q35)"
  echo "round $r nop-pc-poll $(run poll run latency --count 5000 --json)"
  echo "round $r nop-iommu-nowake $(run irq --no-wake run latency --count 5000 --json)"
  echo "round $r nop-iommu-irq $(run irq run latency --count 5000 --json)"
  echo "round $r throttle300-pc-poll $(run poll run throttle --kernel 300us --depth 1 --kernels 2000 --json)"
  echo "round $r throttle300-iommu-irq $(run irq run throttle --kernel 300us --depth 1 --kernels 2000 --json)"
done
echo "# wakes: $(curl -s --unix-socket "$work/s.sock" http://sluiced/metrics | grep '^sluice_vm_wakes_total' | tr '\n' ' ')"
