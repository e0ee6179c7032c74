"""A CPU check of the `augspurger` peer's shard-index parsing, reads and tile assembly: its CPU
twin (`augspurger-cpu`, numcodecs' zstd in place of nvCOMP) must deliver, bit for bit, what
zarr-python reads from the same store. Run where there is no GPU:

    python3 benches/peers/check_tiles.py [ZARRPIPE_BINARY]

It writes small stores with `zarrpipe generate` (whole fields, tiles, tiles with partial edge
tiles, shards of one and of two time steps with tile-sized inner chunks), compares every sample,
then removes one chunk (a file, and an inner chunk from a shard's index) and checks that its tile
reads as NaN, as zarr-python reads the fill value. Needs zarr (3) and numcodecs."""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402

STORES = {
    "whole": [],
    "tiles": ["--chunks", "16,32"],
    "edges": ["--chunks", "24,40"],
    "sharded": ["--shard", "1", "--chunks", "16,32"],
    "sharded-edges": ["--shard", "2", "--chunks", "24,40"],
    "sharded-whole": ["--shard", "2"],
}


def delivered(path):
    store = peers.Store(path, 2)
    args = types.SimpleNamespace(threads=4)
    peer = peers.AugspurgerCpuPeer(store, peers.Device("cpu"), args)
    peer.open()
    try:
        return np.concatenate(list(peer.batches())), store
    finally:
        peer.close()


def expected(path, store):
    import zarr

    group = zarr.open_group(path, mode="r")
    parts = []
    for name in store.names:
        a = group[name][...]
        parts.append(a.reshape(a.shape[0], -1, store.lat, store.lon))
    return np.concatenate(parts, axis=1)


def same(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary", nargs="?", default="target/debug/zarrpipe")
    args = parser.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, options in STORES.items():
            path = os.path.join(tmp, name)
            subprocess.run(
                [args.binary, "generate", path, "--time", "3", "--levels", "3", "--lat", "64", "--lon", "128", *options],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            got, store = delivered(path)
            ok = same(got, expected(path, store)) and np.isfinite(got).all()
            # One chunk gone: its tile must read as NaN (zarr: the fill value).
            if "--shard" in options:
                shard = os.path.join(path, "z", "c", "0", "0", "0", "0")
                layout = next(la for la in peers.TilePlan(store).layouts if la["name"] == "z")
                raw = bytearray(open(shard, "rb").read())
                at = len(raw) - layout["index_bytes"] + 16 * 1  # inner chunk 1 of the index
                raw[at : at + 16] = b"\xff" * 16
                crc = __import__("numcodecs.checksum32", fromlist=["_"]).CRC32C()
                index = bytes(raw[len(raw) - layout["index_bytes"] : len(raw) - 4])
                raw[-4:] = np.frombuffer(crc.encode(index)[-4:], dtype="<u4").tobytes()
                open(shard, "wb").write(raw)
            else:
                gone = os.path.join(path, "z", "c", "1", "2", *(["0", "1"] if options else ["0", "0"]))
                os.remove(gone)
            got2, _ = delivered(path)
            ok2 = same(got2, expected(path, store)) and np.isnan(got2).any() and not np.isnan(got2).all()
            print(f"{name:14} {' '.join(options) or '(whole fields)':26} values {'ok' if ok else 'DIFFER'}, "
                  f"missing chunk {'ok' if ok2 else 'DIFFERS'}")
            failures += (not ok) + (not ok2)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
