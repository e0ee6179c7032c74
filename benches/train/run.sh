#!/usr/bin/env bash
# The ERA5 U-Net training benchmark, every loader and mode in one run on one GPU host:
#
#   benches/train/run.sh [ZARRPIPE_BINARY] [WORKDIR]
#
# 1. installs the carried wheels (WHEELS=.whl: zarr-python and its dependencies for the baseline,
#    from benches/peers/fetch_wheels.sh, and the zarrpipe wheel built with `maturin build
#    --release --features cuda`) into /tmp/site;
# 2. writes each setup's store with `zarrpipe generate` into WORKDIR (kept between runs):
#      a   setup A: t2m, V500, U500, T500, Z500, Q500 (`--variables setup-a`), A_TIME steps
#      b   setup B: W1's 43 fields (t2m, u10, v10, msl; z, t, u on 13 levels), B_TIME steps
#      a-advised, b-advised   setup A's or B's store rewritten in the layout `zarrpipe advise`
#          names for it on this host (`zarrpipe rechunk` with the options the advice prints),
#          trained the same way (the advice may be uncompressed: setup A's store at A_TIME=2200
#          is 19 GB and 43 GB uncompressed, both on the disk while the second is written)
#    and their per-variable statistics (the first training run computes and caches them);
# 3. runs examples/python/train_unet.py once per loader, mode and precision, the same STEPS
#    timed steps after WARMUP untimed ones each: synthetic (the upper bound), the baseline
#    (xarray + DataLoader, WORKERS workers), the hackathon's DALI loader (`dali`: a DALI
#    pipeline over zarr-python batches, examples/python/hackathon_dali.py; its wheel and
#    dependencies among WHEELS), zarrpipe with --mode gpu, cpu (CPU decode, GPU collate), split
#    and auto; each loader also alone (--no-training, fp32);
# 4. appends every run's JSON line to WORKDIR/results.jsonl and writes WORKDIR/training.md and
#    its plots (benches/train/report.py), copied to $OUT when that is set.
#
# Environment (all optional):
#   WHEELS=.whl (a folder of wheels)   SKIP_WHEELS=1 (use what python3 has)
#   SETUPS="a b"   PRECISIONS="fp32 bf16" (bf16 runs train only; setup B: fp32 only)
#   MODES="gpu cpu split auto"   LOADERS="synthetic baseline zarrpipe" (or dali)
#   STEPS=300 WARMUP=15 WORKERS=8   A_TIME=4800 B_TIME=200   GEN_ARGS="--lat 640 --lon 1280"
#   (the pipe holds up to 8 batches decoded before the timed steps begin: over 60 steps they
#   counted for 13% of what a mode that cannot keep up delivers, docs/training.md, setup A bf16)
#   RUN_TIMEOUT=420 (seconds a run may take: the baseline trains setup B at about 9 samples/s)
#   STATS_STEPS=480 (the training split the statistics cover)
#   GPUS="1 2" (each run once per count: above 1, under torchrun with --distributed, a rank and
#   a zarrpipe pipeline per GPU, batch size per rank; default "1", no torchrun)
#   B_BATCH=8 (setup B's batch size: its 43-channel U-Net at batch 16 fills an 80 GB H100)
#   TRAIN_ARGS="--prefetch 2" (more train_unet.py options, for every run)
#   ALONE="baseline zarrpipe" (the loaders also timed alone, in fp32; dali too when named;
#   ALONE= for none)
#   BUDGET=seconds for the whole run: what does not fit is reported as not run
#   KEEP=1 keeps each store after its setup (default: removed, the host's disk is 64 GiB)
#   APPEND=1 keeps earlier results.jsonl lines (several calls make one report)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
work=${2:-/tmp/zarrpipe-train}
mkdir -p "$work"
work=$(cd "$work" && pwd)
bin=${1:-}
if [ -z "$bin" ]; then
  for b in .device/bin/zarrpipe "$work/bin/zarrpipe" target/release/zarrpipe; do [ -x "$b" ] && bin=$b && break; done
fi
if [ -z "$bin" ] && [ -e .device/bins.tar.xz ]; then
  tar -xJf .device/bins.tar.xz -C "$work" && bin=$work/bin/zarrpipe
