"""The peers of zarrpipe on a W1 store: every tool delivers the same samples to the same device.

A sample is every field of W1 at one time step, stacked as channels in the order
t2m, u10, v10, msl, z[13 levels], t[13 levels], u[13 levels]: `[43, lat, lon]` float32. Batches hold
4 consecutive samples (the last one may be shorter), in time order, as `zarrpipe run` delivers
them. A GPU device means the batch is a torch CUDA tensor when the peer hands it over; `cpu`
means host memory. Each peer runs one warm-up pass, during which the checksum is taken (the sum
of every delivered value in float64, NaN skipped, as `zarrpipe run --checksum`), then `--passes`
timed passes; the best is reported. Decoded GB/s = decoded bytes delivered / seconds.

    python3 benches/peers/peers.py STORE [--device cuda:0|cpu] [--peers LIST] [--passes 2] [--augspurger-streams 1]

Peers (ids for --peers; default: all):
  zarr                 zarr-python 3, CPU decode, assembled on the host, then copied to the device
  zarr-gpu             zarr-python 3 with zarr.config.enable_gpu() (cupy buffers), assembled on the GPU
  zarrs                zarr-python with zarrs-python's codec pipeline (zarrs.ZarrsCodecPipeline)
  tensorstore-sample   tensorstore zarr3, one sample at a time (the sample's 7 reads issued together)
  tensorstore-whole    tensorstore zarr3, every array read whole at once, then cut into batches
  xbatcher             xarray (dask) + xbatcher + torch DataLoader, worker processes, pinned memory
  nvcomp               chunk files read here, zstd decoded by nvCOMP's Python bindings on the GPU,
                       one sample (43 chunks, one batched call) at a time
  augspurger           Tom Augspurger's GPU Zarr pipeline, per batch: stored bytes read with readinto
                       (preadv) into preallocated pinned buffers, nvCOMP batched zstd into
                       preallocated device memory, tiles cut into the batch on the GPU. The post's
                       one CUDA stream per shard is adapted: the batch's shards or chunk files are
                       grouped onto --augspurger-streams streams (and nvCOMP codecs) so that each
                       nvCOMP call decodes many chunks (one call per chunk file or small shard left
                       the GPU idle: 0.10 GB/s on an H100 host, 2026-11-24); all else as in the post
  chunks-cpu           the nvcomp peer's chunk reader with numcodecs' zstd on the CPU: a check of
                       that reader where there is no GPU (not in the default list)
  augspurger-cpu       the augspurger peer's plan, reads and tile assembly with numcodecs' zstd on
                       the CPU (not in the default list)

Every peer runs in its own process (a crash or a hang becomes a `skipped` line, not the end of
the run). Output: one JSON object per peer on stdout (keys: tool, peer, dataset, device,
seconds, samples, decoded_bytes, gb_per_s, samples_per_s, checksum, versions, ...), or with a
`skipped` reason. Progress goes to stderr. Runs on Python 3.11 and 3.12; packages that are
missing make their peers skip.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import ctypes
import importlib.metadata
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SURFACE = ["t2m", "u10", "v10", "msl"]
LEVEL = ["z", "t", "u"]
DEFAULT_PEERS = [
    "zarrpipe-python", "zarr", "zarr-gpu", "zarrs", "tensorstore-sample", "tensorstore-whole", "xbatcher", "nvcomp",
    "augspurger",
]
ALL_PEERS = DEFAULT_PEERS + ["chunks-cpu", "augspurger-cpu"]
NO_CHUNK = 2**64 - 1  # sharding_indexed's marker of an absent inner chunk


class Skip(Exception):
    """A peer cannot run here (a package, the GPU or a codec is missing): said, not raised further."""


def log(message):
    print(message, file=sys.stderr, flush=True)


def version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def need(module, dist=None):
    """Import a module or skip the peer, naming the package to install."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as err:
        raise Skip(f"{dist or module} is not installed ({err})") from None


# --- The store: W1's layout read from its zarr.json files -------------------------------------


class Store:
    """A W1 store: variables in W1's channel order, their metadata, and the epoch's batches."""

    def __init__(self, path, batch_size):
        self.path = os.path.abspath(path)
        root = os.path.join(self.path, "zarr.json")
        if not os.path.exists(root):
            raise SystemExit(f"{path}: no zarr.json (a Zarr v3 store written by `zarrpipe generate` is expected)")
        self.variables = []  # (name, metadata, channels)
        for name in SURFACE + LEVEL:
            meta_path = os.path.join(self.path, name, "zarr.json")
            if not os.path.exists(meta_path):
                continue
            with open(meta_path) as f:
                meta = json.load(f)
            channels = 1 if len(meta["shape"]) == 3 else meta["shape"][1]
            self.variables.append((name, meta, channels))
        if not self.variables:
            raise SystemExit(f"{path}: none of the W1 variables {SURFACE + LEVEL}")
        shapes = {tuple(m["shape"][:1] + m["shape"][-2:]) for _, m, _ in self.variables}
        if len(shapes) != 1:
            raise SystemExit(f"{path}: variables disagree on (time, lat, lon): {shapes}")
        self.time, self.lat, self.lon = shapes.pop()
        self.channels = sum(c for _, _, c in self.variables)
        self.names = [n for n, _, _ in self.variables]
        self.batches = [(t0, min(t0 + batch_size, self.time)) for t0 in range(0, self.time, batch_size)]
        self.sample_bytes = self.channels * self.lat * self.lon * 4
        self.codec = describe_codecs(self.variables[0][1]["codecs"])

    def offsets(self):
        """(name, first channel, channels) of each variable."""
        c = 0
        for name, _, n in self.variables:
            yield name, c, n
            c += n


def describe_codecs(codecs):
    parts = []
    for codec in codecs:
        name, conf = codec["name"], codec.get("configuration", {})
        if name == "sharding_indexed":
            inner = describe_codecs(conf["codecs"])
            return f"sharded ({inner}, inner chunk {conf['chunk_shape']})"
        if name == "bytes":
            continue
        if name == "blosc":
            parts.append(f"blosc-{conf.get('cname')} ({conf.get('shuffle')})")
        elif name == "zstd":
            parts.append(f"zstd {conf.get('level', '')}".strip())
        else:
            parts.append(name)
    return " + ".join(parts) or "uncompressed"


# --- The device: where batches are delivered, and the checksum --------------------------------


class Device:
    def __init__(self, spec):
        self.spec = spec
        self.is_cuda = spec.startswith("cuda")
        self.torch = None
        try:
            import torch

            self.torch = torch
        except ImportError:
            if self.is_cuda:
                raise Skip("torch is not installed: no way to deliver to a GPU") from None
        if self.is_cuda:
            if not self.torch.cuda.is_available():
                raise Skip(f"no CUDA device visible to torch {self.torch.__version__}")
            self.device = self.torch.device(spec)
            self.torch.cuda.set_device(self.device)
            self.name = self.torch.cuda.get_device_name(self.device)
        else:
            self.device = None
            self.name = platform.processor() or platform.machine()

    def from_host(self, array):
        """A collated host batch to the device: a pageable copy for a GPU, as is for the CPU."""
        if not self.is_cuda:
            return array
        return self.torch.from_numpy(array).to(self.device)

    def empty(self, shape):
        return self.torch.empty(shape, dtype=self.torch.float32, device=self.device)

    def sync(self):
        if self.is_cuda:
            self.torch.cuda.synchronize(self.device)

    def checksum(self, batch):
        if isinstance(batch, np.ndarray):
            return float(np.nansum(batch, dtype=np.float64))
        return float(self.torch.nansum(batch, dtype=self.torch.float64).item())


