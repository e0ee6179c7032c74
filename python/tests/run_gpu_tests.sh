#!/usr/bin/env bash
# The Python package's GPU tests on a GPU host, from a wheel built elsewhere:
#
#   python/tests/run_gpu_tests.sh dist/zarrpipe-0.1.0-cp310-abi3-manylinux_2_34_x86_64.whl [pytest args]
#
# The wheel (built with `maturin build --release --features cuda`, see python/README.md) is
# installed with `pip install --no-deps --target` into a temporary folder: nothing is fetched
# and the host's Python packages are left alone. The host needs torch (and, for one check,
# cupy), numpy and pytest; if pytest is missing, its wheels are taken from `pytest-wheels/`
# beside the wheel. zarrpipe loads NVRTC and nvCOMP 6 at run time: NVCOMP_LIB (default:
# libnvcomp.so.6 beside the wheel, in .device/ or .device/bin/ of the repository, or in an
# installed nvidia-libnvcomp wheel) and NVRTC on LD_LIBRARY_PATH (added: /usr/local/cuda's
# library folder, else the folder of torch's nvidia wheels that holds libnvrtc). The CPU tests
# run too (`-k gpu` for the GPU ones alone); a GPU test that skips prints why.
set -euo pipefail
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
  echo "usage: $0 WHEEL [pytest args...]" >&2
  exit 2
fi
wheel=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$python" -m pip install --quiet --no-deps --no-index --target "$work/site" "$wheel"
if ! "$python" -c 'import pytest' 2>/dev/null; then
  wheels=$(dirname "$wheel")/pytest-wheels
  [ -d "$wheels" ] || { echo "pytest is not installed and $wheels does not exist" >&2; exit 2; }
  "$python" -m pip install --quiet --no-index --find-links "$wheels" --target "$work/site" pytest
fi

if [ -z "${NVCOMP_LIB:-}" ]; then
  for lib in "$(dirname "$wheel")/libnvcomp.so.6" "$repo/.device/libnvcomp.so.6" "$repo/.device/bin/libnvcomp.so.6" \
             $("$python" - <<'PY' 2>/dev/null || true
import glob, site
for base in site.getsitepackages():
    for path in glob.glob(base + "/nvidia/**/libnvcomp.so.6", recursive=True):
        print(path)
PY
); do
    if [ -e "$lib" ]; then export NVCOMP_LIB=$lib; break; fi
  done
fi
echo "NVCOMP_LIB=${NVCOMP_LIB:-(not found: GPU decoding of compressed chunks will fail)}"
# NVRTC for zarrpipe's kernels: CUDA's library folder, else the one torch's nvidia wheels bring.
cuda_lib=
for d in /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib64 \
         $("$python" - <<'PY' 2>/dev/null || true
import glob, os, site
for base in site.getsitepackages():
    for path in sorted(glob.glob(base + "/nvidia/**/libnvrtc.so.*", recursive=True)):
        print(os.path.dirname(path))
PY
); do
  if [ -d "$d" ]; then cuda_lib=$d; break; fi
done
if [ -n "$cuda_lib" ]; then export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$cuda_lib; fi
echo "CUDA libraries (NVRTC): ${cuda_lib:-(none found; set LD_LIBRARY_PATH)}"

export PYTHONPATH=$work/site${PYTHONPATH:+:$PYTHONPATH}
export ZARRPIPE_FIXTURES=$repo/tests/fixtures
# From the temporary folder, so `import zarrpipe` finds the installed wheel, not python/zarrpipe.
cd "$work"
"$python" -c 'import zarrpipe, sys; print("zarrpipe", zarrpipe.__version__, "from", zarrpipe.__file__, "cuda build:", zarrpipe.cuda_available())'
status=0
timeout "${TIMEOUT:-1200}" "$python" -m pytest -p no:cacheprovider -rs -v --rootdir "$here" "$here" "$@" || status=$?
# 5: nothing collected (a -k that matches nothing); anything else is the tests' verdict.
exit $status
