#!/usr/bin/env bash
# Installs what make test's tests need on Debian 12, or says what to run.
#
#   deploy/test-deps.sh [--dry-run]
#
# Checks every tool and file the tests use (a second or less when all are
# there, and then it prints one line). What is missing:
#   as root: installs the missing Debian packages with apt-get (services the
#     packages bring, libvirtd and PostgreSQL's cluster, are kept from
#     starting: the tests start their own), and schemathesis, pinned, from
#     PyPI into a venv at /opt/sluice-ci/schemathesis;
#   not root, or --dry-run: prints the commands that would install it and
#     exits 1.
# Go (1.26 or newer) is not installed: without it this fails saying so.
#
# SLUICE_ALLOW_MISSING (package names, comma separated, or "all"): those are
# neither installed nor required; their tests skip instead of failing and
# make test's summary lists them (internal/testdeps).
#
# make test runs this first (make test DEPS=0 does not); so does .ci/run.
set -euo pipefail

SCHEMATHESIS=schemathesis==4.32.5
VENV=/opt/sluice-ci/schemathesis
GO=${GO:-go}

usage() { sed -n '2,/^set /p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
dry=
case "${1:-}" in
  "") ;;
  --dry-run) dry=1 ;;
  -h | --help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac

# allowed PKG: SLUICE_ALLOW_MISSING names PKG.
allowed() {
  local p IFS=,
  for p in ${SLUICE_ALLOW_MISSING:-}; do
    p=${p// /}
    [[ $p == all || $p == "$1" ]] && return 0
  done
  return 1
}

# The commands the tests run, each with the Debian package that has it.
# gcc, g++, libc6-dev: the race detector and the ABI's C header tests (clang
# too, with its NVPTX target: the PTX test; Debian 12's clang is the 14 the
# checked-in PTX was made with). qemu, cpio, xz and the kernel: QEMU guests
# and their image. libvirt: the libvirt e2e spec and the libvirt schema
# checks (virt-xml-validate runs xmllint). systemd-analyze: the unit files'
# test. ip: the proxy's network namespace test. postgresql: throwaway
# servers for the PostgreSQL store's tests and the e2e fleet spec.
tools=(gcc:gcc g++:g++ git:git make:make clang:clang
  qemu-system-x86_64:qemu-system-x86 cpio:cpio xz:xz-utils
  libvirtd:libvirt-daemon-system virtlogd:libvirt-daemon-system virsh:libvirt-clients
  virt-xml-validate:libvirt-clients xmllint:libxml2-utils
  systemd-analyze:systemd ip:iproute2)
# Files, as shell globs, each with its package.
files=("/usr/include/stdio.h:libc6-dev" "/boot/vmlinuz-*-amd64:linux-image-amd64"
  "/usr/lib/*/libvirt/connection-driver/libvirt_driver_qemu.so:libvirt-daemon-driver-qemu"
  "/usr/lib/postgresql/*/bin/initdb:postgresql")

# check fills need (missing packages), pip (1: schemathesis missing) and
# waived (missing but allowed).
check() {
  need=() waived=() pip=
  local t f p
  for t in "${tools[@]}"; do
    command -v "${t%%:*}" >/dev/null || missing "${t#*:}"
  done
  for f in "${files[@]}"; do
    p=${f#*:}
    compgen -G "${f%:*}" >/dev/null || missing "$p"
  done
  if ! schemathesis_present; then
    if allowed schemathesis; then
      waived+=(schemathesis)
    else
      pip=1
      python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing python3-venv
      [ -e /etc/ssl/certs/ca-certificates.crt ] || missing ca-certificates
    fi
  fi
}

# missing PKG records PKG as missing, once.
missing() {
  if allowed "$1"; then
    [[ " ${waived[*]} " == *" $1 "* ]] || waived+=("$1")
  elif [[ " ${need[*]} " != *" $1 "* ]]; then
    need+=("$1")
  fi
}

# schemathesis_present: where TestSchemathesis looks, at the pinned version
# in the venv.
schemathesis_present() {
  [ -n "${SLUICE_SCHEMATHESIS:-}" ] && [ -x "$SLUICE_SCHEMATHESIS" ] && return 0
  compgen -G "$VENV/lib/python3*/site-packages/${SCHEMATHESIS/==/-}.dist-info" >/dev/null
}

# warn_libvirtd: the libvirt spec starts its own libvirtd and fails beside
# another one.
warn_libvirtd() {
  local c name
  for c in /proc/[0-9]*/comm; do
    name=
    { read -r name <"$c"; } 2>/dev/null || true
    case "$name" in
      libvirtd | virtqemud)
        echo "test-deps: warning: a libvirtd runs (pid $(basename "${c%/comm}")); the libvirt e2e spec starts its own and fails beside it:" \
          "systemctl stop libvirtd.service libvirtd.socket libvirtd-ro.socket libvirtd-admin.socket" >&2
        return ;;
    esac
  done
}

if ! command -v "$GO" >/dev/null; then
  echo "test-deps: no $GO: install Go 1.26 or newer from https://go.dev/dl (Debian 12's golang is too old)" >&2
  exit 1
fi
check
warn_libvirtd
if [ ${#waived[@]} -gt 0 ]; then
  echo "test-deps: MISSING but allowed by SLUICE_ALLOW_MISSING: ${waived[*]} (their tests skip; make test's summary lists them)" >&2
fi
done="test-deps: everything${waived[*]:+ else} the tests need is installed"
if [ ${#need[@]} -eq 0 ] && [ -z "$pip" ]; then
  echo "$done"
  exit 0
fi

apt_cmd=(apt-get install -y -q --no-install-recommends "${need[@]}")
pip_cmd="python3 -m venv $VENV && $VENV/bin/pip install -q '$SCHEMATHESIS'"
if [ -n "$dry" ] || [ "$(id -u)" -ne 0 ]; then
  all=("${need[@]}")
  [ -z "$pip" ] || all+=(schemathesis)
  echo "test-deps: missing: ${all[*]}. As root, deploy/test-deps.sh installs them; or run:" >&2
  [ ${#need[@]} -eq 0 ] || echo "  apt-get update -q && DEBIAN_FRONTEND=noninteractive ${apt_cmd[*]}" >&2
  [ -z "$pip" ] || echo "  $pip_cmd" >&2
  echo "or let their tests skip (make test fails without): SLUICE_ALLOW_MISSING=$(IFS=,; echo "${all[*]}") make test" >&2
  exit 1
fi

if [ ${#need[@]} -gt 0 ]; then
  echo "test-deps: installing ${need[*]}"
  # Keep the packages' services from starting (a system libvirtd would
  # stand in the libvirt spec's way), unless a policy is already in place.
  policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  "${apt_cmd[@]}"
fi
if [ -n "$pip" ]; then
  echo "test-deps: installing $SCHEMATHESIS into $VENV"
  python3 -m venv "$VENV"
  for try in 1 2 3; do
    "$VENV/bin/pip" install -q "$SCHEMATHESIS" && break
    [ "$try" -eq 3 ] || sleep 10
  done
fi
check
if [ ${#need[@]} -gt 0 ] || [ -n "$pip" ]; then
  echo "test-deps: still missing after installing: ${need[*]}${pip:+ schemathesis (PyPI unreachable?)}" >&2
  exit 1
fi
echo "$done"
