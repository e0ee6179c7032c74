#!/usr/bin/env bash
# The GPU pipeline on W1 and its variants, next to the CPU pipeline, in one run on one host.
#
#   benches/gpu_w1.sh [ZARRPIPE_BINARY] [WORKDIR] [EXAMPLE_03_BINARY]
#
# Writes W1 (16 time steps x 43 fields of 640 x 1280 float32) with zstd, blosc-lz4 and as
# shards of 4 time steps; then, warm page cache, best of 2 passes after a warm-up
# (`zarrpipe bench`), delivers [4, 43, 640, 1280] batches to cuda:0 and to host memory. Then
# the cold-cache figure (page cache dropped, one epoch) next to the disk's direct read rate
# (16 parallel readers of the same files, cache dropped), and the bare nvCOMP rate on W1's
# chunks (example 03). Prints one JSON line per measurement.
set -euo pipefail
binary=${1:-target/release/zarrpipe}
work=${2:-/tmp/zarrpipe-bench}
example=${3:-target/release/examples/03_decode_on_gpu}
mkdir -p "$work"
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
nvidia-smi --query-gpu=name --format=csv,noheader || true
[ -e "$work/w1/zarr.json" ] || "$binary" generate "$work/w1" --time 16 >/dev/null
[ -e "$work/w1-blosc-lz4/zarr.json" ] || "$binary" generate "$work/w1-blosc-lz4" --time 16 --codec blosc-lz4 >/dev/null
[ -e "$work/w1-sharded/zarr.json" ] || "$binary" generate "$work/w1-sharded" --time 16 --shard 4 >/dev/null
for store in w1 w1-blosc-lz4 w1-sharded; do
  for device in cuda:0 cpu; do
    "$binary" bench "$work/$store" --device "$device" --json --checksum
  done
done
for batch in 8 16; do
  "$binary" bench "$work/w1" --device cuda:0 --batch-size "$batch" --json
done
"$binary" bench "$work/w1" --device cuda:0 --dtype bf16 --json

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
if drop_caches 2>/dev/null; then
  started=$(date +%s.%N)
  find "$work/w1" -type f -print0 | xargs -0 -P16 -n32 cat > /dev/null
  ended=$(date +%s.%N)
  bytes=$(du -sb "$work/w1" | cut -f1)
  echo "{\"tool\": \"cold read, 16 parallel readers\", \"bytes\": $bytes, \"gb_per_s\": $(python3 -c "print($bytes / ($ended - $started) / 1e9)")}"
  drop_caches
  "$binary" run "$work/w1" --device cuda:0 --json
else
  echo '{"tool": "cold cache", "skipped": "cannot drop the page cache here"}'
fi
[ -x "$example" ] && "$example" "$work/w1"
