#!/usr/bin/env bash
# A CUDA 13.0 build environment from PyPI, for `--features candle` on a machine without the CUDA
# toolkit. candle's kernels are compiled by nvcc at build time and it links the CUDA libraries
# (libcuda, cuBLAS, cuRAND, NVRTC) directly, unlike zarrpipe's own `cuda` feature, which needs
# nothing at build time. Nothing here is needed at run time: the GPU host's driver and toolkit
# provide the real libraries.
#
#   scripts/cuda-build-env.sh [DIR]      # default DIR: .cuda-build (git-ignored)
#   source DIR/env.sh
#   cargo build --release --features candle --example 05_gpu_pipeline
#
# The versions stay at 13.0: PTX from a newer nvcc (NVVM) may not load under the GPU hosts'
# driver, and ptxas 13.0 refuses it. The libcuda here is a link-time stub, as in the
# toolkit's lib64/stubs: every driver entry point cudarc declares, each an empty function.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(realpath -m "${1:-.cuda-build}")
mkdir -p "$dir/wheels" "$dir/lib64"

wheels=(
  "nvidia-cuda-nvcc==13.0.88" "nvidia-nvvm==13.0.88" "nvidia-cuda-crt==13.0.88"
  "nvidia-cuda-runtime==13.0.96" "nvidia-cuda-cccl==13.0.85" "nvidia-cuda-nvrtc==13.0.88"
  "nvidia-cublas==13.0.2.14" "nvidia-curand==10.4.5.25"
)
if [ ! -x "$dir/nvidia/cu13/bin/nvcc" ]; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$dir/wheels" \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux2010_x86_64 "${wheels[@]}"
  for wheel in "$dir"/wheels/*.whl; do
    python3 -m zipfile -e "$wheel" "$dir"
  done
  rm -rf "$dir/wheels"
  chmod +x "$dir"/nvidia/cu13/bin/* "$dir"/nvidia/cu13/nvvm/bin/*
fi
cu=$dir/nvidia/cu13

# Linker names (libX.so) for the versioned libraries the wheels ship.
for lib in cudart cublas cublasLt curand nvrtc; do
  target=$(cd "$cu/lib" && ls "lib$lib.so."* | grep -v alt | sort | head -n 1)
  ln -sf "$cu/lib/$target" "$dir/lib64/lib$lib.so"
done

# The libcuda stub, with the real library's soname.
cargo fetch --quiet
cudarc_sys=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.*/src/driver/sys/mod.rs | tail -n 1)
grep -oE '^pub unsafe fn cu[A-Za-z0-9_]+' "$cudarc_sys" | sort -u | sed -E 's/pub unsafe fn (.*)/void \1(void) {}/' \
  > "$dir/libcuda_stub.c"
cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$dir/lib64/libcuda.so" "$dir/libcuda_stub.c"

ln -sfn "$cu/include" "$dir/include"
ln -sfn "$cu/bin" "$dir/bin"
ln -sfn "$cu/nvvm" "$dir/nvvm"
cat > "$dir/env.sh" <<ENV
export CUDA_HOME=$dir CUDA_PATH=$dir NVCC=$dir/bin/nvcc PATH=$dir/bin:\$PATH
export CUDA_COMPUTE_CAP=\${CUDA_COMPUTE_CAP:-90}   # H100 and H200
export LIBRARY_PATH=$dir/lib64:$cu/lib\${LIBRARY_PATH:+:\$LIBRARY_PATH}
ENV
echo "source $dir/env.sh"
