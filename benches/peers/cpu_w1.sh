#!/usr/bin/env bash
# The CPU path on W1 next to tensorstore's whole-array read, in one run on one host.
#
#   benches/peers/cpu_w1.sh [ZARRPIPE_BINARY] [WORKDIR]
#
# Writes W1 with `zarrpipe generate` (16 time steps, 43 fields of 640 x 1280 float32, zstd),
# then measures, warm page cache, best of 2 passes after one warm-up pass:
#   - zarrpipe's CPU pipeline, delivering [4, 43, 640, 1280] float32 batches to host memory;
#   - tensorstore 0.1 reading every variable whole (all reads issued at once).
# Each prints one JSON line; both print a checksum of the values delivered.
set -euo pipefail
binary=${1:-target/release/zarrpipe}
work=${2:-/tmp/zarrpipe-bench}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
[ -e "$work/w1/zarr.json" ] || "$binary" generate "$work/w1" --time 16
for batch in 4 8; do
  "$binary" run "$work/w1" --batch-size "$batch" --passes 2 --device cpu --json $( [ "$batch" = 4 ] && echo --checksum )
done
python3 "$here/tensorstore_w1.py" "$work/w1" --passes 2
