#!/usr/bin/env bash
# make guest-image: a kernel + initramfs for Sluice's QEMU guests, from Debian's packages only.
#
#   deploy/guest-image.sh OUT_DIR BIN_DIR
#
# OUT_DIR gets vmlinux (the kernel of linux-image-amd64, uncompressed for QEMU's fast PVH boot with qboot) and
# initramfs.gz (/init = sluice-init, /sbin/sluice-agent, /dev/console, and the kernel modules sluice-init loads: the ACPI
# power button and input events, so that a host's powerdown reaches it, and virtio-pci with 9p over virtio, so that it
# can mount the VM's volume, and VFIO (vfio-pci with the type1 IOMMU driver), so that the agent takes the ivshmem
# device's MSI-X vectors as eventfds; their dependencies come from the kernel's modules.dep, and the image numbers them
# in load order). BIN_DIR holds the static sluice-init and
# sluice-agent (make build). Nothing is downloaded here: the kernel comes from the installed linux-image-amd64
# package (apt-get install linux-image-amd64 cpio xz-utils). The image is rebuilt only when an input changes
# (OUT_DIR/inputs.sha256 records them).
set -euo pipefail

out=${1:?usage: guest-image.sh OUT_DIR BIN_DIR}
bin=${2:?usage: guest-image.sh OUT_DIR BIN_DIR}
die() { echo "guest-image: $*" >&2; exit 1; }

vmlinuz=$(ls -1 /boot/vmlinuz-*-amd64 2>/dev/null | sort -V | tail -1 || true)
[ -n "$vmlinuz" ] || die "no /boot/vmlinuz-*-amd64: apt-get install --no-install-recommends linux-image-amd64"
for tool in cpio xz gzip grep; do
  command -v "$tool" >/dev/null || die "$tool is missing: apt-get install --no-install-recommends cpio xz-utils"
done
for b in sluice-init sluice-agent; do
  [ -x "$bin/$b" ] || die "$bin/$b is missing: make build"
done

mkdir -p "$out"
kver=$(basename "$vmlinuz"); kver=${kver#vmlinuz-}
kdir=/lib/modules/$kver
[ -f "$kdir/modules.dep" ] || die "$kdir/modules.dep is missing (linux-image-amd64 $kver incomplete?)"
# The modules sluice-init needs, by name; a module built into this kernel (in modules.builtin) needs no file.
wanted=(button evdev virtio_pci 9pnet_virtio 9p vfio_iommu_type1 vfio_pci)
modules=() # module files, dependencies first
declare -A added=()
add_module() { # PATH (relative to $kdir, as modules.dep names it)
  local path=$1 line dep
  [ -z "${added[$path]:-}" ] || return 0
  added[$path]=1
  line=$(awk -F: -v p="$path" '$1 == p { print $2; exit }' "$kdir/modules.dep")
  for dep in $line; do add_module "$dep"; done
  [ -f "$kdir/$path" ] || die "$kdir/$path is missing (linux-image-amd64 $kver incomplete?)"
  modules+=("$kdir/$path")
}
for name in "${wanted[@]}"; do
  # modules.dep names files with dashes and underscores as they are; module names treat them alike.
  pat="/$(sed 's/[-_]/[-_]/g' <<<"$name")\.ko(\.xz|\.zst|\.gz)?:"
  path=$(grep -m1 -E "$pat" "$kdir/modules.dep" | cut -d: -f1) || true
  if [ -z "$path" ]; then
    grep -qE "/$(sed 's/[-_]/[-_]/g' <<<"$name")\.ko\$" "$kdir/modules.builtin" 2>/dev/null && continue
    die "kernel module $name is neither in $kdir/modules.dep nor built in"
  fi
  add_module "$path"
done
inputs=$(sha256sum "$vmlinuz" "${modules[@]}" "$bin/sluice-init" "$bin/sluice-agent" "$0" | awk '{print $1}' | sha256sum | awk '{print $1}')
if [ -f "$out/inputs.sha256" ] && [ "$(cat "$out/inputs.sha256")" = "$inputs" ] && [ -f "$out/vmlinux" ] &&
  [ -f "$out/initramfs.gz" ]; then
  echo "guest-image: $out is up to date ($(basename "$vmlinuz"))"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The bzImage carries the kernel as one XZ stream: find its magic and decompress from there.
off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | head -1 | cut -d: -f1)
[ -n "$off" ] || die "$vmlinuz: no XZ stream found (not a Debian amd64 kernel?)"
tail -c +"$((off + 1))" "$vmlinuz" | xz -dc --single-stream > "$tmp/vmlinux" 2>/dev/null || true
[ "$(head -c 4 "$tmp/vmlinux" | od -An -tx1 | tr -d ' ')" = "7f454c46" ] || die "$vmlinuz: decompressed kernel is not ELF"

root=$tmp/root
mkdir -p "$root"/{dev,proc,sys,sbin,lib/sluice-modules}
# NN-name.ko: sluice-init loads them in name order, which is this dependency order. Compressed modules are
# decompressed here: the kernel may not decompress in finit_module.
i=0
for m in "${modules[@]}"; do
  base=$(basename "$m"); dst=$root/lib/sluice-modules/$(printf %02d $i)-${base%%.ko*}.ko
  case $m in
  *.ko) cp "$m" "$dst" ;;
  *.ko.xz) xz -dc "$m" > "$dst" ;;
  *.ko.gz) gzip -dc "$m" > "$dst" ;;
  *.ko.zst) command -v zstd >/dev/null || die "$m is zstd-compressed: apt-get install zstd"; zstd -qdc "$m" > "$dst" ;;
  esac
  i=$((i + 1))
done
cp "$bin/sluice-init" "$root/init"
cp "$bin/sluice-agent" "$root/sbin/sluice-agent"
mknod -m 600 "$root/dev/console" c 5 1
(cd "$root" && find . | LC_ALL=C sort | cpio --quiet -o -H newc --owner=0:0 | gzip -9n) > "$tmp/initramfs.gz"

mv "$tmp/vmlinux" "$out/vmlinux"
mv "$tmp/initramfs.gz" "$out/initramfs.gz"
echo "$inputs" > "$out/inputs.sha256"
echo "guest-image: wrote $out/vmlinux ($(basename "$vmlinuz"), $(du -h "$out/vmlinux" | cut -f1)) and $out/initramfs.gz ($(du -h "$out/initramfs.gz" | cut -f1))"
