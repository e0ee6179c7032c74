"""A CPU check of the `augspurger` peer's shard-index parsing, reads and tile assembly: its CPU
twin (`augspurger-cpu`, numcodecs' zstd in place of nvCOMP) must deliver, bit for bit, what
zarr-python reads from the same store. Run where there is no GPU:

    python3 benches/peers/check_tiles.py [ZARRPIPE_BINARY]

It writes small stores with `zarrpipe generate` (whole fields, tiles, tiles with partial edge
tiles, shards of one and of two time steps with tile-sized inner chunks), compares every sample,
then removes one chunk (a file, and an inner chunk from a shard's index) and checks that its tile
reads as NaN, as zarr-python reads the fill value. The GPU peer itself (`augspurger`) runs too,
with its default streams, one stream and 64 (more than a batch has objects), on numpy stand-ins
for torch's CUDA calls and nvCOMP's bindings (numcodecs decoding each batch entry into the `out`
batch it is given; streams as queues of deferred work that run as late as the peer's waits and
synchronizations allow, or at random moments, so a missing one shows as wrong values): its
groups, offsets, double buffers, stream order, configs, decode calls and GPU-side tile assembly
are checked, not the real GPU calls. Needs zarr (3) and numcodecs."""

import argparse
import os
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
# The augspurger peer's streams (its default, one, more than a batch's objects), and how eagerly
# the stand-in streams run on their own (0: only when the peer's waits and syncs make them).
STREAMS = [(None, 0.0), (1, 0.5), (64, 0.9)]


# --- numpy stand-ins for the torch and nvCOMP calls of the augspurger peer -------------------
#
# CUDA streams are queues of deferred work: a stream's work runs when the host synchronizes on it
# (an event, nvCOMP building a config, a read of device memory), when a stream that waits for it
# needs it, or at random moments that its waits allow (as a GPU may run it). A missing wait or
# synchronization in the peer then shows as wrong values here too.

GPU = None  # the FakeGpu of the running check


class FakeGpu:
    def __init__(self, seed, progress):
        self.rng, self.progress = np.random.default_rng(seed), progress
        self.streams = []
        self.main = FakeStream(self)
        self.current = self.main

    def enqueue(self, work, stream=None):
        (stream or self.current).ops.append(work)
        while self.rng.random() < self.progress:  # some ready work runs now, in a random order
            ready = [s for s in self.streams if s.ready()]
            if not ready:
                break
            ready[self.rng.integers(len(ready))].run_one()

    def flush(self):
        """The current stream's work so far done: before the host reads what it wrote."""
        self.current.run_until(len(self.current.ops))


class FakeStream:
    def __init__(self, gpu):
        self.ops, self.done = [], 0  # ops: callables, or ("wait", stream, its ops to be done)
        gpu.streams.append(self)
        self.cuda_stream = len(gpu.streams)  # a handle, as torch's

    def wait_stream(self, other):
        GPU.enqueue(("wait", other, len(other.ops)), self)

    def ready(self):
        if self.done == len(self.ops):
            return False
        op = self.ops[self.done]
        return callable(op) or op[1].done >= op[2]

    def run_one(self):
        op = self.ops[self.done]
        if callable(op):
            op()
        else:
            op[1].run_until(op[2])
        self.done += 1

    def run_until(self, n):
        while self.done < n:
            self.run_one()


class FakeEvent:
    def record(self, stream):
        self.stream, self.mark = stream, len(stream.ops)

    def synchronize(self):
        self.stream.run_until(self.mark)


class _StreamContext:
    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        self.saved, GPU.current = GPU.current, self.stream
        return self

    def __exit__(self, *exc):
        GPU.current = self.saved
        return False


