#!/usr/bin/env bash
# The CPU's bound (`zarrpipe bound`, its best pass and its three passes together; and decoding
# into places of one large buffer) beside zarrpipe's two CPU decoding paths, epochs in a row,
# three interleaved rounds on W1, W1 of 64 steps, w1-small and blosc-lz4:
#   benches/cpu_bound_w1.sh ZARRPIPE_BINARY [WORKDIR]    (DATASETS="w1 w1-64" for fewer)
# BEFORE=OTHER_ZARRPIPE_BINARY adds its two rows to each round, to compare two builds. Ends
# with each row's median over the rounds and its share of the two bounds' medians.
# On a GPU host (the CPU decode + GPU collate row needs one); results in docs/benchmarks.md.
set -u
zp=${1:?usage: benches/cpu_bound_w1.sh ZARRPIPE_BINARY [WORKDIR]}
work=${2:-/tmp/zarrpipe-cpu-bound}
mkdir -p "$work"
cores=$(nproc)
summary=$work/summary.py
cat >"$summary" <<'EOF'
import json, sys
lines = [line for line in sys.stdin.read().splitlines() if line.startswith("{")]
d = json.loads(lines[-1]) if lines else None
if d is None:
    print("no JSON")
elif "chunks" in d:
    print(f"{d['decoded_gb_per_s']:.2f} GB/s decoded ({d['chunks']} {d['codec']} chunks, best pass {d['seconds']:.3f} s; "
          f"every pass together {d['passes_gb_per_s']:.2f})")
else:
    # Reads made on the decoding threads count as fetch time: both are the threads' work.
    busy = (d['decode_busy_s'] + d['fetch_busy_s']) / (d['cores'] * d['seconds'])
    print(f"{d['decoded_gb_per_s']:.2f} GB/s decoded, {d['epochs']} epochs in {d['seconds']:.3f} s; "
          f"reading and decoding {100 * busy:.0f}% of the cores' time")
EOF
declare -A gen=([w1]="--time 16" [w1-64]="--time 64" [w1-small]="--time 16 --chunks 320,640"
                [w1-blosc-lz4]="--time 16 --codec blosc-lz4")
datasets=${DATASETS:-"w1 w1-64 w1-small w1-blosc-lz4"}
# shellcheck disable=SC2086 # the generate options split on spaces
for ds in $datasets; do [ -e "$work/$ds/zarr.json" ] || "$zp" generate "$work/$ds" ${gen[$ds]} | tail -1; done
medians=$work/medians.py
cat >"$medians" <<'EOF'
import collections, re, statistics, sys
rows = collections.defaultdict(list)
for line in sys.stdin:
    m = re.match(r"round \d+ \| (\S+) \| (.+?) \| ([\d.]+) GB/s", line)
    if m:
        rows[(m[1], m[2])].append(float(m[3]))
bound_rows = (f"bound {sys.argv[1]} threads", f"bound {sys.argv[1]} threads, into place")
print("store | row | rounds | median | share of the bound's median (reused buffer, into place)")
for (store, row), values in rows.items():
    median = statistics.median(values)
    bounds = [rows.get((store, name)) for name in bound_rows]
    shares = ", ".join(f"{100 * median / statistics.median(b):.0f}%" if b else "-" for b in bounds)
    print(f"{store} | {row} | {' / '.join(f'{v:.2f}' for v in values)} | {median:.2f} | {shares}")
EOF
for round in 1 2 3; do
  for ds in $datasets; do
    echo "round $round | $ds | bound $cores threads | $("$zp" bound "$work/$ds" --threads "$cores" --passes 3 --json | python3 "$summary")"
    echo "round $round | $ds | bound $cores threads, into place | $("$zp" bound "$work/$ds" --threads "$cores" --passes 3 --into-place --json | python3 "$summary")"
    echo "round $round | $ds | host path (--device cpu) | $("$zp" bench "$work/$ds" --device cpu --epochs-in-a-row --passes 3 --json 2>/dev/null | python3 "$summary")"
    echo "round $round | $ds | CPU decode + GPU collate | $("$zp" bench "$work/$ds" --device cuda:0 --decode cpu --epochs-in-a-row --passes 3 --json 2>/dev/null | python3 "$summary")"
    [ -n "${BEFORE:-}" ] || continue
    echo "round $round | $ds | host path, before | $("$BEFORE" bench "$work/$ds" --device cpu --epochs-in-a-row --passes 3 --json 2>/dev/null | python3 "$summary")"
    echo "round $round | $ds | CPU decode + GPU collate, before | $("$BEFORE" bench "$work/$ds" --device cuda:0 --decode cpu --epochs-in-a-row --passes 3 --json 2>/dev/null | python3 "$summary")"
  done
done | tee "$work/rounds.txt"
echo
python3 "$medians" "$cores" < "$work/rounds.txt"
