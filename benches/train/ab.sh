#!/usr/bin/env bash
# Two builds of the zarrpipe wheel trained against each other, run by run, on one GPU host and
# one store, so that a change to `auto` (or any mode) is judged beside the build it changes:
#
#   RUNS="new:b-advised:auto:fp32 old:b-advised:auto:fp32 new:b-advised:cpu:fp32 ..." \
#     benches/train/ab.sh ZARRPIPE_BINARY [WORKDIR]
#
# Each run is BUILD:SETUP:MODE:PRECISION: BUILD names a folder of wheels under WHEELS_AB
# (default .whl-ab: .whl-ab/new, .whl-ab/old), each installed into /tmp/site-BUILD once per call
# (afresh, so that a warm machine does not run the wheels an earlier call carried); SETUP
# is one of benches/train/run.sh's (a, b, a-advised, b-advised), MODE a zarrpipe mode or `synthetic`;
# `rm:SETUP` removes that setup's store (the host's disk holds setup A and B's two layouts only
# one at a time). The stores are written by the first run that needs them and kept, so a later
# call on the same warm machine reuses them. A build named NAME+VARIANT runs NAME's wheels with
# the variables ENV_BUILD gives it, e.g. ENV_BUILD="new+purge=MIMALLOC_PURGE_DELAY=-1" (a
# TRAIN_ARGS variable adds to the training script's arguments; a variant's options go one per
# word, its name repeated: "new+hp6=TRAIN_ARGS=--model-stream=high new+hp6=TRAIN_ARGS=--gpu-chunks=0.6").
#
# Environment (all optional): LIMIT=seconds after which runs are skipped (default 540, a
# device call's 600 less the writing), A_TIME=2200 B_TIME=200 B_BATCH=8 STEPS=300 WARMUP=15,
# RUN_TIMEOUT=300,
# GPUS=2 (every run under torchrun, a rank per GPU; one count per call),
# TRACE=1 (auto's shares in each run's log: ZARRPIPE_LOG=zarrpipe_codec_gpu=debug, or TRACE_LOG's
# filter, e.g. TRACE_LOG=zarrpipe_codec_gpu=debug,zarrpipe::timeline=debug).
# Every run's JSON line, with its `build`, goes to $OUT/ab.jsonl (WORKDIR/ab.jsonl without
# $OUT) and each zarrpipe run's log to logs/ beside it (a variant's `+` written `_`).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:?usage: benches/train/ab.sh ZARRPIPE_BINARY [WORKDIR]}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
work=${2:-/tmp/zarrpipe-train}
out=${OUT:-$work}
mkdir -p "$work" "$out/logs"
cd "$root"
[ -n "${RUNS:-}" ] || { echo "RUNS is empty (BUILD:SETUP:MODE:PRECISION ...)" >&2; exit 2; }
[ "${TRACE:-0}" = 1 ] && export ZARRPIPE_LOG=${TRACE_LOG:-zarrpipe_codec_gpu=debug}
wheels=${WHEELS_AB:-.whl-ab}
started=$SECONDS

# A build's name, stripped of what follows a `+` (a variant of the same wheels).
wheels_of() { echo "${1%%+*}"; }

installed=" "
install() {
  local build
  build=$(wheels_of "$1")
  [[ "$installed" == *" $build "* ]] && return 0
  rm -rf "/tmp/site-$build"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "/tmp/site-$build" "$wheels/$build"/*.whl \
    && installed+="$build "
}

# The environment a variant sets: ENV_BUILD="new+purge=MIMALLOC_PURGE_DELAY=-1".
variant_env() {
  local entry
  for entry in ${ENV_BUILD:-}; do
    [ "${entry%%=*}" = "$1" ] && echo "${entry#*=}"
  done
}

one() {
  local build=$1 setup=$2 mode=$3 precision=$4
  if [ $((SECONDS - started)) -gt "${LIMIT:-540}" ]; then
    echo "skipped (over LIMIT): $build $setup $mode $precision"
    return
  fi
  install "$build" || return
  local loaders=zarrpipe
  [ "$mode" = synthetic ] && loaders=synthetic
  local train_args=--prefetch=2
  [ "$setup" = a ] && train_args=
  # A variant's TRAIN_ARGS add to the run's: ENV_BUILD="new+t16=TRAIN_ARGS=--cpu-decode-threads=16".
  local extra
  extra=$(variant_env "$build" | sed -n 's/^TRAIN_ARGS=//p')
  [ -n "$extra" ] && train_args="$train_args $extra"
  # shellcheck disable=SC2046 # the variant's VAR=VALUE words
  env $(variant_env "$build") PYTHONPATH="/tmp/site-$(wheels_of "$build")" SKIP_WHEELS=1 \
    SETUPS="$setup" MODES="$mode" PRECISIONS="$precision" LOADERS=$loaders ALONE= KEEP=1 APPEND=1 \
    A_TIME="${A_TIME:-2200}" B_TIME="${B_TIME:-200}" B_BATCH="${B_BATCH:-8}" STEPS="${STEPS:-300}" \
    WARMUP="${WARMUP:-15}" RUN_TIMEOUT="${RUN_TIMEOUT:-300}" TRAIN_ARGS="$train_args" OUT= \
    "$here/run.sh" "$bin" "$work" 2>&1 | grep -E "samples/s|failed|advice|^wrote /tmp" | sed "s/^/[$build $setup] /"
  tail -n 1 "$work/results.jsonl" \
    | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); d['build']=sys.argv[1]; print(json.dumps(d))" "$build" >> "$out/ab.jsonl"
  local label=zarrpipe-$mode
  [ "$mode" = synthetic ] && label=synthetic
  # `+` spelled `_` in the file's name: the device tool does not bring back names with a `+`.
  cp "$work/$setup-${GPUS:-1}gpu-${label}_$precision.log" "$out/logs/$setup-$mode-$precision-${build//+/_}-$((SECONDS - started))s.log" 2>/dev/null
}

# Every build's wheels are there before the first run: a call's time is not spent on runs that
# cannot start.
missing=
for run in $RUNS; do
  IFS=: read -r build _ <<< "$run"
  [ "$build" = rm ] && continue
  folder=$wheels/$(wheels_of "$build")
  ls "$folder"/*.whl > /dev/null 2>&1 || missing+=" $folder"
done
[ -z "$missing" ] || { echo "error: no wheels in$missing" >&2; exit 2; }

for run in $RUNS; do
  IFS=: read -r build setup mode precision <<< "$run"
  if [ "$build" = rm ]; then
    rm -rf "$work/setup-$setup.zarr"
  else
    one "$build" "$setup" "$mode" "${precision:-fp32}"
  fi
done
