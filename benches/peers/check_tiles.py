"""A CPU check of the `augspurger` peer's shard-index parsing, reads and tile assembly: its CPU
twin (`augspurger-cpu`, numcodecs' zstd in place of nvCOMP) must deliver, bit for bit, what
zarr-python reads from the same store. Run where there is no GPU:

    python3 benches/peers/check_tiles.py [ZARRPIPE_BINARY]

It writes small stores with `zarrpipe generate` (whole fields, tiles, tiles with partial edge
tiles, shards of one and of two time steps with tile-sized inner chunks), compares every sample,
then removes one chunk (a file, and an inner chunk from a shard's index) and checks that its tile
reads as NaN, as zarr-python reads the fill value. The GPU peer itself (`augspurger`) runs too,
on numpy stand-ins for torch's CUDA calls and nvCOMP's bindings (numcodecs decoding each batch
entry into the `out` batch it is given): its offsets, slots, configs and GPU-side tile assembly
are checked, not the real GPU calls. Needs zarr (3) and numcodecs."""

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


# --- numpy stand-ins for the torch and nvCOMP calls of the augspurger peer -------------------


class FakeTensor:
    """The torch.Tensor calls the augspurger peer makes, on a numpy array (views stay views)."""

    def __init__(self, a):
        self.a = a

    shape = property(lambda self: self.a.shape)

    def __getitem__(self, index):
        return FakeTensor(self.a[index.a if isinstance(index, FakeTensor) else index])

    def __setitem__(self, index, value):
        self.a[index] = value.a if isinstance(value, FakeTensor) else value

    def view(self, *args):
        if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], np.generic):
            return FakeTensor(self.a.view(args[0]))
        assert self.a.flags.c_contiguous
        return FakeTensor(self.a.reshape(args))

    def reshape(self, *shape):
        return FakeTensor(self.a.reshape(shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape))

    def permute(self, *axes):
        return FakeTensor(self.a.transpose(axes))

    def copy_(self, other, non_blocking=False):
        self.a[...] = other.a

    def fill_(self, value):
        self.a.fill(value)

    def numel(self):
        return self.a.size

    def numpy(self):
        return self.a


class FakeStream:
    cuda_stream = 0

    def wait_stream(self, other):
        pass


class FakeEvent:
    def record(self, stream):
        pass

    def synchronize(self):
        pass


class _Context:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def fake_torch():
    cuda = types.SimpleNamespace(
        Stream=lambda device=None: FakeStream(),
        Event=FakeEvent,
        stream=lambda s: _Context(),
        current_stream=lambda device=None: FakeStream(),
    )

    def empty(*shape, dtype=np.float32, device=None, pin_memory=False):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        return FakeTensor(np.empty(shape, dtype=dtype))

    return types.SimpleNamespace(
        uint8=np.uint8,
        float32=np.float32,
        cuda=cuda,
        empty=empty,
        tensor=lambda values, device=None: FakeTensor(np.asarray(values)),
        equal=lambda a, b: np.array_equal(a.a, b.a),
    )


class FakeNvcomp:
    """nvidia.nvcomp's as_arrays (one buffer carved by offsets) and Codec.decode (batched, into
    `out`), with numcodecs' zstd; counts the configs built and used."""

    class BitstreamKind:
        RAW = "raw"

    def __init__(self):
        from numcodecs.zstd import Zstd

        self.zstd, self.configs_built, self.decodes_with_config = Zstd(), 0, 0
        outer = self

        class Codec:
            def __init__(self, **kwargs):
                assert kwargs["algorithm"] == "Zstd"

            def get_required_decompression_alignment(self):
                return 8

            def decompression_config(self, comp):
                outer.configs_built += 1
                return ("config", len(comp))

            def decode(self, comp, out=None, decompression_config=None):
                assert out is not None and len(out) == len(comp)
                if decompression_config is not None:
                    assert decompression_config == ("config", len(comp))
                    outer.decodes_with_config += 1
                for src, dst in zip(comp, out):
                    assert src.ctypes.data % 8 == 0 and dst.ctypes.data % 8 == 0, "unaligned buffer"
                    decoded = outer.zstd.decode(src.tobytes())
                    assert len(decoded) == dst.size, (len(decoded), dst.size)
                    dst[...] = np.frombuffer(decoded, dtype=np.uint8)

        self.Codec = Codec

    @staticmethod
    def as_arrays(buffer, offsets, sizes, cuda_stream=0):
        flat = buffer.a.reshape(-1).view(np.uint8)
        return [flat[o : o + n] for o, n in zip(offsets, sizes)]


def delivered_gpu_stand_in(path):
    """The augspurger GPU peer's batches, on the stand-ins."""
    store = peers.Store(path, 2)
    torch = fake_torch()
    device = types.SimpleNamespace(
        torch=torch,
        device=types.SimpleNamespace(index=0),
        empty=lambda shape: torch.empty(shape, dtype=np.float32),
    )
    nvcomp = FakeNvcomp()
    nvidia = types.ModuleType("nvidia")
    nvidia.nvcomp = nvcomp
    saved = {name: sys.modules.get(name) for name in ("nvidia", "nvidia.nvcomp")}
    sys.modules["nvidia"], sys.modules["nvidia.nvcomp"] = nvidia, nvcomp
    load = peers.load_libnvcomp
    peers.load_libnvcomp = lambda: "stand-in"
    try:
        peer = peers.AugspurgerPeer(store, device, types.SimpleNamespace(threads=4))
        peer.open()
        passes = [np.concatenate([b.a.copy() for b in peer.batches()]) for _ in range(2)]
        peer.close()
    finally:
        peers.load_libnvcomp = load
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    assert same(passes[0], passes[1]), "the second pass differs"
    # one config per stream and batch shape (a missing chunk makes another shape)
    assert nvcomp.configs_built >= len(peer.streams) and not peer.notes[2:], (nvcomp.configs_built, peer.notes)
    assert nvcomp.decodes_with_config > 0
    return passes[1]


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
            want = expected(path, store)
            ok = same(got, want) and np.isfinite(got).all()
            gpu_ok = same(delivered_gpu_stand_in(path), want)
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
            want2 = expected(path, store)
            ok2 = same(got2, want2) and np.isnan(got2).any() and not np.isnan(got2).all()
            gpu_ok2 = same(delivered_gpu_stand_in(path), want2)
            print(f"{name:14} {' '.join(options) or '(whole fields)':26} values: cpu twin {'ok' if ok else 'DIFFER'}, "
                  f"gpu peer on stand-ins {'ok' if gpu_ok else 'DIFFER'}; missing chunk: "
                  f"{'ok' if ok2 else 'DIFFERS'}, {'ok' if gpu_ok2 else 'DIFFERS'}")
            failures += (not ok) + (not ok2) + (not gpu_ok) + (not gpu_ok2)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
