#!/usr/bin/env bash
# zarrpipe against its peers on W1 and its variants, in one run on one host.
#
#   benches/peers/run.sh [ZARRPIPE_BINARY] [WORKDIR]
#
# 1. installs the carried wheels (.whl/, from benches/peers/fetch_wheels.sh) when there are any;
# 2. writes W1 and its variants with `zarrpipe generate` into WORKDIR (kept between runs):
#      w1              16 time steps x 43 fields of 640 x 1280 float32, zstd level 3
#      w1-blosc-lz4    the same with blosc (lz4, byte shuffle)
#      w1-sharded      the same as w1 in shards of 4 time steps (sharding_indexed, inner chunk = field)
#    and, when DATASETS names them: w1-blosc-zstd, w1-gzip, w1-none (other codecs),
#      w1-small          W1 in (1, 320, 640) chunks, 0.8 MB each (`--chunks 320,640`)
#      w1-small-sharded  shards of one field, inner chunks (1, 160, 320) (`--shard 1 --chunks 160,320`)
#      w1-64             W1 with 64 time steps (`--time 64`, 9 GB decoded: a longer epoch)
# 3. measures zarrpipe's GPU path (when there is a GPU) and its CPU path, then every peer of
#    benches/peers/peers.py delivering to the GPU (or, without a GPU, to the CPU), and the CPU
#    peers (CPU_PEERS) delivering to host memory; best of 2 passes after a warm-up pass;
# 4. writes WORKDIR/results.json, WORKDIR/report.md and WORKDIR/peers_w1.png (benches/peers/report.py),
#    and copies them to $OUT when that is set (the device machine's folder that comes back).
#
# Environment (all optional):
#   DATASETS="w1 w1-blosc-lz4 w1-sharded"   which datasets, in order (the sharded comparison:
#                                           DATASETS="w1 w1-small w1-small-sharded")
#   DECODES="gpu split auto cpu"            zarrpipe's GPU rows: one `bench --decode X` run each, rows named
#                                           `zarrpipe (decode X)` (default: one run, the device's default);
#                                           X:in-a-row times 10 epochs of one stream together
#                                           (`--epochs-in-a-row --passes 10`), rows `zarrpipe (decode X, in a row)`
#   TIME=16  GEN_ARGS="--lat 64 --lon 128"  time steps, and extra `zarrpipe generate` options
#   PEERS=zarr,zarr-gpu,...                 peers delivering to the GPU (default: peers.py's list)
#   CPU_PEERS=tensorstore-whole             peers delivering to host memory (empty: none)
#   DEVICE=cuda:0                           the GPU (default cuda:0 when torch sees one, else cpu)
#   WORKERS=8  PASSES=2  PEER_TIMEOUT=600   DataLoader workers, timed passes, seconds per peer
#   PEER_ARGS="--augspurger-streams 2"      more options for peers.py
#   BUDGET=540                              seconds for the whole run (default: none); what does not fit
#                                           is reported as not run. APPEND=1 keeps earlier results.
#   SKIP_WHEELS=1                           do not install .whl/ (use what python3 has)
#   NVCOMP_LIB=.../libnvcomp.so.6           for zarrpipe's GPU path and the nvcomp peer (default: beside
#                                           the binary, in .device/bin/ or .device/)
# ZARRPIPE_BINARY defaults to .device/bin/zarrpipe, or bin/zarrpipe of .device/bins.tar.xz (unpacked
# into WORKDIR), or target/release/zarrpipe.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
work=${2:-/tmp/zarrpipe-peers}
mkdir -p "$work"
work=$(cd "$work" && pwd)
# zarrpipe's carried binaries: .device/bin/, or .device/bins.tar.xz (holding bin/) unpacked into
# WORKDIR (never into the repository, whose size the device machine limits)
bins=
if [ -d .device/bin ]; then
  bins=$root/.device/bin
