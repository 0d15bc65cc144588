#!/usr/bin/env bash
# Installs Sluice on a host: binaries, systemd units, settings, the libvirt hook.
#
#   deploy/install.sh [--bin DIR] [--only host|controller] [--destdir DIR] [--no-libvirt-hook]
#
# Run it as root after make build; running it again updates the binaries and units and keeps the settings.
#
#   host        sluiced, sluice-proxy, sluicectl, sluice-libvirt-hook into /usr/local/bin; sluiced.service;
#               /var/lib/sluice (the VM list, usage ledger, volumes); /etc/sluice/sluiced.env (SLUICED_OPTS,
#               SLUICE_CONTROLLER_TOKEN); the libvirt hook through deploy/install-libvirt-hook.sh
#   controller  sluice-controller and sluicectl; sluice-controller.service (a dynamic user, its database in
#               /var/lib/sluice-controller); /etc/sluice/sluice-controller.env (mode 0600) with a new random
#               bootstrap operator token (SLUICE_CONTROLLER_BOOTSTRAP_TOKEN), made once
#
# Both also get the Grafana dashboard (/usr/local/share/sluice/grafana/sluice.json) and the docs the units name.
# Units go to /etc/systemd/system; systemd is reloaded, nothing is enabled or started: see the last lines printed.
#
#   --bin DIR          where make build put the binaries (default: bin/ of this checkout)
#   --only WHAT        install only the host part or only the controller part (default both)
#   --destdir DIR      install below DIR instead of / (packaging, trying it out); systemd is left alone
#   --no-libvirt-hook  do not install the libvirt hook
#   -h, --help         this text
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
bin=$repo/bin
only=
destdir=
hook=1
die() { echo "install: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; }

while [ $# -gt 0 ]; do
  case $1 in
    --bin) [ $# -ge 2 ] || die "--bin needs a directory"; bin=$2; shift 2 ;;
    --bin=*) bin=${1#--bin=}; shift ;;
    --only) [ $# -ge 2 ] || die "--only needs host or controller"; only=$2; shift 2 ;;
    --only=*) only=${1#--only=}; shift ;;
    --destdir) [ $# -ge 2 ] || die "--destdir needs a directory"; destdir=$2; shift 2 ;;
    --destdir=*) destdir=${1#--destdir=}; shift ;;
    --no-libvirt-hook) hook=; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
case $only in ''|host|controller) ;; *) die "--only '$only': want host or controller" ;; esac
if [ -n "$destdir" ]; then
  destdir=$(mkdir -p "$destdir" && cd "$destdir" && pwd)
elif [ "$(id -u)" -ne 0 ]; then
  die "run as root (or with --destdir DIR)"
fi

prefix=/usr/local
etc=$destdir/etc/sluice
units=$destdir/etc/systemd/system
host=; controller=
[ "$only" = controller ] || host=1
[ "$only" = host ] || controller=1

binaries=(sluicectl)
[ -z "$host" ] || binaries+=(sluiced sluice-proxy sluice-libvirt-hook)
[ -z "$controller" ] || binaries+=(sluice-controller)
for b in "${binaries[@]}"; do
  [ -x "$bin/$b" ] || die "$bin/$b is missing: run make build first (or give --bin DIR)"
done

say() { echo "install: $*"; }
install -d -m 0755 "$destdir$prefix/bin" "$units" "$destdir$prefix/share/sluice/grafana" "$destdir$prefix/share/doc/sluice"
install -d -m 0755 "$etc"
for b in "${binaries[@]}"; do
  install -m 0755 "$bin/$b" "$destdir$prefix/bin/$b"
done
say "binaries: ${binaries[*]} in $destdir$prefix/bin"
install -m 0644 "$here/grafana/sluice.json" "$destdir$prefix/share/sluice/grafana/sluice.json"
install -m 0644 "$repo/docs/architecture.md" "$repo/docs/controller.md" "$destdir$prefix/share/doc/sluice/"

# write_once writes stdin to $1 with mode $2 unless $1 exists (settings are the operator's).
write_once() {
  if [ -e "$1" ]; then
    cat >/dev/null
    say "kept $1"
    return
  fi
  local tmp
  tmp=$(mktemp "$(dirname "$1")/.install.XXXXXX")
  chmod "$2" "$tmp"
  cat >"$tmp"
  mv "$tmp" "$1"
  say "wrote $1"
}

if [ -n "$host" ]; then
  install -m 0644 "$here/systemd/sluiced.service" "$units/sluiced.service"
  install -d -m 0751 "$destdir/var/lib/sluice"
  write_once "$etc/sluiced.env" 0600 <<'ENV'
# sluiced's settings (deploy/systemd/sluiced.service); see sluiced --help.
# Flags added to --socket /run/sluice/sluiced.sock --state-dir /var/lib/sluice:
SLUICED_OPTS="--backend sim --clock wall --metrics-listen 127.0.0.1:9471"
# On an NVIDIA GPU: --backend cuda. To join a fleet, add
#   --controller https://CONTROLLER:7070 --controller-host NAME --controller-gpus MODEL:SIZE
# and put the host's token (sluicectl token create NAME --role host --host NAME) here:
#SLUICE_CONTROLLER_TOKEN=
ENV
  if [ -n "$hook" ]; then
    HOOKS_DIR=$destdir/etc/libvirt/hooks "$here/install-libvirt-hook.sh" --socket /run/sluice/sluiced.sock \
      --bin "$destdir$prefix/bin/sluice-libvirt-hook"
  fi
fi

if [ -n "$controller" ]; then
  install -m 0644 "$here/systemd/sluice-controller.service" "$units/sluice-controller.service"
  token=slc_boot_$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
  write_once "$etc/sluice-controller.env" 0600 <<ENV
# sluice-controller's settings (deploy/systemd/sluice-controller.service); see sluice-controller --help.
SLUICE_CONTROLLER_LISTEN=127.0.0.1:7070
SLUICE_CONTROLLER_DB=sqlite:/var/lib/sluice-controller/controller.db
# The first operator token, used on an empty database only (sluicectl --token ...); made by install.sh.
SLUICE_CONTROLLER_BOOTSTRAP_TOKEN=$token
CONTROLLER_OPTS="--metrics-listen 127.0.0.1:9470"
ENV
fi

if [ -z "$destdir" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
  systemctl daemon-reload
  say "systemd reloaded"
fi
[ -z "$host" ] || say "host: edit $etc/sluiced.env, then systemctl enable --now sluiced (and restart libvirtd once for the hook)"
[ -z "$controller" ] || say "controller: systemctl enable --now sluice-controller; the operator token is SLUICE_CONTROLLER_BOOTSTRAP_TOKEN in $etc/sluice-controller.env"