# --- The peers ---------------------------------------------------------------------------------


class Peer:
    id = ""
    gpu_only = False
    packages = []  # distributions whose versions the result names

    def __init__(self, store, device, args):
        self.store, self.device, self.args = store, device, args
        self.notes = []

    @property
    def label(self):
        return self.id

    def open(self):
        pass

    def batches(self):
        """One epoch: yields delivered batches ([n, C, lat, lon] on the device)."""
        raise NotImplementedError

    def close(self):
        pass

    def assemble(self, parts, n):
        """Host arrays of each variable for n time steps -> one collated [n, C, lat, lon] batch."""
        s = self.store
        out = np.empty((n, s.channels, s.lat, s.lon), dtype=np.float32)
        for (_name, c, k), part in zip(s.offsets(), parts):
            out[:, c : c + k] = np.asarray(part).reshape(n, k, s.lat, s.lon)
        return out


class ZarrPeer(Peer):
    id = "zarr"
    packages = ["zarr", "numcodecs"]
    pipeline = None  # codec_pipeline.path, or zarr's default

    @property
    def label(self):
        return f"zarr-python {version('zarr')} (CPU decode, then copy)"

    def open(self):
        self.zarr = need("zarr")
        if not self.zarr.__version__.startswith("3"):
            raise Skip(f"zarr {self.zarr.__version__} is not zarr-python 3")
        if self.pipeline:
            self._config = self.zarr.config.set({"codec_pipeline.path": self.pipeline})
        group = self.zarr.open_group(self.store.path, mode="r")
        self.arrays = [group[name] for name in self.store.names]

    def batches(self):
        for t0, t1 in self.store.batches:
            parts = [a[t0:t1] for a in self.arrays]
            yield self.device.from_host(self.assemble(parts, t1 - t0))


class ZarrsPeer(ZarrPeer):
    id = "zarrs"
    packages = ["zarrs", "zarr", "numcodecs"]
    pipeline = "zarrs.ZarrsCodecPipeline"

    @property
    def label(self):
        return f"zarrs-python {version('zarrs')} codec pipeline (zarr {version('zarr')}), then copy"

    def open(self):
        need("zarrs")
        super().open()
        self.notes.append(f"codec_pipeline.path = {self.zarr.config.get('codec_pipeline.path')}")


class ZarrGpuPeer(ZarrPeer):
    id = "zarr-gpu"
    gpu_only = True
    packages = ["zarr", "numcodecs", "cupy-cuda13x", "cupy-cuda12x", "cupy"]

    gpu_codec = None  # known once opened

    @property
    def label(self):
        if self.gpu_codec is None:
            return f"zarr-python {version('zarr')} enable_gpu()"
        where = "nvCOMP zstd" if self.gpu_codec else "CPU zstd"
        return f"zarr-python {version('zarr')} enable_gpu() (cupy buffers, {where})"

    def open(self):
        need("cupy", "cupy-cuda13x")
        zarr = need("zarr")
        self._gpu = zarr.config.enable_gpu()  # stays set for this process (one peer per process)
        zstd_impl = zarr.config.get("codecs.zstd")
        self.gpu_codec = "gpu" in zstd_impl.lower() or "nvcomp" in zstd_impl.lower()
        self.notes.append(f"codecs.zstd = {zstd_impl}; buffer = {zarr.config.get('buffer')}")
        if not self.gpu_codec:
            self.notes.append(
                f"zarr {zarr.__version__} has no GPU zstd codec: chunks are decoded on the CPU and "
                "copied into GPU buffers"
            )
        super().open()

    def batches(self):
        torch, s = self.device.torch, self.store
        for t0, t1 in s.batches:
            n = t1 - t0
            out = self.device.empty((n, s.channels, s.lat, s.lon))
            for (_name, c, k), a in zip(s.offsets(), self.arrays):
                part = a[t0:t1]  # a cupy array
                out[:, c : c + k] = torch.as_tensor(part, device=self.device.device).reshape(n, k, s.lat, s.lon)
            yield out

    def close(self):
        self._gpu.__exit__(None, None, None)


class TensorstorePeer(Peer):
    packages = ["tensorstore"]
    whole = False

    @property
    def id(self):
        return "tensorstore-whole" if self.whole else "tensorstore-sample"

    @property
    def label(self):
        how = "whole arrays" if self.whole else "one sample at a time"
        return f"tensorstore {version('tensorstore')} zarr3, {how}"

    def open(self):
        need("tensorstore")
        sys.path.insert(0, HERE)
        from tensorstore_w1 import open_all  # the CPU comparison's opening: no cache pool

        import tensorstore_w1

        tensorstore_w1.VARIABLES = self.store.names
        self.arrays = open_all(self.store.path)

    def batches(self):
        s = self.store
        if self.whole:
            futures = [a.read() for a in self.arrays]
            values = [f.result() for f in futures]
            for t0, t1 in s.batches:
                yield self.device.from_host(self.assemble([v[t0:t1] for v in values], t1 - t0))
            return
        for t0, t1 in s.batches:
            out = np.empty((t1 - t0, s.channels, s.lat, s.lon), dtype=np.float32)
            for t in range(t0, t1):
                futures = [a[t].read() for a in self.arrays]
                for (_name, c, k), f in zip(s.offsets(), futures):
                    out[t - t0, c : c + k] = f.result().reshape(k, s.lat, s.lon)
            yield self.device.from_host(out)


class TensorstoreWholePeer(TensorstorePeer):
    whole = True