fi
[ -x "${bin:-}" ] || { echo "no zarrpipe binary (give its path as the first argument)" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
started=$SECONDS
say() { echo "[train/run.sh $((SECONDS - started))s] $*" >&2; }

# --- 1. wheels ---------------------------------------------------------------------------------
wheels=$(ls "${WHEELS:-.whl}"/*.whl 2>/dev/null)
if [ -n "$wheels" ] && [ "${SKIP_WHEELS:-0}" != 1 ]; then
  say "installing $(echo "$wheels" | wc -l) wheels into /tmp/site"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels \
    || { say "installing the wheels failed"; exit 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if [ -z "${NVCOMP_LIB:-}" ] && [ -e "$(dirname "$bin")/libnvcomp.so.6" ]; then
  export NVCOMP_LIB=$(dirname "$bin")/libnvcomp.so.6
fi
python3 -c "import zarrpipe, torch; print('zarrpipe', zarrpipe.__version__, 'cuda built', zarrpipe.cuda_available(), 'torch', torch.__version__)" >&2 \
  || { say "python3 cannot import zarrpipe and torch"; exit 1; }

[ "${APPEND:-0}" = 1 ] || : > "$work/results.jsonl"
steps=${STEPS:-300}; warmup=${WARMUP:-15}; workers=${WORKERS:-8}
modes=${MODES:-gpu cpu split auto}
loaders=${LOADERS:-synthetic baseline zarrpipe}
script=$root/examples/python/train_unet.py

# One training run; its JSON line goes to results.jsonl, a failure is recorded with its reason.
train() {
  local setup=$1 label=$2; shift 2
  if [ -n "${BUDGET:-}" ] && [ $((SECONDS - started)) -ge "$BUDGET" ]; then
    say "over BUDGET: not run: $setup $label"
    echo "{\"setup\": \"$setup\", \"run\": \"$label\", \"world_size\": $gpus, \"error\": \"not run (over BUDGET)\"}" >> "$work/results.jsonl"
    return
  fi
  say "setup $setup, $gpus GPU(s): $label"
  local log=$work/$setup-${gpus}gpu-${label// /_}.log
  local launch=(python3 "$script")
  # One process per GPU, as the hackathon's script runs under torchrun; rank 0 prints the
  # figures of all ranks together.
  [ "$gpus" -gt 1 ] && launch=(python3 -m torch.distributed.run --standalone --nproc-per-node "$gpus" "$script" --distributed)
  timeout "${RUN_TIMEOUT:-420}" "${launch[@]}" --steps "$steps" --warmup "$warmup" --workers "$workers" ${TRAIN_ARGS:-} "$@" > "$log" 2>&1
  local status=$?
  local line
  line=$(grep '^{' "$log" | tail -n 1)
  if [ -n "$line" ]; then
    # The figures are printed before the exit; a non-zero exit after them (the --tiny loss
    # check, DataLoader workers torn down at exit) is kept beside them.
    python3 -c "import json,sys; d=json.loads(sys.argv[1]); d.update(setup=sys.argv[2], run=sys.argv[3]); d.update({'exit_status': int(sys.argv[4])} if sys.argv[4] != '0' else {}); print(json.dumps(d))" \
      "$line" "$setup" "$label" "$status" >> "$work/results.jsonl"
    grep -v '^{' "$log" | grep -E 'samples/s' | tail -n 1 >&2
  else
    local why
    why=$(tail -n 3 "$log" | tr '\n"' ' \047' | cut -c1-300)
    say "failed ($status): $why"
    echo "{\"setup\": \"$setup\", \"run\": \"$label\", \"world_size\": $gpus, \"error\": \"exit $status: $why\"}" >> "$work/results.jsonl"
  fi
}

# Whether a loader is also timed alone (--no-training).
alone() { [[ " ${ALONE-baseline zarrpipe} " == *" $1 "* ]]; }

# A setup's store in the layout `zarrpipe advise` names on this host: written from the setup's
# own store (generated first if missing, `gen` its options), with its statistics.
advised_store() {
  local base=$1 store=$2; shift 2
  local source=$work/setup-$base.zarr
  if [ ! -e "$source/zarr.json" ]; then
    say "writing $source for the advice: zarrpipe generate $* ${GEN_ARGS:-}"
    "$bin" generate "$source" "$@" ${GEN_ARGS:-} | tail -n 1 >&2 || return 1
  fi
  "$bin" advise "$source" --json > "$work/advice-$base.json" 2> "$work/advice-$base.log" || { say "advise failed: $(tail -n 2 "$work/advice-$base.log")"; return 1; }
  local options
  options=$(python3 -c "import json,sys; a=json.load(open(sys.argv[1])); print(' '.join(a['rechunk'] or []))" "$work/advice-$base.json")
  say "advice for setup $base: ${options:-keep the layout of the store} ($(python3 -c "import json,sys; a=json.load(open(sys.argv[1])); print(a['reason'], '; decode on:', a['decode_on'], '-', a['decode_on_reason'])" "$work/advice-$base.json"))"
  if [ -z "$options" ]; then ln -sfn "$source" "$store"; return 0; fi
  "$bin" rechunk "$source" "$store" $options > "$work/rechunk-$base.log" 2>&1 || { say "rechunk failed: $(tail -n 2 "$work/rechunk-$base.log")"; return 1; }
  [ -s "$work/setup-$base.stats.json" ] && cp "$work/setup-$base.stats.json" "$work/setup-$base-advised.stats.json"
  return 0
}

for setup in ${SETUPS:-a b}; do
  store=$work/setup-$setup.zarr
  base=${setup%-advised}
  case $base in
    a) gen=(--variables setup-a --time "${A_TIME:-4800}"); variables=(--variables t2m,V500,U500,T500,Z500,Q500); stats_vars=(--var t2m --var V500 --var U500 --var T500 --var Z500 --var Q500); precisions=${PRECISIONS:-fp32 bf16} ;;
    b) gen=(--time "${B_TIME:-200}"); variables=(--variables all --batch-size "${B_BATCH:-8}"); stats_vars=(); precisions=fp32 ;;
    *) say "unknown setup $setup (a, b, a-advised or b-advised)"; continue ;;
  esac
  if [ "$setup" != "$base" ]; then
    [ -e "$store/zarr.json" ] || advised_store "$base" "$store" "${gen[@]}" || { say "no advised store for setup $base"; continue; }
    gen=()
  fi
  if [ ! -e "$store/zarr.json" ]; then
    say "writing $store: zarrpipe generate ${gen[*]} ${GEN_ARGS:-}"
    "$bin" generate "$store" "${gen[@]}" ${GEN_ARGS:-} | tail -n 1 >&2 || { say "generate failed"; continue; }
  fi
  # Per-channel statistics over the training split (the first STATS_STEPS steps; 6-hourly
  # steps from 2000-01-01 as `zarrpipe generate` writes them), once for every run.
  stats=$work/setup-$setup.stats.json
  if [ ! -s "$stats" ]; then
    end=$(python3 -c "import datetime as d,sys; print((d.datetime(2000,1,1)+d.timedelta(hours=6*(int(sys.argv[1])-1))).isoformat())" "${STATS_STEPS:-480}")
    say "statistics of $store up to $end"
    "$bin" stats "$store" "${stats_vars[@]}" --end "$end" --json > "$stats.tmp" 2>"$work/stats.log" && mv "$stats.tmp" "$stats" \
      || { say "zarrpipe stats failed: $(tail -n 2 "$work/stats.log")"; continue; }
  fi
  variables+=(--stats "$stats")
  # Warm the page cache (every loader then reads from memory, as in the peers' runs).
  cat "$store"/*/c/* "$store"/*/c/*/* "$store"/*/c/*/*/* "$store"/*/c/*/*/*/* > /dev/null 2>&1
  for precision in $precisions; do
    for gpus in ${GPUS:-1}; do
      for loader in $loaders; do
        case $loader in
          synthetic) train "$setup" "synthetic $precision" --loader synthetic --precision "$precision" "${variables[@]}" "$store" ;;
          baseline)
            train "$setup" "baseline $precision" --loader baseline --precision "$precision" "${variables[@]}" "$store"
            [ "$precision" = fp32 ] && alone baseline && train "$setup" "baseline alone" --loader baseline --no-training "${variables[@]}" "$store" ;;
          dali)
            train "$setup" "dali $precision" --loader dali --precision "$precision" "${variables[@]}" "$store"
            [ "$precision" = fp32 ] && alone dali && train "$setup" "dali alone" --loader dali --no-training "${variables[@]}" "$store" ;;
          zarrpipe)
            for mode in $modes; do
              train "$setup" "zarrpipe-$mode $precision" --loader zarrpipe --mode "$mode" --precision "$precision" "${variables[@]}" "$store"
              [ "$precision" = fp32 ] && alone zarrpipe && train "$setup" "zarrpipe-$mode alone" --loader zarrpipe --mode "$mode" --no-training "${variables[@]}" "$store"
            done ;;
        esac
      done
    done
  done
  # A setup's store stays while the advised one is still to be written from it.
  if [ "${KEEP:-0}" != 1 ] && [[ " ${SETUPS:-a b} " != *" $setup-advised "* ]]; then
    rm -rf "$store"
  fi
  [ "$setup" != "$base" ] && [ "${KEEP:-0}" != 1 ] && rm -rf "$work/setup-$base.zarr"
done

# --- 4. the report ---------------------------------------------------------------------------
host=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
python3 "$here/report.py" "$work/results.jsonl" --out "$work" --host "${host:-no GPU}, $(nproc) CPUs" \
  --command "benches/train/run.sh (SETUPS='${SETUPS:-a b}' STEPS=$steps WARMUP=$warmup WORKERS=$workers A_TIME=${A_TIME:-4800} B_TIME=${B_TIME:-200} B_BATCH=${B_BATCH:-8} GPUS='${GPUS:-1}' TRAIN_ARGS='${TRAIN_ARGS:-}')" >&2
if [ -n "${OUT:-}" ]; then
  # Few files come back from the device machine: the logs travel as one archive.
  cp "$work/results.jsonl" "$work"/training*.md "$work"/training_*.png "$OUT"/ 2>/dev/null
  tar -C "$work" -czf "$OUT/train-logs.tar.gz" $(cd "$work" && ls *.log 2>/dev/null)
fi
say "done"