class FakeTensor:
    """The torch.Tensor calls the augspurger peer makes, on a numpy array (views stay views);
    writes are work on the current stream, reads that copy wait for it."""

    def __init__(self, a):
        self.a = a

    shape = property(lambda self: self.a.shape)

    def __getitem__(self, index):
        if isinstance(index, FakeTensor):  # a gather reads the values
            GPU.flush()
            return FakeTensor(self.a[index.a])
        return FakeTensor(self.a[index])

    def __setitem__(self, index, value):
        a, v = self.a, value.a if isinstance(value, FakeTensor) else value
        GPU.enqueue(lambda: a.__setitem__(index, v))

    def view(self, *args):
        if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], np.generic):
            return FakeTensor(self.a.view(args[0]))
        assert self.a.flags.c_contiguous
        return FakeTensor(self.a.reshape(args))

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        out = self.a.reshape(shape)
        if not np.may_share_memory(out, self.a):  # a copy reads the values
            GPU.flush()
            out = self.a.reshape(shape)
        return FakeTensor(out)

    def permute(self, *axes):
        return FakeTensor(self.a.transpose(axes))

    def copy_(self, other, non_blocking=False):
        assert non_blocking
        a, b = self.a, other.a
        GPU.enqueue(lambda: a.__setitem__(Ellipsis, b))

    def fill_(self, value):
        a = self.a
        GPU.enqueue(lambda: a.fill(value))

    def numel(self):
        return self.a.size

    def numpy(self):
        return self.a


def fake_torch(seed, progress):
    global GPU
    GPU = FakeGpu(seed, progress)
    cuda = types.SimpleNamespace(
        Stream=lambda device=None: FakeStream(GPU),
        Event=FakeEvent,
        stream=_StreamContext,
        current_stream=lambda device=None: GPU.main,
    )

    def empty(*shape, dtype=np.float32, device=None, pin_memory=False):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        a = np.empty(shape, dtype=dtype)
        if not pin_memory:
            a.view(np.uint8).fill(0xA5)  # device memory as left by someone else: never a value read
        return FakeTensor(a)

    def equal(a, b):
        GPU.flush()
        return np.array_equal(a.a, b.a)

    return types.SimpleNamespace(
        uint8=np.uint8,
        float32=np.float32,
        cuda=cuda,
        empty=empty,
        tensor=lambda values, device=None: FakeTensor(np.asarray(values)),
        equal=equal,
    )


class FakeNvcomp:
    """nvidia.nvcomp's as_arrays (one buffer carved by offsets) and Codec.decode (batched, into
    `out`, work on the codec's stream), with numcodecs' zstd; counts the configs built and used
    and the chunks of each decode call."""

    class BitstreamKind:
        RAW = "raw"

    def __init__(self):
        from numcodecs.zstd import Zstd

        self.zstd, self.configs_built, self.decodes_with_config, self.calls = Zstd(), 0, 0, []
        outer = self

        class Codec:
            def __init__(self, **kwargs):
                assert kwargs["algorithm"] == "Zstd"
                handle = kwargs.get("cuda_stream")
                self.stream = GPU.main if handle is None else GPU.streams[handle - 1]

            def get_required_decompression_alignment(self):
                return 8

            def decompression_config(self, comp):
                self.stream.run_until(len(self.stream.ops))  # building one synchronizes the stream
                outer.configs_built += 1
                return ("config", len(comp))

            def decode(self, comp, out=None, decompression_config=None):
                assert out is not None and len(out) == len(comp)
                if decompression_config is not None:
                    assert decompression_config == ("config", len(comp))
                    outer.decodes_with_config += 1
                outer.calls.append(len(comp))
                for src, dst in zip(comp, out):
                    assert src.ctypes.data % 8 == 0 and dst.ctypes.data % 8 == 0, "unaligned buffer"

                def work():
                    for src, dst in zip(comp, out):
                        decoded = outer.zstd.decode(src.tobytes())
                        assert len(decoded) == dst.size, (len(decoded), dst.size)
                        dst[...] = np.frombuffer(decoded, dtype=np.uint8)

                GPU.enqueue(work, self.stream)

        self.Codec = Codec

    @staticmethod
    def as_arrays(buffer, offsets, sizes, cuda_stream=0):
        flat = buffer.a.reshape(-1).view(np.uint8)
        return [flat[o : o + n] for o, n in zip(offsets, sizes)]


