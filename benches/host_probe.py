"""What a GPU host's memory allows the loader: copy bandwidth, reads of a store's chunk files
from the page cache, and uploads straight from registered page-cache pages (mmap +
cudaHostRegister, read-only) against pinned memory. Needs NumPy and cupy.

    python3 benches/host_probe.py STORE    # e.g. a W1 store from `zarrpipe generate`

docs/benchmarks.md ("The bounds") has the H100 host's figures (2026-11-25).
"""

import glob
import mmap
import os
import sys
import threading
import time

import numpy as np


def copy_bandwidth(threads, seconds=1.5, size=256 << 20):
    """GB/s copied by `threads` threads, each copying its own 256 MiB array."""
    sources = [np.ones(size, np.uint8) for _ in range(threads)]
    targets = [np.empty(size, np.uint8) for _ in range(threads)]
    copied = [0] * threads
    stop = time.perf_counter() + seconds

    def work(i):
        while time.perf_counter() < stop:
            np.copyto(targets[i], sources[i])
            copied[i] += size

    seconds = run_threads(threads, work)
    return sum(copied) / seconds / 1e9


def run_threads(threads, work):
    """Runs work(i) on `threads` threads; returns the seconds they took."""
    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    started = time.perf_counter()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return time.perf_counter() - started


def chunk_files(store):
    """The store's chunk files over 100 kB (Zarr v3 keys, `VARIABLE/c/...`), sorted."""
    files = [
        path
        for path in sorted(glob.glob(os.path.join(store, "*", "c", "**", "*"), recursive=True))
        if os.path.isfile(path) and os.path.getsize(path) > 100_000
    ]
    if not files:
        sys.exit(f"no chunk files over 100 kB under {store}/*/c/")
    return files


def read_bandwidth(files, threads, repeats=3):
    """GB/s of stored bytes read with `readv` into one reused buffer per thread."""
    buffers = [bytearray(max(os.path.getsize(f) for f in files)) for _ in range(threads)]
    shares = [files[i::threads] for i in range(threads)]

    def work(i):
        for _ in range(repeats):
            for path in shares[i]:
                fd = os.open(path, os.O_RDONLY)
                os.readv(fd, [memoryview(buffers[i])[: os.path.getsize(path)]])
                os.close(fd)

    total = repeats * sum(os.path.getsize(f) for f in files)
    return total / run_threads(threads, work) / 1e9


def registered_uploads(files):
    """Maps and registers `files`, uploads them from there and from pinned memory."""
    import cupy as cp

    runtime = cp.cuda.runtime
    read_only = 8  # cudaHostRegisterReadOnly
    started = time.perf_counter()
    mappings = []
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        mappings.append(mmap.mmap(fd, os.path.getsize(path), prot=mmap.PROT_READ, flags=flags))
        os.close(fd)
    mapped = time.perf_counter()
    views = [np.frombuffer(mapping, np.uint8) for mapping in mappings]
    for view in views:
        runtime.hostRegister(view.ctypes.data, view.size, read_only)
    registered = time.perf_counter()
    count, stored = len(views), sum(view.size for view in views)
    print(f"mmap + populate: {1e6 * (mapped - started) / count:.0f} us a file; register: "
          f"{1e6 * (registered - mapped) / count:.0f} us a file ({stored / 1e6:.0f} MB)")
    device = cp.empty(max(view.size for view in views), cp.uint8)
    stream = cp.cuda.Stream(non_blocking=True)

    def upload(sources):
        started = time.perf_counter()
        for address, size in sources:
            runtime.memcpyAsync(device.data.ptr, address, size, 1, stream.ptr)
        stream.synchronize()
        return stored / (time.perf_counter() - started) / 1e9

    from_pages = [(view.ctypes.data, view.size) for view in views]
    print(f"uploads from registered page-cache pages: {upload(from_pages):.1f} GB/s")
    pinned = cp.cuda.alloc_pinned_memory(device.size)
    from_pinned = [(pinned.ptr, view.size) for view in views]
    print(f"uploads from one pinned buffer: {upload(from_pinned):.1f} GB/s")
    started = time.perf_counter()
    for view in views:
        runtime.hostUnregister(view.ctypes.data)
    print(f"unregister: {1e6 * (time.perf_counter() - started) / count:.0f} us a file")


def main():
    store = sys.argv[1]
    for threads in (1, 4, 8, 16):
        print(f"memcpy, {threads:2d} threads: {copy_bandwidth(threads):6.1f} GB/s copied")
    files = chunk_files(store)
    for path in files:
        with open(path, "rb") as f:
            f.read()  # into the page cache
    print(f"{len(files)} chunk files, {sum(map(os.path.getsize, files)) / 1e6:.0f} MB stored")
    for threads in (1, 8, 16):
        print(f"pread, {threads:2d} threads: {read_bandwidth(files, threads):6.1f} GB/s stored")
    registered_uploads(files[:200])


if __name__ == "__main__":
    main()