elif [ -e .device/bins.tar.xz ] && { [ -z "${1:-}" ] || { [ -z "${NVCOMP_LIB:-}" ] && [ ! -e "$(dirname "$1")/libnvcomp.so.6" ]; }; }; then
  [ -e "$work/bin/zarrpipe" ] || tar -xJf .device/bins.tar.xz -C "$work"
  bins=$work/bin
fi
bin=${1:-}
if [ -z "$bin" ]; then
  for b in "$bins/zarrpipe" target/release/zarrpipe; do [ -x "$b" ] && bin=$b && break; done
fi
[ -x "${bin:-}" ] || { echo "no zarrpipe binary (give its path as the first argument)" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
started=$SECONDS
say() { echo "[run.sh $((SECONDS - started))s] $*" >&2; }

# --- 1. the carried wheels (the install line of the device README) ---------------------------
pyver=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
if [ "${SKIP_WHEELS:-0}" = 1 ]; then
  say "SKIP_WHEELS=1: using the Python packages already installed"
elif ls .whl/*.whl >/dev/null 2>&1 && [ "$pyver" != 3.12 ]; then
  say "the wheels in .whl are for Python 3.12, python3 is $pyver: not installing them"
elif ls .whl/*.whl >/dev/null 2>&1; then
  say "installing $(ls .whl/*.whl | wc -l) wheels from .whl into /tmp/site"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || { say "installing the wheels failed"; exit 1; }
fi
if [ -z "${NVCOMP_LIB:-}" ]; then
  for lib in "$(dirname "$bin")/libnvcomp.so.6" ${bins:+"$bins/libnvcomp.so.6"} "$root/.device/libnvcomp.so.6"; do
    [ -e "$lib" ] && export NVCOMP_LIB=$lib && break
  done
fi

device=${DEVICE:-}
if [ -z "$device" ]; then
  if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    device=cuda:0
  else
    device=cpu
  fi
fi
say "zarrpipe: $bin ($("$bin" --version 2>/dev/null)); device for the peers: $device; work: $work"

# zarrpipe's GPU path loads NVRTC and nvCOMP at run time: CUDA's library folder for it alone
# (not for Python, whose torch brings its own CUDA libraries).
zp_env=()
for d in /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib64; do
  if [ -d "$d" ]; then zp_env=(env "LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"); break; fi
done

# `zarrpipe bench` where this build has it, else `zarrpipe run --passes 2`; the W1 channel order.
if "$bin" bench --help >/dev/null 2>&1; then
  sub=(bench); help=$("$bin" bench --help)
else
  sub=(run --passes "${PASSES:-2}"); help=$("$bin" run --help)
fi
vars=()
if grep -q -- '--var' <<<"$help"; then
  for v in t2m u10 v10 msl z t u; do vars+=(--var "$v"); done
fi

results=$work/results.jsonl
[ "${APPEND:-0}" = 1 ] || : >"$results"
# BUDGET=seconds: the whole run ends in time for the report (no peer starts, running ones stop,
# 30 s before); the datasets come in order, so W1 first.
deadline=
[ -n "${BUDGET:-}" ] && deadline=$(( $(date +%s) + BUDGET - (SECONDS - started) - 30 ))
out_of_time() { [ -n "$deadline" ] && [ "$(date +%s)" -ge $((deadline - ${1:-0})) ]; }

# Run zarrpipe on one dataset and device (and `--decode` side, if given); append its JSON line,
# annotated (or a `skipped` line).
zarrpipe_row() {
  local dataset=$1 dir=$2 dev=$3 decode=${4:-}
  local extra=()
  case "$decode" in
    *:in-a-row) extra=(--decode "${decode%:in-a-row}" --epochs-in-a-row --passes 10) ;;
    ?*) extra=(--decode "$decode") ;;
  esac
  say "$dataset: zarrpipe ${sub[0]} --device $dev ${extra[*]}"
  timeout "${PEER_TIMEOUT:-600}" "${zp_env[@]}" "$bin" "${sub[@]}" "$dir" "${vars[@]}" --device "$dev" "${extra[@]}" --json --checksum \
    >"$work/zarrpipe.out" 2>"$work/zarrpipe.err"
  local rc=$?
  cat "$work/zarrpipe.err" >&2
  python3 - "$dataset" "$dev" "$rc" "$work/zarrpipe.out" "$work/zarrpipe.err" "$decode" <<'EOF' >>"$results"
import json, sys
dataset, dev, rc, out, err, decode = sys.argv[1:7]
lines = [l for l in open(out) if l.startswith("{")]
label = decode.replace(":in-a-row", ", in a row")
tool = "zarrpipe (" + (f"decode {label}" if decode else "gpu" if dev.startswith("cuda") else "cpu") + ")"
extra = {"decode_option": decode} if decode else {}  # zarrpipe's own "decode" says where it decoded
if rc != "0" or not lines:
    tail = open(err).read().strip().splitlines()[-3:]
    print(json.dumps({"peer": "zarrpipe", "tool": tool, "dataset": dataset, "device": dev, **extra,
                      "skipped": f"exit status {rc}: " + " | ".join(tail)}))
for line in lines:
    row = json.loads(line)
    row.setdefault("decoded_bytes", row.get("delivered_bytes"))
    if "samples_per_s" not in row and row.get("seconds"):
        row["samples_per_s"] = row["samples"] / row["seconds"]
    row.update(peer="zarrpipe", dataset=dataset, device=dev, **extra)
    if decode:
        row["tool"] = row.get("tool", "zarrpipe").split(" (")[0] + f" (decode {label})"
    print(json.dumps(row))
EOF
}

# The CPU's bound on one dataset (`zarrpipe bound`: threads read each chunk file and
# decompress it with the codec library alone into reused buffers, no zarrpipe stage), on every
# core (what the host path and CPU decoding beside a GPU use) and on every core but two (auto's
# CPU side); a
# `cpu-bound` row each, `when` saying whether it ran before or after zarrpipe's rows.
cpu_bound_rows() {
  local dataset=$1 dir=$2 steps=$3 when=$4 cores
  cores=$(nproc)
  for threads in "$cores" $((cores > 2 ? cores - 2 : 1)); do
    say "$dataset: zarrpipe bound --threads $threads ($when)"
    timeout "${PEER_TIMEOUT:-600}" "$bin" bound "$dir" --threads "$threads" --passes "${PASSES:-2}" --json \
      >"$work/bound.out" 2>"$work/bound.err"
    python3 - "$dataset" "$threads" "$steps" "$when" "$work/bound.out" "$work/bound.err" <<'EOF' >>"$results"
import json, sys
dataset, threads, steps, when, out, err = sys.argv[1:7]
tool = f"cpu-bound ({threads} threads, {when})"
lines = [l for l in open(out) if l.startswith("{")]
if not lines:
    tail = " | ".join(open(err).read().strip().splitlines()[-2:])
    print(json.dumps({"peer": "cpu-bound", "tool": tool, "dataset": dataset, "device": "cpu",
                      "skipped": tail or "no output"}))
else:
    bound = json.loads(lines[-1])
    print(json.dumps({"peer": "cpu-bound", "tool": tool, "dataset": dataset, "device": "cpu",
                      "threads": int(threads), "when": when, "gb_per_s": bound["decoded_gb_per_s"],
                      "seconds": bound["seconds"], "samples": int(steps),
                      "samples_per_s": int(steps) / bound["seconds"],
                      "decoded_bytes": bound["decoded_bytes"], "codec": bound["codec"],
                      "notes": [f"{bound['chunks']} chunk files, read and decompressed by {threads} threads, no zarrpipe stage"]}))
EOF
  done
}

for dataset in ${DATASETS:-w1 w1-blosc-lz4 w1-sharded}; do
  dir=$work/$dataset
  case $dataset in
    w1) opts=() ;;
    w1-blosc-lz4) opts=(--codec blosc-lz4) ;;
    w1-blosc-zstd) opts=(--codec blosc-zstd) ;;
    w1-gzip) opts=(--codec gzip) ;;
    w1-none) opts=(--codec none) ;;
    w1-sharded) opts=(--shard 4) ;;
    w1-small) opts=(--chunks 320,640) ;;
    w1-small-sharded) opts=(--shard 1 --chunks 160,320) ;;
    w1-64) opts=() ;;  # --time 64 below
    *) say "unknown dataset $dataset (w1, w1-blosc-lz4, w1-blosc-zstd, w1-gzip, w1-none, w1-sharded, w1-small, w1-small-sharded, w1-64)"; continue ;;
  esac
  if out_of_time 30; then
    say "$dataset: skipped, the time budget is spent"
    echo "{\"peer\": \"zarrpipe\", \"tool\": \"zarrpipe\", \"dataset\": \"$dataset\", \"device\": \"$device\", \"skipped\": \"not run: BUDGET spent\"}" >>"$results"
    continue
  fi
  gen=(--time "${TIME:-16}")
  [ "$dataset" = w1-64 ] && gen=(--time 64)
  # shellcheck disable=SC2206
  gen+=(${GEN_ARGS:-} "${opts[@]}")
  if [ ! -e "$dir/zarr.json" ] || [ "$(cat "$dir.args" 2>/dev/null)" != "${gen[*]}" ]; then
    rm -rf "$dir" "$dir.args"
    say "$dataset: zarrpipe generate ${gen[*]}"
    "$bin" generate "$dir" "${gen[@]}" >&2 || { say "generating $dataset failed"; continue; }
    echo "${gen[*]}" >"$dir.args"
  fi
  cpu_bound_rows "$dataset" "$dir" "${gen[1]}" before
  if [ "$device" != cpu ]; then
    if [ -n "${DECODES:-}" ]; then
      for decode in $DECODES; do zarrpipe_row "$dataset" "$dir" "$device" "$decode"; done
    else
      zarrpipe_row "$dataset" "$dir" "$device"
    fi
  fi
  zarrpipe_row "$dataset" "$dir" cpu
  cpu_bound_rows "$dataset" "$dir" "${gen[1]}" after
  common=(--passes "${PASSES:-2}" --workers "${WORKERS:-8}" --peer-timeout "${PEER_TIMEOUT:-600}" --dataset "$dataset")
  [ -n "$deadline" ] && common+=(--deadline "$deadline")
  # shellcheck disable=SC2206 # options split on spaces, as given
  common+=(${PEER_ARGS:-})
  say "$dataset: peers -> $device"
  python3 "$here/peers.py" "$dir" --device "$device" ${PEERS:+--peers "$PEERS"} "${common[@]}" >>"$results"
  cpu_peers=${CPU_PEERS-tensorstore-whole}
  if [ "$device" != cpu ] && [ -n "$cpu_peers" ]; then
    say "$dataset: peers -> cpu ($cpu_peers)"
    python3 "$here/peers.py" "$dir" --device cpu --peers "$cpu_peers" "${common[@]}" >>"$results"
  fi
done

# --- 4. results.json, the report and the chart ------------------------------------------------
python3 - "$results" "$work/results.json" "$bin" "$device" <<'EOF'
import json, os, platform, subprocess, sys, time
rows_path, out_path, binary, device = sys.argv[1:5]
def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception:
        return ""
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
mem = next((int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemTotal")), None)
gpus = [g.strip() for g in sh("nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader").splitlines() if g.strip()]
host = {"cpu": cpu, "cores": os.cpu_count(), "memory_bytes": mem, "gpus": gpus, "kernel": platform.release(),
        "python": platform.python_version(), "zarrpipe": sh(binary, "--version"), "device": device,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
rows = [json.loads(l) for l in open(rows_path) if l.startswith("{")]
json.dump({"host": host, "results": rows}, open(out_path, "w"), indent=1)
print(f"{len(rows)} results in {out_path}", file=sys.stderr)
EOF
python3 "$here/report.py" "$work/results.json" --markdown "$work/report.md" --plot "$work/peers_w1.png"
cat "$work/report.md"
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
  cp "$work/results.json" "$work/report.md" "$OUT"/ && cp "$work/peers_w1.png" "$OUT"/ 2>/dev/null
fi
say "done"
