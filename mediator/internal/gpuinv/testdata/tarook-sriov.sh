#!/bin/sh
# tarook-sriov.sh OUT.tar: writes tarook-sriov.tar, the sysfs layout of an NVIDIA
# SR-IOV physical function with its 16 virtual functions enabled, from a listing
# recorded on a real machine and published in alasca-association/tarook,
# docs/user/explanation/gpu-and-vgpu.rst (commit 113e74a1d31ebaefd04af401d3e0aa2b174fb8a7):
#   $ ls -l /sys/bus/pci/devices/0000:82:00.0/ | grep virtfn
#   lrwxrwxrwx 1 root root 0 Jul 25 07:57 virtfn0 -> ../0000:82:00.4
#   ... virtfn15 -> ../0000:82:02.3
# The recorded part is the PF's address and its virtfn0..virtfn15 links (names
# and targets verbatim; ls sorts them virtfn0, virtfn1, virtfn10, ..., virtfn9).
# What the listing does not show is filled in and marked so in testdata/README.md.
set -eu
case $1 in /*) tarfile=$1 ;; *) tarfile=$PWD/$1 ;; esac
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT; out=$tmp/tree
pf=0000:82:00.0
dir=devices/pci0000:80/0000:80:03.0 # not recorded: the root port above the GPU
mkdir -p "$out/bus/pci/devices" "$out/$dir/$pf"
attrs() { # DIR: the ids (not recorded: the GPU's device id is unknown, 0x0000 stands in)
	printf '0x10de\n' >"$1/vendor"; printf '0x0000\n' >"$1/device"; printf '0x030200\n' >"$1/class"
	ln -s ../../../../bus/pci/drivers/nvidia "$1/driver" # the VFs' too: the doc opens mdev_supported_types on 0000:82:00.4
}
attrs "$out/$dir/$pf"
printf '16\n' >"$out/$dir/$pf/sriov_totalvfs" # not recorded: sriov-manage -e enables them all
printf '16\n' >"$out/$dir/$pf/sriov_numvfs"   # the 16 links listed
ln -s ../../../$dir/$pf "$out/bus/pci/devices/$pf"
n=0
for vf in 82:00.4 82:00.5 82:00.6 82:00.7 82:01.0 82:01.1 82:01.2 82:01.3 \
	82:01.4 82:01.5 82:01.6 82:01.7 82:02.0 82:02.1 82:02.2 82:02.3; do
	vf=0000:$vf
	ln -s ../$vf "$out/$dir/$pf/virtfn$n" # recorded verbatim
	mkdir -p "$out/$dir/$vf"
	attrs "$out/$dir/$vf"
	ln -s ../$pf "$out/$dir/$vf/physfn"
	ln -s ../../../$dir/$vf "$out/bus/pci/devices/$vf"
	n=$((n + 1))
done
tar -C "$out" --owner=0 --group=0 --numeric-owner --sort=name --mtime=@0 -cf "$tarfile" .
echo "wrote $tarfile"
