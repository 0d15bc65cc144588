set -x
nvidia-smi --query-gpu=name,memory.used --format=csv
which nvcc; ls /usr/local/cuda*/bin 2>/dev/null | head
FB=""
if command -v nvcc >/dev/null; then
cat > /tmp/k.cu <<'CU'
__device__ char big[1<<28];
extern "C" __global__ void k(int *p) { *p = big[threadIdx.x]; }
CU
nvcc -fatbin -arch=sm_90 -o /tmp/k.fatbin /tmp/k.cu && FB=/tmp/k.fatbin
nvcc -cubin -arch=sm_90 -o /tmp/k.cubin /tmp/k.cu && cp /tmp/k.cubin $OUT/
fi
python3 - <<'PY'
try:
    import cupy, cupy.cuda.nvrtc as n
    print("cupy", cupy.__version__)
except Exception as e: print(e)
PY
./.devbin/exp/modmem.bin $FB
CUDA_MODULE_LOADING=EAGER ./.devbin/exp/modmem.bin $FB
