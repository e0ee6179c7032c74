"""Tensorstore's whole-array read of a W1 store: the CPU peer of `zarrpipe run`.

Reads every data variable of the store whole, all reads issued at once so tensorstore
decodes on all cores, after one warm-up pass; prints the best pass as JSON (decoded GB/s).

    python3 benches/peers/tensorstore_w1.py PATH [--passes 2]
"""

import argparse
import importlib.metadata
import json
import os
import time

import numpy as np
import tensorstore as ts

VARIABLES = ["t2m", "u10", "v10", "msl", "z", "t", "u"]


def open_all(path):
    context = ts.Context({"cache_pool": {"total_bytes_limit": 0}})
    spec = lambda name: {"driver": "zarr3", "kvstore": {"driver": "file", "path": os.path.join(path, name)}}
    return [ts.open(spec(name), context=context, read=True).result() for name in VARIABLES]


def read_pass(arrays):
    started = time.perf_counter()
    futures = [array.read() for array in arrays]
    values = [future.result() for future in futures]
    seconds = time.perf_counter() - started
    decoded = sum(v.nbytes for v in values)
    checksum = float(sum(np.nansum(v, dtype=np.float64) for v in values))
    return seconds, decoded, checksum


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()
    arrays = open_all(args.path)
    read_pass(arrays)  # warm-up: page cache and tensorstore's own start-up
    passes = [read_pass(arrays) for _ in range(args.passes)]
    seconds, decoded, checksum = min(passes)
    print(json.dumps({
        "tool": f"tensorstore {importlib.metadata.version('tensorstore')} whole arrays",
        "seconds": seconds,
        "decoded_bytes": decoded,
        "gb_per_s": decoded / 1e9 / seconds,
        "checksum": checksum,
        "cores": os.cpu_count(),
    }))


if __name__ == "__main__":
    main()