def _sample_tensor(batch):
    """xbatcher's item [time=1, C, lat, lon] -> the sample tensor [C, lat, lon] (no copy)."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(batch.data[0]))


class XbatcherPeer(Peer):
    id = "xbatcher"
    packages = ["xarray", "xbatcher", "dask", "zarr"]

    @property
    def label(self):
        pin = ", pinned memory" if self.device.is_cuda else ""
        return (
            f"xarray {version('xarray')} + xbatcher {version('xbatcher')} + torch DataLoader, "
            f"{self.args.workers} workers{pin}"
        )

    def open(self):
        xr = need("xarray")
        xbatcher = need("xbatcher")
        need("dask")
        torch = need("torch")
        from xbatcher.loaders.torch import MapDataset

        s = self.store
        ds = xr.open_zarr(s.path, consolidated=False, chunks={})  # dask arrays, one chunk per field
        parts = []
        for name in s.names:
            var = ds[name]
            if "level" in var.dims:
                var = var.drop_vars("level").rename({"level": "channel"})
            else:
                var = var.expand_dims("channel", axis=1)
            parts.append(var)
        stacked = xr.concat(parts, dim="channel", coords="minimal", compat="override", join="override")
        stacked = stacked.transpose("time", "channel", "latitude", "longitude")
        generator = xbatcher.BatchGenerator(
            stacked, input_dims={"time": 1, "channel": s.channels, "latitude": s.lat, "longitude": s.lon}
        )
        if len(generator) != s.time:
            raise Skip(f"xbatcher made {len(generator)} samples of {s.time} time steps")
        workers = self.args.workers
        self.loader = torch.utils.data.DataLoader(
            MapDataset(generator, transform=_sample_tensor),
            batch_size=self.args.batch_size,
            shuffle=False,
            num_workers=workers,
            pin_memory=self.device.is_cuda,
            persistent_workers=workers > 0,
            prefetch_factor=2 if workers > 0 else None,
        )
        self.notes.append(
            f"{workers} worker processes ({torch.multiprocessing.get_start_method()}), dask default scheduler in each"
        )

    def batches(self):
        for batch in self.loader:
            if self.device.is_cuda:
                batch = batch.to(self.device.device, non_blocking=True)
            yield batch


class ChunkReader:
    """Where each channel of a sample lies: plain chunk files, or inner chunks of shards (the
    shard index is read once per shard per pass). Only W1's layout: one chunk = one field, zstd."""

    def __init__(self, store, threads):
        self.store = store
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads)
        self.layouts = []
        field = [store.lat, store.lon]
        for name, meta, _k in store.variables:
            codecs = meta["codecs"]
            sharded = codecs[0]["name"] == "sharding_indexed"
            conf = codecs[0]["configuration"] if sharded else None
            chunk = conf["chunk_shape"] if sharded else meta["chunk_grid"]["configuration"]["chunk_shape"]
            inner = conf["codecs"] if sharded else codecs
            if chunk[-2:] != field or any(n != 1 for n in chunk[:-2]):
                raise Skip(f"{name}: chunks {chunk} are not one whole field each")
            names = [c["name"] for c in inner]
            if names != ["bytes", "zstd"] or inner[0].get("configuration", {}).get("endian", "little") != "little":
                raise Skip(f"{name}: codecs {names}: this reader handles bytes + zstd chunks only")
            enc = meta.get("chunk_key_encoding", {"name": "default"})
            sep = enc.get("configuration", {}).get("separator", "/")
            prefix = ["c"] if enc["name"] == "default" else []
            layout = {"name": name, "sep": sep, "prefix": prefix, "sharded": sharded, "ndim": len(meta["shape"])}
            if sharded:
                shard = meta["chunk_grid"]["configuration"]["chunk_shape"]
                layout["shard"] = shard
                layout["inner_grid"] = [a // b for a, b in zip(shard, chunk)]
                layout["index_at_end"] = conf.get("index_location", "end") == "end"
                index_codecs = [c["name"] for c in conf.get("index_codecs", [])]
                layout["index_bytes"] = math.prod(layout["inner_grid"]) * 16 + (4 if "crc32c" in index_codecs else 0)
            self.layouts.append(layout)
        self.indexes = {}

    def start_pass(self):
        self.indexes = {}

    def _key(self, layout, coords):
        parts = layout["prefix"] + [str(c) for c in coords]
        return os.path.join(self.store.path, layout["name"], layout["sep"].join(parts))

    def _index(self, path, layout):
        index = self.indexes.get(path)
        if index is None:
            try:
                size = os.path.getsize(path)
            except FileNotFoundError:
                index = np.full((math.prod(layout["inner_grid"]), 2), NO_CHUNK, dtype=np.uint64)
            else:
                with open(path, "rb") as f:
                    f.seek(size - layout["index_bytes"] if layout["index_at_end"] else 0)
                    raw = f.read(layout["index_bytes"])
                index = np.frombuffer(raw[: math.prod(layout["inner_grid"]) * 16], dtype="<u8").reshape(-1, 2)
            self.indexes[path] = index
        return index

    def locations(self, t):
        """(path, offset, nbytes) of each channel of sample t, None where the chunk is absent."""
        out = []
        for layout, (_, _, k) in zip(self.layouts, self.store.variables):
            for level in range(k):
                coords = [t, level, 0, 0] if layout["ndim"] == 4 else [t, 0, 0]
                if not layout["sharded"]:
                    path = self._key(layout, coords)
                    try:
                        out.append((path, 0, os.path.getsize(path)))
                    except FileNotFoundError:
                        out.append(None)
                    continue
                shard = layout["shard"]
                path = self._key(layout, [c // s for c, s in zip(coords, shard)])
                inner = np.ravel_multi_index([c % s for c, s in zip(coords, shard)], layout["inner_grid"])
                offset, nbytes = (int(x) for x in self._index(path, layout)[inner])
                out.append(None if offset == NO_CHUNK else (path, offset, nbytes))
        return out

    def read_into(self, buffer, places):
        """Read every (path, offset, nbytes) into buffer (a writable uint8 numpy array) at its
        destination offset, in parallel threads."""

        def read(job):
            (path, offset, nbytes), dest = job
            with open(path, "rb", buffering=0) as f:
                f.seek(offset)
                view = memoryview(buffer)[dest : dest + nbytes]
                done = 0
                while done < nbytes:
                    got = f.readinto(view[done:])
                    if not got:
                        raise OSError(f"{path}: {nbytes - done} bytes short at offset {offset + done}")
                    done += got

        list(self.pool.map(read, places))


def _layout(locations, align):
    """Aligned offsets of the present chunks in one staging buffer, and its total size."""
    offsets, total = [], 0
    for loc in locations:
        offsets.append(total)
        if loc is not None:
            total += (loc[2] + align - 1) // align * align
    return offsets, total


class ChunksCpuPeer(Peer):
    id = "chunks-cpu"
    packages = ["numcodecs"]

    @property
    def label(self):
        return f"chunk files + numcodecs {version('numcodecs')} zstd (CPU twin of the nvCOMP peer)"

    def open(self):
        zstd = need("numcodecs.zstd", "numcodecs")
        self.codec = zstd.Zstd()
        self.reader = ChunkReader(self.store, self.args.threads)

    def batches(self):
        s = self.store
        self.reader.start_pass()
        for t0, t1 in s.batches:
            out = np.empty((t1 - t0, s.channels, s.lat, s.lon), dtype=np.float32)
            for t in range(t0, t1):
                locs = self.reader.locations(t)
                offsets, total = _layout(locs, 16)
                staging = np.empty(total, dtype=np.uint8)
                self.reader.read_into(staging, [(loc, o) for loc, o in zip(locs, offsets) if loc is not None])
                for c, (loc, o) in enumerate(zip(locs, offsets)):
                    if loc is None:
                        out[t - t0, c] = np.nan
                    else:
                        self.codec.decode(staging[o : o + loc[2]], out=out[t - t0, c])
            yield self.device.from_host(out)


def load_libnvcomp():
    """Make libnvcomp.so.6 loadable for nvCOMP's bindings: the nvidia-libnvcomp-cu13 wheel if
    installed, else $NVCOMP_LIB or the repository's .device/[bin/]libnvcomp.so.6 (the copy
    zarrpipe's GPU path uses), loaded by soname as the wheel's own loader does."""
    try:
        import nvidia.libnvcomp  # noqa: F401

        return "nvidia-libnvcomp-cu13 wheel"
    except ImportError:
        pass
    candidates = [os.environ.get("NVCOMP_LIB")] + [
        os.path.join(REPO, ".device", *sub, "libnvcomp.so.6") for sub in ([], ["bin"])
    ]
    for path in candidates:
        if path and os.path.exists(path):
            ctypes.CDLL(os.path.abspath(path), mode=ctypes.RTLD_LOCAL)
            return path
    raise Skip("libnvcomp.so.6 not found: install nvidia-libnvcomp-cu13 or set NVCOMP_LIB")


class NvcompPeer(Peer):
    id = "nvcomp"
    gpu_only = True
    packages = ["nvidia-nvcomp-cu13", "nvidia-libnvcomp-cu13"]

    @property
    def label(self):
        return f"nvCOMP {version('nvidia-nvcomp-cu13')} Python bindings, GPU zstd, one sample at a time"

    def open(self):
        torch = self.device.torch
        self.reader = ChunkReader(self.store, self.args.threads)  # skips stores it cannot read
        where = load_libnvcomp()
        try:
            from nvidia import nvcomp
        except ImportError as err:
            raise Skip(f"nvidia-nvcomp-cu13 is not importable ({err})") from None
        self.nvcomp = nvcomp
        self.notes.append(f"libnvcomp from {where}")
        self.stream = torch.cuda.Stream(self.device.device)
        self.codec = nvcomp.Codec(
            algorithm="Zstd",
            bitstream_kind=nvcomp.BitstreamKind.RAW,
            device_id=self.device.device.index or 0,
            cuda_stream=self.stream.cuda_stream,
        )
        self.align = max(16, int(self.codec.get_required_decompression_alignment()))
        capacity = self.store.sample_bytes + self.store.channels * (self.align + 65536)
        self.pinned = torch.empty(capacity, dtype=torch.uint8, pin_memory=True)
        self.pinned_np = self.pinned.numpy()
        self.staging = torch.empty(capacity, dtype=torch.uint8, device=self.device.device)
        self.direct = True  # decode straight into the batch; False: nvCOMP allocates, then a copy

    def _decode(self, comp, dst, present, field_bytes):
        nvcomp, torch = self.nvcomp, self.device.torch
        if self.direct:
            try:
                flat = dst.view(torch.uint8).reshape(-1)
                out = nvcomp.as_arrays(
                    flat, [c * field_bytes for c in present], [field_bytes] * len(present), self.stream.cuda_stream
                )
                self.codec.decode(comp, out=out)
                return
            except (TypeError, ValueError, RuntimeError) as err:
                self.direct = False
                self.notes.append(f"decoding into the batch failed ({err}); nvCOMP's own output, then a copy")
                log(f"  nvcomp: {self.notes[-1]}")
        decoded = self.codec.decode(comp, data_type="<f4")
        for i, c in enumerate(present):
            dst[c].copy_(
                torch.as_tensor(decoded[i], device=self.device.device).view(torch.float32).reshape(dst[c].shape)
            )

    def batches(self):
        torch, s = self.device.torch, self.store
        field_bytes = s.lat * s.lon * 4
        self.reader.start_pass()
        for t0, t1 in s.batches:
            out = self.device.empty((t1 - t0, s.channels, s.lat, s.lon))
            self.stream.wait_stream(torch.cuda.current_stream(self.device.device))  # out's allocation
            with torch.cuda.stream(self.stream):
                out.record_stream(self.stream)
                for t in range(t0, t1):
                    locs = self.reader.locations(t)
                    offsets, total = _layout(locs, self.align)
                    self.reader.read_into(
                        self.pinned_np, [(loc, o) for loc, o in zip(locs, offsets) if loc is not None]
                    )
                    self.staging[:total].copy_(self.pinned[:total], non_blocking=True)
                    present = [c for c, loc in enumerate(locs) if loc is not None]
                    dst = out[t - t0]
                    if present:
                        comp = self.nvcomp.as_arrays(
                            self.staging,
                            [offsets[c] for c in present],
                            [locs[c][2] for c in present],
                            self.stream.cuda_stream,
                        )
                        self._decode(comp, dst, present, field_bytes)
                    for c, loc in enumerate(locs):
                        if loc is None:
                            dst[c].fill_(float("nan"))
                    self.stream.synchronize()  # the pinned buffer is reused by the next sample
            yield out


class ZarrpipePythonPeer(Peer):
    """zarrpipe's own Python package (python/): the Rust pipeline behind `zarrpipe.Pipeline`,
    batches as torch tensors without a copy (on a GPU, decoded and collated there; torch's
    stream waits on each batch's event). One pipeline for every pass, as a training loop keeps
    it across epochs."""

    id = "zarrpipe-python"
    packages = ["zarrpipe"]

    @property
    def label(self):
        return f"zarrpipe {version('zarrpipe')} Python package (torch tensors, no copy)"

    def open(self):
        zarrpipe = need("zarrpipe")
        if self.device.is_cuda and not zarrpipe.cuda_available():
            raise Skip("this zarrpipe wheel was built without the `cuda` feature")
        self.pipeline = zarrpipe.Pipeline(
            self.store.path,
            variables=self.store.names,
            batch_size=self.args.batch_size,
            device=self.device.spec if self.device.is_cuda else "cpu",
            tensors="torch" if self.device.torch is not None else "raw",
        )

    def batches(self):
        for batch in self.pipeline:
            yield batch.inputs


# --- Augspurger: the fastest published Python GPU pipeline, reproduced ------------------------


class TilePlan:
    """Where every stored chunk of one sample lies, grouped as the objects the `augspurger` peer
    reads with one request each: a shard of a variable (its inner chunks for that time step, read
    by one scatter `preadv` into aligned places), or one chunk file (read by `readinto`). A chunk
    is a latitude x longitude tile of a field (or the whole field); every variable must use the
    same tiles and bytes (little endian) + zstd. Decoded tiles are placed as `[C, gi, gj, tlat,
    tlon]` (gi x gj tiles per field) and cut into `[C, lat, lon]` once per sample, or, when a tile
    is a whole field, straight into the sample."""

    def __init__(self, store):
        self.store = store
        self.layouts = []
        tiles = set()
        for name, meta, _k in store.variables:
            codecs = meta["codecs"]
            sharded = codecs[0]["name"] == "sharding_indexed"
            conf = codecs[0]["configuration"] if sharded else None
            chunk = list(conf["chunk_shape"] if sharded else meta["chunk_grid"]["configuration"]["chunk_shape"])
            inner = conf["codecs"] if sharded else codecs
            if any(n != 1 for n in chunk[:-2]):
                raise Skip(f"{name}: chunks {chunk} hold more than one field")
            names = [c["name"] for c in inner]
            if names != ["bytes", "zstd"] or inner[0].get("configuration", {}).get("endian", "little") != "little":
                raise Skip(f"{name}: codecs {names}: this peer decodes bytes + zstd chunks only (nvCOMP zstd)")
            tiles.add(tuple(chunk[-2:]))
            enc = meta.get("chunk_key_encoding", {"name": "default"})
            layout = {
                "name": name,
                "sep": enc.get("configuration", {}).get("separator", "/" if enc["name"] == "default" else "."),
                "prefix": ["c"] if enc["name"] == "default" else [],
                "sharded": sharded,
                "ndim": len(meta["shape"]),
            }
            if sharded:
                shard = meta["chunk_grid"]["configuration"]["chunk_shape"]
                if any(s % c for s, c in zip(shard, chunk)):
                    raise Skip(f"{name}: shard {shard} is not a multiple of its inner chunk {chunk}")
                layout["shard"] = shard
                layout["inner_grid"] = [s // c for s, c in zip(shard, chunk)]
                index_codecs = conf.get("index_codecs", [{"name": "bytes"}, {"name": "crc32c"}])
                index_names = [c["name"] for c in index_codecs]
                if [n for n in index_names if n != "crc32c"] != ["bytes"]:
                    raise Skip(f"{name}: shard index codecs {index_names}")
                endian = index_codecs[0].get("configuration", {}).get("endian", "little")
                layout["index_dtype"] = "<u8" if endian == "little" else ">u8"
                layout["index_entries"] = math.prod(layout["inner_grid"])
                # sharding_indexed: 16 bytes (offset, nbytes) per inner chunk, then crc32c's 4 bytes
                layout["index_bytes"] = layout["index_entries"] * 16 + 4 * index_names.count("crc32c")
                layout["index_at_end"] = conf.get("index_location", "end") == "end"
            self.layouts.append(layout)
        if len(tiles) != 1:
            raise Skip(f"variables disagree on their tiles: {sorted(tiles)}")
        self.tlat, self.tlon = tiles.pop()
        self.gi, self.gj = -(-store.lat // self.tlat), -(-store.lon // self.tlon)
        self.tile_bytes = self.tlat * self.tlon * 4
        self.direct = (self.gi, self.gj, self.tlat, self.tlon) == (1, 1, store.lat, store.lon)
        self.indexes = {}

    def start_pass(self):
        self.indexes = {}  # shard indexes are read again each pass, as chunk files are stat'ed

    def _key(self, layout, coords):
        parts = layout["prefix"] + [str(c) for c in coords]
        return os.path.join(self.store.path, layout["name"], layout["sep"].join(parts))

    def _index(self, path, layout):
        """The shard's (offset, nbytes) table, [entries, 2] uint64; all NO_CHUNK for no file."""
        index = self.indexes.get(path)
        if index is None:
            n = layout["index_entries"]
            try:
                size = os.path.getsize(path)
            except FileNotFoundError:
                index = np.full((n, 2), NO_CHUNK, dtype=np.uint64)
            else:
                with open(path, "rb", buffering=0) as f:
                    f.seek(size - layout["index_bytes"] if layout["index_at_end"] else 0)
                    raw = f.read(layout["index_bytes"])
                if len(raw) != layout["index_bytes"]:
                    raise OSError(f"{path}: shard index of {layout['index_bytes']} bytes, read {len(raw)}")
                index = np.frombuffer(raw, dtype=layout["index_dtype"], count=2 * n).astype(np.uint64).reshape(n, 2)
                present = index[:, 0] != NO_CHUNK
                if np.any(index[present, 0] + index[present, 1] > size):
                    raise OSError(f"{path}: shard index points past the end of the file ({size} bytes)")
            self.indexes[path] = index
        return index

    def objects(self, t):
        """The objects of sample t, in a fixed order (one slot each): (path, sharded, entries),
        entries = [(place, offset, nbytes)], place = the tile's index in [C, gi, gj] (offset None:
        the chunk is absent, its tile is NaN)."""
        out = []
        c0 = 0
        for layout, (_, _, k) in zip(self.layouts, self.store.variables):
            tiles = [(level, i, j) for level in range(k) for i in range(self.gi) for j in range(self.gj)]
            if layout["sharded"]:
                shard = layout["shard"]
                entries_of = {}
                for level, i, j in tiles:
                    coords = [t, level, i, j] if layout["ndim"] == 4 else [t, i, j]
                    shard_coords = tuple(c // s for c, s in zip(coords, shard))
                    inner = np.ravel_multi_index([c % s for c, s in zip(coords, shard)], layout["inner_grid"])
                    entries_of.setdefault(shard_coords, []).append(((c0 + level) * self.gi * self.gj + i * self.gj + j, inner))
                for shard_coords, wanted in entries_of.items():
                    path = self._key(layout, shard_coords)
                    index = self._index(path, layout)
                    entries = []
                    for place, inner in wanted:
                        offset, nbytes = (int(x) for x in index[inner])
                        entries.append((place, None, 0) if offset == NO_CHUNK else (place, offset, nbytes))
                    out.append((path, True, entries))
            else:
                for level, i, j in tiles:
                    coords = [t, level, i, j] if layout["ndim"] == 4 else [t, i, j]
                    path = self._key(layout, coords)
                    place = (c0 + level) * self.gi * self.gj + i * self.gj + j
                    try:
                        entry = (place, 0, os.path.getsize(path))
                    except FileNotFoundError:
                        entry = (place, None, 0)
                    out.append((path, False, [entry]))
            c0 += k
        return out

    @staticmethod
    def places(entries, align):
        """Aligned byte offsets of each present entry in the object's staging buffer, and its size."""
        offsets, total = [], 0
        for _place, offset, nbytes in entries:
            offsets.append(total)
            if offset is not None:
                total += (nbytes + align - 1) // align * align
        return offsets, total

    @staticmethod
    def read(path, sharded, entries, buffer, offsets):
        """The object's present chunks into buffer (writable, uint8) at offsets: a chunk file by
        readinto; a shard's chunks by one preadv per run of adjacent chunks (its scatter list
        puts each chunk at its aligned place; no bytes are read twice or skipped over)."""
        view = memoryview(buffer)
        present = [(off, n, dest) for (_p, off, n), dest in zip(entries, offsets) if off is not None and n > 0]
        if not present:
            return
        with open(path, "rb", buffering=0) as f:
            if not sharded:
                _off, nbytes, dest = present[0]
                done = 0
                while done < nbytes:
                    got = f.readinto(view[dest + done : dest + nbytes])
                    if not got:
                        raise OSError(f"{path}: {nbytes - done} bytes short")
                    done += got
                return
            present.sort()
            run = [present[0]]
            for item in present[1:] + [None]:
                if item is not None and item[0] == run[-1][0] + run[-1][1]:
                    run.append(item)
                    continue
                _preadv_all(f.fileno(), [view[d : d + n] for _o, n, d in run], run[0][0], path)
                if item is not None:
                    run = [item]


def _preadv_all(fd, views, offset, path):
    """preadv until every view is full (a short read continues where it stopped)."""
    views = list(views)
    while views:
        got = os.preadv(fd, views[:1024], offset)  # IOV_MAX
        if got <= 0:
            raise OSError(f"{path}: {sum(len(v) for v in views)} bytes short at offset {offset}")
        offset += got
        while views and got >= len(views[0]):
            got -= len(views[0])
            views.pop(0)
        if got:
            views[0] = views[0][got:]


def _assemble_tiles(tiles, out, plan):
    """Decoded tiles (flat float32, `[C, gi, gj, tlat, tlon]` in C order) -> out `[C, lat, lon]`;
    numpy arrays or torch tensors (one copy kernel where the tiles divide the field)."""
    c, lat, lon = out.shape
    gi, gj, tlat, tlon = plan.gi, plan.gj, plan.tlat, plan.tlon
    tiles = tiles.reshape(c, gi, gj, tlat, tlon)
    tiles = tiles.permute(0, 1, 3, 2, 4) if hasattr(tiles, "permute") else tiles.transpose(0, 1, 3, 2, 4)
    if (gi * tlat, gj * tlon) == (lat, lon):
        out.reshape(c, gi, tlat, gj, tlon)[...] = tiles  # out is contiguous: a view
    else:  # partial edge tiles: whole tiles first, then the field cut out of them
        out[...] = tiles.reshape(c, gi * tlat, gj * tlon)[:, :lat, :lon]


class AugspurgerCpuPeer(Peer):
    """The augspurger peer's plan, reads and tile assembly with numcodecs' zstd on the CPU: a check
    of everything but the GPU calls, where there is no GPU (not in the default list)."""

    id = "augspurger-cpu"
    packages = ["numcodecs"]

    @property
    def label(self):
        return f"augspurger's reads and tiles + numcodecs {version('numcodecs')} zstd (CPU twin)"

    def open(self):
        zstd = need("numcodecs.zstd", "numcodecs")
        self.codec = zstd.Zstd()
        self.plan = TilePlan(self.store)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.args.threads)
        s, p = self.store, self.plan
        self.tiles = np.empty((s.channels * p.gi * p.gj, p.tlat * p.tlon), dtype=np.float32)

    def batches(self):
        s, p = self.store, self.plan
        p.start_pass()
        for t0, t1 in s.batches:
            out = np.empty((t1 - t0, s.channels, s.lat, s.lon), dtype=np.float32)
            for t in range(t0, t1):
                objects = p.objects(t)

                def one(obj):
                    path, sharded, entries = obj
                    offsets, total = TilePlan.places(entries, 16)
                    buffer = np.empty(total, dtype=np.uint8)
                    TilePlan.read(path, sharded, entries, buffer, offsets)
                    for (place, off, n), o in zip(entries, offsets):
                        if off is None:
                            self.tiles[place] = np.nan
                        else:
                            self.codec.decode(buffer[o : o + n], out=self.tiles[place])

                list(self.pool.map(one, objects))
                _assemble_tiles(self.tiles, out[t - t0], p)
            yield self.device.from_host(out)

    def close(self):
        self.pool.shutdown()


class AugspurgerPeer(Peer):
    """Tom Augspurger's GPU Zarr pipeline ("GPU-accelerated Zarr"), one batch at a time: the stored
    bytes of the batch's shards or chunk files read with readinto (a shard's inner chunks by one
    scatter preadv) into preallocated pinned host buffers, in parallel threads, then uploaded and
    decoded by nvCOMP's batched zstd into preallocated device memory; tiles cut into the batch on
    the GPU. The post's one CUDA stream per shard is adapted: the batch's objects are split into S
    groups of about equal stored bytes (--augspurger-streams), each with its own stream, nvCOMP
    codec, pinned buffer and device staging buffer, so that one nvCOMP call decodes a whole group
    (one call per chunk file or per small shard left the GPU idle: 0.10 GB/s on an H100 host, 2026-11-24).
    Everything else (pinned readinto/preadv, preallocated output, batched zstd, a stream per group)
    is as in the post. Two sets of buffers: the reads of batch k+1 fill pinned memory while batch k
    uploads and decodes from the other set."""

    id = "augspurger"
    gpu_only = True
    packages = ["nvidia-nvcomp-cu13", "nvidia-libnvcomp-cu13"]
    reuse_config = True  # decode with a DecompressConfig built once per stream and batch shape

    @property
    def n_streams(self):
        return max(1, int(getattr(self.args, "augspurger_streams", 1)))

    @property
    def label(self):
        return (
            f"nvCOMP {version('nvidia-nvcomp-cu13')} Python bindings, Augspurger's pipeline "
            f"(pinned readinto, batched zstd; a batch's shards or chunk files grouped on {self.n_streams} streams)"
        )

    def open(self):
        torch, s = self.device.torch, self.store
        self.plan = p = TilePlan(s)  # skips stores it cannot decode
        where = load_libnvcomp()
        try:
            from nvidia import nvcomp
        except ImportError as err:
            raise Skip(f"nvidia-nvcomp-cu13 is not importable ({err})") from None
        self.nvcomp = nvcomp
        dev = self.device.device
        probe = nvcomp.Codec(algorithm="Zstd", bitstream_kind=nvcomp.BitstreamKind.RAW, device_id=dev.index or 0)
        self.align = max(16, int(probe.get_required_decompression_alignment()))
        del probe
        # Planning pass over the epoch: group g's buffers hold the most bytes group g has in any batch.
        n_streams = self.n_streams
        p.start_pass()
        capacity, per_call = [0] * n_streams, []
        for t0, t1 in s.batches:
            groups, used = self._groups(self._batch_objects(t0, t1))
            capacity = [max(a, b) for a, b in zip(capacity, used)]
            per_call += [sum(off is not None for (_, _, e), _o in g for _p, off, _n in e) for g in groups if g]
        # Two sets (double buffering): batch k uses set k % 2, so the reads of batch k+1 need not
        # wait for batch k's uploads (which wait, in stream order, for batch k-1's decodes).
        self.pinned = [[torch.empty(max(n, 1), dtype=torch.uint8, pin_memory=True) for n in capacity] for _ in range(2)]
        self.pinned_np = [[b.numpy() for b in buffers] for buffers in self.pinned]
        self.staging = [[torch.empty(max(n, 1), dtype=torch.uint8, device=dev) for n in capacity] for _ in range(2)]
        self.uploaded = [[None] * n_streams for _ in range(2)]  # per set and group: the event after its last upload
        self.streams = [torch.cuda.Stream(dev) for _ in range(n_streams)]
        self.codecs = [
            nvcomp.Codec(
                algorithm="Zstd",
                bitstream_kind=nvcomp.BitstreamKind.RAW,
                device_id=dev.index or 0,
                cuda_stream=stream.cuda_stream,
            )
            for stream in self.streams
        ]
        self.configs = {}  # (group, chunks, tile bytes) -> DecompressConfig
        self.checked = set()  # configs whose reuse was checked
        batch = max((t1 - t0 for t0, t1 in s.batches), default=1)
        self.tiles = None if p.direct else torch.empty(batch * s.channels * p.gi * p.gj * p.tile_bytes, dtype=torch.uint8, device=dev)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.args.threads)
        self.notes.append(f"libnvcomp from {where}")
        kind = "shards" if p.layouts[0]["sharded"] else "chunk files"
        spread = sorted({min(per_call), max(per_call)}) if per_call else [0]
        calls = f"{'-'.join(map(str, spread))} chunks per nvCOMP call"
        self.notes.append(
            f"{n_streams} CUDA stream(s) and nvCOMP codec(s), each decoding one group of a batch's {kind} "
            f"({calls}, batches of {batch}), 2 x {sum(capacity) / 1e6:.1f} MB pinned; tiles {p.tlat} x {p.tlon} "
            + ("decoded straight into the batch" if p.direct else f"({p.gi} x {p.gj} per field) cut into the batch on the GPU")
        )

    def _batch_objects(self, t0, t1):
        """The objects of samples t0..t1-1, in sample order, their places counted in the batch's
        tiles ((sample in batch * C + channel) * gi * gj + tile); a shard that several of the
        samples share is one object (read once)."""
        p = self.plan
        per_sample = self.store.channels * p.gi * p.gj
        out, at = [], {}
        for t in range(t0, t1):
            for path, sharded, entries in p.objects(t):
                entries = [((t - t0) * per_sample + place, off, n) for place, off, n in entries]
                if sharded and path in at:
                    out[at[path]][2].extend(entries)
                else:
                    at[path] = len(out)
                    out.append((path, sharded, entries))
        return out

    def _groups(self, objects):
        """The batch's objects in S groups, contiguous in object order, of about equal stored bytes:
        per group [(object, its chunks' aligned offsets in the group's buffer)], and its bytes."""
        n_streams = self.n_streams
        placed = [TilePlan.places(entries, self.align) for _path, _sharded, entries in objects]
        total = sum(size for _offsets, size in placed)
        groups, used, before = [[] for _ in range(n_streams)], [0] * n_streams, 0
        for i, (obj, (offsets, size)) in enumerate(zip(objects, placed)):
            # the group whose share of the batch's bytes holds the object's middle byte
            g = (2 * before + size) * n_streams // (2 * total) if total else i * n_streams // len(objects)
            g = min(g, n_streams - 1)
            groups[g].append((obj, [used[g] + o for o in offsets]))
            used[g] += size
            before += size
        return groups, used

    def _decode(self, slot, comp, dst_flat, places):
        """Batched zstd of one group's chunks into their tiles of dst_flat (bytes), on the group's
        stream. A DecompressConfig (whose building synchronizes the stream) is built once per group
        and batch shape and reused, as nvCOMP allows for the same decoded sizes; its first reuse is
        checked against a freshly configured decode."""
        nvcomp, torch, tb = self.nvcomp, self.device.torch, self.plan.tile_bytes
        codec, stream, n = self.codecs[slot], self.streams[slot].cuda_stream, len(places)
        dst = nvcomp.as_arrays(dst_flat, [place * tb for place in places], [tb] * n, stream)
        key = (slot, n, tb)
        config = self.configs.get(key) if self.reuse_config else None
        try:
            if self.reuse_config and config is None:
                config = self.configs[key] = codec.decompression_config(comp)
                codec.decode(comp, out=dst, decompression_config=config)
                return
            if config is not None and key in self.checked:
                codec.decode(comp, out=dst, decompression_config=config)
                return
        except (TypeError, ValueError, RuntimeError) as err:
            self.reuse_config, config = False, None
            self.notes.append(f"decoding with a DecompressConfig failed ({err}); configured per call")
            log(f"  augspurger: {self.notes[-1]}")
        codec.decode(comp, out=dst)
        if config is None:
            return
        # First reuse of this config: decode again with it and compare.
        self.checked.add(key)
        scratch = torch.empty(n * tb, dtype=torch.uint8, device=self.device.device)
        mismatch = None
        try:
            again = nvcomp.as_arrays(scratch, [i * tb for i in range(n)], [tb] * n, stream)
            codec.decode(comp, out=again, decompression_config=config)
            want = dst_flat.view(-1, tb)[torch.tensor(places, device=self.device.device)]
            if not torch.equal(scratch.view(n, tb), want):
                mismatch = "a reused DecompressConfig decoded other values"
        except (TypeError, ValueError, RuntimeError) as err:
            mismatch = f"decoding with a reused DecompressConfig failed ({err})"
        if mismatch:
            self.reuse_config = False
            self.notes.append(f"{mismatch}: configured per call")
            log(f"  augspurger: {self.notes[-1]}")

    def _batch(self, k, objects, dst_flat, main):
        """Reads, uploads and decodes one batch's objects into dst_flat (the batch, or the tiles
        buffer) with buffer set k; main waits for every stream at the end."""
        groups, used = self._groups(objects)
        jobs, left = {}, [len(group) for group in groups]
        for g, group in enumerate(groups):
            if used[g] > self.pinned[k][g].numel():
                raise RuntimeError(f"group {g} needs {used[g]} bytes, its buffers hold {self.pinned[k][g].numel()}")
            if group and self.uploaded[k][g] is not None:
                self.uploaded[k][g].synchronize()  # this set's pinned buffer (two batches ago) is uploaded: free
            for (path, sharded, entries), offsets in group:
                jobs[self.pool.submit(TilePlan.read, path, sharded, entries, self.pinned_np[k][g], offsets)] = g
        for future in concurrent.futures.as_completed(jobs):
            future.result()
            g = jobs[future]
            left[g] -= 1
            if not left[g]:  # the group's last read: its GPU work goes now, while other reads go on
                self._group(k, g, groups[g], used[g], dst_flat, main)
        for stream in self.streams:
            main.wait_stream(stream)

    def _group(self, k, g, group, used, dst_flat, main):
        """On stream g: the group's bytes pinned -> device staging, one batched decode of its present
        chunks, NaN tiles for its absent ones."""
        torch, tb = self.device.torch, self.plan.tile_bytes
        stream = self.streams[g]
        stream.wait_stream(main)  # the batch's allocation, and the previous batch's tile assembly
        with torch.cuda.stream(stream):
            if used:
                # staging[k][g] was last read by stream g's decode two batches ago: stream order puts
                # this upload after it.
                self.staging[k][g][:used].copy_(self.pinned[k][g][:used], non_blocking=True)
                event = torch.cuda.Event()
                event.record(stream)
                self.uploaded[k][g] = event
            present, missing = [], []  # (tile, stored bytes, offset in staging); tiles
            for (_path, _sh, entries), offsets in group:
                for (place, off, n), o in zip(entries, offsets):
                    if off is None:
                        missing.append(place)
                    else:
                        present.append((place, n, o))
            if present:
                comp = self.nvcomp.as_arrays(
                    self.staging[k][g], [o for _p, _n, o in present], [n for _p, n, _o in present], stream.cuda_stream
                )
                self._decode(g, comp, dst_flat, [place for place, _n, _o in present])
            for place in missing:
                dst_flat[place * tb : (place + 1) * tb].view(torch.float32).fill_(float("nan"))

    def batches(self):
        torch, s, p = self.device.torch, self.store, self.plan
        sample_bytes = s.channels * p.gi * p.gj * p.tile_bytes  # one sample's tiles
        p.start_pass()
        main = torch.cuda.current_stream(self.device.device)
        for k, (t0, t1) in enumerate(s.batches):
            out = self.device.empty((t1 - t0, s.channels, s.lat, s.lon))
            if p.direct:
                self._batch(k % 2, self._batch_objects(t0, t1), out.view(torch.uint8).reshape(-1), main)
            else:
                tiles = self.tiles[: (t1 - t0) * sample_bytes]
                self._batch(k % 2, self._batch_objects(t0, t1), tiles, main)
                for i in range(t1 - t0):
                    _assemble_tiles(tiles[i * sample_bytes : (i + 1) * sample_bytes].view(torch.float32), out[i], p)
            # `out` lives on the main stream, which waited for every group's stream: its memory is
            # not handed out again before they are done with it.
            yield out

    def close(self):
        if getattr(self, "pool", None):
            self.pool.shutdown()


PEERS = {
    "zarr": ZarrPeer,
    "zarr-gpu": ZarrGpuPeer,
    "zarrs": ZarrsPeer,
    "tensorstore-sample": TensorstorePeer,
    "tensorstore-whole": TensorstoreWholePeer,
    "xbatcher": XbatcherPeer,
    "nvcomp": NvcompPeer,
    "chunks-cpu": ChunksCpuPeer,
    "augspurger": AugspurgerPeer,
    "augspurger-cpu": AugspurgerCpuPeer,
    "zarrpipe-python": ZarrpipePythonPeer,
}


# --- Measuring ---------------------------------------------------------------------------------


def versions(peer_class, device):
    out = {"python": platform.python_version(), "numpy": np.__version__}
    if device is not None and device.torch is not None:
        out["torch"] = device.torch.__version__
    for dist in peer_class.packages:
        v = version(dist)
        if v:
            out[dist] = v
    return out


def measure(peer, device, store, passes):
    started = time.perf_counter()
    checksum, samples = 0.0, 0
    for batch in peer.batches():  # warm-up: page cache, start-up, and the checksum
        checksum += device.checksum(batch)
        samples += batch.shape[0]
        del batch
    device.sync()
    warmup = time.perf_counter() - started
    if samples != store.time:
        raise RuntimeError(f"the warm-up pass delivered {samples} samples, the store has {store.time}")
    timed = []
    for _ in range(passes):
        device.sync()
        started = time.perf_counter()
        n = 0
        for batch in peer.batches():
            n += batch.shape[0]
            del batch
        device.sync()
        timed.append(time.perf_counter() - started)
        if n != samples:
            raise RuntimeError(f"a timed pass delivered {n} samples, the warm-up {samples}")
    return checksum, samples, warmup, timed


def run_peer(peer_id, store, args, dataset):
    result = {"peer": peer_id, "tool": peer_id, "dataset": dataset, "device": args.device}
    device = peer = None
    try:
        cls = PEERS[peer_id]
        if cls.gpu_only and not args.device.startswith("cuda"):
            raise Skip("delivers to a GPU only")
        device = Device(args.device)
        peer = cls(store, device, args)
        result["tool"] = peer.label
        peer.open()
        result["tool"] = peer.label
        log(f"{dataset}: {peer.label} -> {args.device}")
        checksum, samples, warmup, timed = measure(peer, device, store, args.passes)
        seconds = min(timed)
        decoded = samples * store.sample_bytes
        result.update(
            seconds=seconds,
            samples=samples,
            batches=len(store.batches),
            decoded_bytes=decoded,
            gb_per_s=decoded / 1e9 / seconds,
            samples_per_s=samples / seconds,
            checksum=checksum,
            pass_seconds=timed,
            warmup_seconds=warmup,
        )
        log(f"  {result['gb_per_s']:.3f} GB/s, {result['samples_per_s']:.2f} samples/s, checksum {checksum!r}")
    except Skip as why:
        result["skipped"] = str(why)
        log(f"{dataset}: {result['tool']} skipped: {why}")
    except Exception as err:  # noqa: BLE001 - one peer's failure must not end the run
        result["skipped"] = f"failed: {type(err).__name__}: {err}"
        log(f"{dataset}: {result['tool']} failed:\n{traceback.format_exc()}")
    finally:
        if peer is not None:
            try:
                peer.close()
            except Exception:  # noqa: BLE001
                pass
    result["versions"] = versions(PEERS[peer_id], device)
    if peer is not None and peer.notes:
        result["notes"] = peer.notes
    result.update(
        codec=store.codec,
        sample_shape=[store.channels, store.lat, store.lon],
        batch_size=args.batch_size,
        passes=args.passes,
        cores=os.cpu_count(),
        device_name=getattr(device, "name", None),
    )
    return result


def run_isolated(peer_id, args, dataset):
    """The peer in a child process of this script: crashes, hangs and GPU memory stay there."""
    command = [
        sys.executable, os.path.abspath(__file__), args.store, "--in-process", "--peers", peer_id,
        "--device", args.device, "--passes", str(args.passes), "--batch-size", str(args.batch_size),
        "--workers", str(args.workers), "--threads", str(args.threads), "--dataset", dataset,
        "--augspurger-streams", str(args.augspurger_streams),
    ]  # fmt: skip
    base = {"peer": peer_id, "tool": peer_id, "dataset": dataset, "device": args.device}
    timeout = args.peer_timeout
    if args.deadline:
        timeout = min(timeout, args.deadline - time.time())
        if timeout < 5:
            log(f"{dataset}: {peer_id} not run: the run's time budget is spent")
            return [dict(base, skipped="not run: the run's time budget (--deadline) was spent")]
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        log(f"{dataset}: {peer_id} timed out after {timeout:.0f} s")
        return [dict(base, skipped=f"timed out after {timeout:.0f} s")]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return lines or [dict(base, skipped=f"crashed: exit status {done.returncode} (its stderr is above)")]
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store", help="a W1 store written by `zarrpipe generate`")
    parser.add_argument("--device", default="cuda:0", help="cuda:N or cpu (default cuda:0)")
    parser.add_argument("--peers", default=",".join(DEFAULT_PEERS), help=f"comma-separated, of {ALL_PEERS}")
    parser.add_argument("--passes", type=int, default=2, help="timed passes after the warm-up (best reported)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--workers", type=int, default=8, help="DataLoader worker processes (xbatcher peer)")
    parser.add_argument("--threads", type=int, default=min(32, 2 * (os.cpu_count() or 1)), help="chunk reader threads")
    parser.add_argument(
        "--augspurger-streams",
        type=int,
        default=1,
        help="CUDA streams (groups of a batch's shards) of the augspurger peer (default 1: on the H100, W1 "
        "gave 7.05 GB/s on 1, 4.33 on 2, 2.40 on 4: each nvCOMP call costs about 45 ms more)",
    )
    parser.add_argument("--dataset", help="name of the dataset in the output (default: the store's directory name)")
    parser.add_argument("--peer-timeout", type=float, default=600, help="seconds one peer may take")
    parser.add_argument("--deadline", type=float, help="Unix time after which no peer starts and running ones stop")
    parser.add_argument("--in-process", action="store_true", help="run the peers in this process")
    args = parser.parse_args()
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        parser.error(f"unknown peers {unknown}; known: {ALL_PEERS}")
    store = Store(args.store, args.batch_size)
    dataset = args.dataset or os.path.basename(store.path.rstrip("/"))
    for peer_id in peers:
        results = [run_peer(peer_id, store, args, dataset)] if args.in_process else run_isolated(peer_id, args, dataset)
        for result in results:
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
