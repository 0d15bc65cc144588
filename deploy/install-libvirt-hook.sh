#!/usr/bin/env bash
# Installs (or removes) Sluice's libvirt qemu hook.
#
#   deploy/install-libvirt-hook.sh [--socket PATH] [--bin PATH] [--uninstall]
#
# Writes $HOOKS_DIR/qemu.d/sluice (HOOKS_DIR defaults to /etc/libvirt/hooks), a small sh wrapper that runs
# sluice-libvirt-hook with --socket. libvirt 6.5 or later runs every executable in qemu.d/ with the domain XML on
# stdin; it scrubs the hooks' environment, which is why the socket is on the wrapper's command line rather than in
# $SLUICE_SOCKET. libvirtd (or virtqemud) looks for hooks only when it starts: restart it after the first hook is
# installed.
#
#   --socket PATH  sluiced's host API socket (default /run/sluice/sluiced.sock)
#   --bin PATH     the sluice-libvirt-hook binary, absolute (default /usr/local/bin/sluice-libvirt-hook)
#   --uninstall    remove the wrapper instead
set -euo pipefail

socket=/run/sluice/sluiced.sock
bin=/usr/local/bin/sluice-libvirt-hook
uninstall=
hooks=${HOOKS_DIR:-/etc/libvirt/hooks}
die() { echo "install-libvirt-hook: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; }

while [ $# -gt 0 ]; do
  case $1 in
    --socket) [ $# -ge 2 ] || die "--socket needs a path"; socket=$2; shift 2 ;;
    --socket=*) socket=${1#--socket=}; shift ;;
    --bin) [ $# -ge 2 ] || die "--bin needs a path"; bin=$2; shift 2 ;;
    --bin=*) bin=${1#--bin=}; shift ;;
    --uninstall) uninstall=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

wrapper=$hooks/qemu.d/sluice
if [ -n "$uninstall" ]; then
  if [ -e "$wrapper" ]; then
    rm -f "$wrapper"
    echo "install-libvirt-hook: removed $wrapper"
  else
    echo "install-libvirt-hook: $wrapper is not installed"
  fi
  exit 0
fi

case $bin in /*) ;; *) die "--bin '$bin' must be an absolute path (libvirt runs hooks from /)" ;; esac
case $socket in /*) ;; *) die "--socket '$socket' must be an absolute path" ;; esac
[ -x "$bin" ] || die "$bin is not an executable (build it: go build -o $bin ./vmm-plugin/cmd/sluice-libvirt-hook)"

# quote makes a word safe inside single quotes for sh.
quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }

first=
[ -e "$wrapper" ] || first=1
mkdir -p "$hooks/qemu.d"
tmp=$(mktemp "$hooks/qemu.d/.sluice.XXXXXX")
trap 'rm -f "$tmp"' EXIT
cat >"$tmp" <<WRAPPER
#!/bin/sh
# Sluice's libvirt qemu hook, installed by deploy/install-libvirt-hook.sh; see sluice-libvirt-hook --help.
exec $(quote "$bin") --socket $(quote "$socket") "\$@"
WRAPPER
chmod 0755 "$tmp"
mv -f "$tmp" "$wrapper"
trap - EXIT
echo "install-libvirt-hook: installed $wrapper (runs $bin --socket $socket)"
if [ -n "$first" ]; then
  echo "install-libvirt-hook: restart libvirtd (or virtqemud) so that it picks the hook up"
fi
