#!/usr/bin/env bash
# W1, plain and sharded (`--shard 4`), served by a local S3 server (s3s-fs on loopback, started
# by the benchmark itself) and read through the full zarrpipe pipeline, next to a plain
# concurrent GET of the same objects from the same server in the same run.
#
#   benches/peers/s3_w1.sh [--time N] [--lat N] [--lon N] [--codec zstd|none] [--passes N] [--work DIR] [--gpu]
#
# `--gpu` decodes and collates on cuda:0 (built with `--features cuda`), as a training job does.
# Defaults are full W1 (16 time steps x 43 fields of 640 x 1280 float32, zstd). Prints one
# Markdown table row per store and order: MB/s of stored bytes for the plain GETs and for the
# pipeline, their ratio, requests per batch, bytes read per byte delivered, read amplification
# (bytes fetched / stored bytes the batches need), and delivered GB/s.
set -euo pipefail
cd "$(dirname "$0")/../.."
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
features=()
for arg in "$@"; do [ "$arg" = --gpu ] && features=(--features cuda); done
cargo bench ${features[@]+"${features[@]}"} --bench s3_w1 -- "$@"