def delivered_gpu_stand_in(path, streams=None, seed=0, progress=0.5):
    """The augspurger GPU peer's batches, on the stand-ins, with `streams` CUDA streams (None: the
    peer's default, as the harness's namespace has no such option); `progress`: how eagerly the
    streams run on their own (0: only when made to)."""
    store = peers.Store(path, 2)
    torch = fake_torch(seed, progress)
    device = types.SimpleNamespace(
        torch=torch,
        device=types.SimpleNamespace(index=0),
        empty=lambda shape: torch.empty(shape, dtype=np.float32, device="cuda"),
    )
    nvcomp = FakeNvcomp()
    nvidia = types.ModuleType("nvidia")
    nvidia.nvcomp = nvcomp
    saved = {name: sys.modules.get(name) for name in ("nvidia", "nvidia.nvcomp")}
    sys.modules["nvidia"], sys.modules["nvidia.nvcomp"] = nvidia, nvcomp
    load = peers.load_libnvcomp
    peers.load_libnvcomp = lambda: "stand-in"
    args = types.SimpleNamespace(threads=4)
    if streams is not None:
        args.augspurger_streams = streams

    def epoch(peer):
        got = []
        for batch in peer.batches():  # the consumer's work: on the main stream, no host sync
            GPU.enqueue(lambda a=batch.a: got.append(a.copy()), GPU.main)
        for stream in GPU.streams:
            stream.run_until(len(stream.ops))
        return np.concatenate(got)

    try:
        peer = peers.AugspurgerPeer(store, device, args)
        peer.open()
        passes = [epoch(peer) for _ in range(3)]  # the third without configs built or checked
        peer.close()
    finally:
        peers.load_libnvcomp = load
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    assert same(passes[0], passes[1]) and same(passes[0], passes[2]), "a later pass differs"
    # one config per stream and batch shape (a missing chunk makes another shape), built in the
    # first pass only, and used
    assert nvcomp.configs_built == len(peer.configs) and not peer.notes[2:], (nvcomp.configs_built, peer.notes)
    assert nvcomp.decodes_with_config > 0
    # One decode call per group of the batch: the first batch's present chunks in at most S calls,
    # so one call holds at least its share; with one stream, more than a sample's chunks.
    plan, s = peers.TilePlan(store), peer.n_streams
    t0, t1 = store.batches[0]
    present = sum(off is not None for t in range(t0, t1) for _p, _s, e in plan.objects(t) for _pl, off, _n in e)
    assert max(nvcomp.calls) >= -(-present // s), (max(nvcomp.calls), present, s)
    if s == 1 and t1 - t0 > 1:
        assert max(nvcomp.calls) > store.channels * plan.gi * plan.gj, (max(nvcomp.calls), present)
    return passes[2]


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
                [args.binary, "generate", path, "--time", "5", "--levels", "3", "--lat", "64", "--lon", "128", *options],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            got, store = delivered(path)
            want = expected(path, store)
            ok = same(got, want) and np.isfinite(got).all()
            gpu_ok = all(same(delivered_gpu_stand_in(path, n, seed, p), want) for seed, (n, p) in enumerate(STREAMS))
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
            gpu_ok2 = all(same(delivered_gpu_stand_in(path, n, seed, p), want2) for seed, (n, p) in enumerate(STREAMS))
            print(f"{name:14} {' '.join(options) or '(whole fields)':26} values: cpu twin {'ok' if ok else 'DIFFER'}, "
                  f"gpu peer on stand-ins {'ok' if gpu_ok else 'DIFFER'}; missing chunk: "
                  f"{'ok' if ok2 else 'DIFFERS'}, {'ok' if gpu_ok2 else 'DIFFERS'}")
            failures += (not ok) + (not ok2) + (not gpu_ok) + (not gpu_ok2)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
