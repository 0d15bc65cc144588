#!/bin/sh
# Regenerates sluice_kernels.ptx from sluice_kernels.cu with clang alone (no
# CUDA toolkit): `make ptx`, or guest-agent/kernels/gen.sh [OUT]. The PTX
# checked in is clang 14's (Debian 12's clang); another clang writes other
# (equivalent) PTX, and kernels_test.go compares only with clang 14.
#
# sm_80, PTX ISA 7.0: clang 14 knows no sm_90. The driver JIT-compiles PTX
# for the GPU it runs on (an H100 is sm_90) from any older target.
set -eu
dir=$(cd "$(dirname "$0")" && pwd)
out=${1:-$dir/sluice_kernels.ptx}
exec "${CLANG:-clang}" -x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib \
	-O2 -Wall -Wextra -Werror -I "$dir/../../api/abi/include" \
	-S -o "$out" "$dir/sluice_kernels.cu"
