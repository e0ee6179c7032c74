#!/usr/bin/env bash
# The GPU decoder under compute-sanitizer (memcheck) on the corrupt-chunk tests, and the gather
# kernel on CF-decoded and level-selected batches, on a GPU host.
#
#   scripts/gpu-sanitizer.sh [GPU_DECODE_TEST_BINARY] [GPU_PIPELINE_TEST_BINARY]
#
# The binaries default to the newest `cargo test --release --test gpu_decode
# --test gpu_pipeline --no-run` builds in target/release/deps. Run from the repository root (the
# tests read tests/fixtures). Needs compute-sanitizer (CUDA toolkit), the CUDA libraries on
# LD_LIBRARY_PATH and NVCOMP_LIB, as for the GPU tests. Fails when memcheck reports an error.
set -euo pipefail
newest() { ls -t target/release/deps/"$1"-* 2>/dev/null | grep -v '\.d$' | head -n 1; }
decode=${1:-$(newest gpu_decode)}
pipeline=${2:-$(newest gpu_pipeline)}
[ -x "$decode" ] && [ -x "$pipeline" ] || { echo "build the GPU test binaries first (see the header)" >&2; exit 2; }
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
status=0
for run in "$decode scrambled_chunks_fail_alone_on_the_gpu" \
           "$decode truncated_chunks_fail_alone_on_the_gpu" \
           "$decode fixtures_decode_bit_identical_on_the_gpu" \
           "$decode pipelined_groups_decode_bit_identical_on_the_gpu" \
           "$pipeline on_gpu::a_corrupt_chunk_fails_its_batch_only" \
           "$pipeline on_gpu::cf_decoding_matches_the_cpu" \
           "$pipeline on_gpu::selected_levels_match_the_cpu" \
           "$pipeline on_gpu::a_decoder_of_ones_own_feeds_the_device_collator"; do
  set -- $run
  echo "== compute-sanitizer memcheck: $(basename "$1") $2"
  log=$(mktemp)
  if ! "$sanitizer" --tool memcheck --error-exitcode 99 "$1" --exact "$2" --test-threads 1 >"$log" 2>&1; then
    status=1
  fi
  grep -E "ERROR SUMMARY|test result|^========= [A-Z]" "$log" | head -n 20
  rm -f "$log"
done
exit "$status"
