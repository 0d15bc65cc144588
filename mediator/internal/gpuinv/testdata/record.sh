#!/bin/sh
# record.sh [SYSFS] OUT.tar: copies what gpuinv reads of every PCI function under
# SYSFS (default /sys) into the tar file OUT.tar (a tar, since PCI addresses have
# colons, which module zips refuse, and git checkouts on some systems cannot
# hold), a tree laid out as sysfs is: bus/pci/devices/ADDR
# links to devices/.../ADDR as on the machine, with the small attribute
# files (copied) and the links driver, iommu_group, physfn and virtfn* (recorded
# verbatim, left dangling: gpuinv reads their targets' names only). Nothing else
# (no config space, no BARs). Run it on a GPU host to add that host's tree:
#   sh mediator/internal/gpuinv/testdata/record.sh /sys mediator/internal/gpuinv/testdata/NAME.tar
# and add its expected GPUs to gpuinv_test.go.
set -eu
if [ $# -eq 1 ]; then sys=/sys; tarfile=$1; else sys=$1; tarfile=$2; fi
case $tarfile in /*) ;; *) tarfile=$PWD/$tarfile ;; esac
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT; out=$tmp/tree
[ -d "$sys/bus/pci/devices" ] || { echo "record.sh: no $sys/bus/pci/devices" >&2; exit 1; }
mkdir -p "$out/bus/pci/devices"
for link in "$sys"/bus/pci/devices/*; do
	addr=$(basename "$link")
	target=$(readlink "$link") # ../../../devices/pci0000:00/0000:00:06.0
	ln -s "$target" "$out/bus/pci/devices/$addr"
	real=$(cd "$link" && pwd -P) # /sys/devices/pci0000:00/0000:00:06.0
	rel=${real#"$(cd "$sys" && pwd -P)"/}
	mkdir -p "$out/$rel"
	for f in vendor device subsystem_vendor subsystem_device class revision numa_node \
		sriov_totalvfs sriov_numvfs sriov_offset sriov_stride; do
		[ -f "$real/$f" ] && cat "$real/$f" >"$out/$rel/$f"
	done
	for l in driver iommu_group physfn "$real"/virtfn*; do
		l=$(basename "$l")
		[ -L "$real/$l" ] || continue
		t=$(readlink "$real/$l")
		ln -s "$t" "$out/$rel/$l"
	done
done
tar -C "$out" --owner=0 --group=0 --numeric-owner --sort=name --mtime=@0 -cf "$tarfile" .
echo "recorded $(ls "$out/bus/pci/devices" | wc -l) functions from $sys into $tarfile"
