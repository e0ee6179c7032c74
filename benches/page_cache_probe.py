"""Whether holding pinned memory pushes a store's chunk files out of the page cache: reads
the store's chunk files until they are cached, then sets pinned memory aside in 64 MiB
`cudaHostAlloc`s (as the GPU side's read memory does) and reads the files again, printing
the memory limits, how much of the store is resident and how fast it reads, before and after.

    python3 benches/page_cache_probe.py STORE [GIB]     (GIB: pinned memory to hold, default 16)

A question it answers: under `auto`, setup B's decoding threads stalled for 1-2 s after the
GPU side's 16 GiB of pinned slabs were set aside (benches/results/
2026-12-01_h200_hosts_ad_ae_pinned_later.md). Needs a GPU host: the CUDA runtime is called
through ctypes, and NumPy is needed (benches/host_probe.py reads the files).
"""

import ctypes
import mmap
import os
import sys
import time

from host_probe import chunk_files, read_bandwidth
from pinned_allocation_probe import SLAB, host_alloc, runtime

PAGE = os.sysconf("SC_PAGE_SIZE")
LIMIT_FILES = (
    "/sys/fs/cgroup/memory.max",
    "/sys/fs/cgroup/memory.high",
    "/sys/fs/cgroup/memory.current",
    "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    "/sys/fs/cgroup/memory/memory.usage_in_bytes",
)


def memory_state(label):
    """The cgroup's memory limits and use, and the host's available and cached memory."""
    fields = []
    for path in LIMIT_FILES:
        try:
            with open(path) as f:
                value = f.read().strip()
        except OSError:
            continue
        if value.isdigit():
            value = "none" if int(value) >= 2**60 else f"{int(value) / 2**30:.1f} GiB"
        fields.append(f"{path.rsplit('/', 1)[-1]} {value}")
    with open("/proc/meminfo") as f:
        info = dict(line.split(":", 1) for line in f)
    for key in ("MemTotal", "MemAvailable", "Cached", "Mlocked"):
        if key in info:
            fields.append(f"{key} {int(info[key].split()[0]) / 2**20:.1f} GiB")
    print(f"{label}: " + ", ".join(fields))


def resident_bytes(paths):
    """Bytes of `paths` in the page cache (mincore over a private mapping of each file)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    resident = 0
    for path in paths:
        size = os.path.getsize(path)
        with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as mapped:
            pages = (size + PAGE - 1) // PAGE
            vector = ctypes.create_string_buffer(pages)
            address = ctypes.addressof(ctypes.c_char.from_buffer(mapped))
            if libc.mincore(address, size, vector) != 0:
                raise SystemExit(f"mincore on {path}: errno {ctypes.get_errno()}")
            resident += min(size, PAGE * sum(byte & 1 for byte in vector.raw))
    return resident


def report(label, paths):
    total = sum(os.path.getsize(path) for path in paths)
    resident = resident_bytes(paths)
    rate = read_bandwidth(paths, os.cpu_count(), repeats=1)
    print(f"{label}: {100 * resident / total:.1f}% of {total / 1e9:.2f} GB resident, "
          f"then read at {rate:.2f} GB/s on {os.cpu_count()} threads")


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    store, gib = sys.argv[1], float(sys.argv[2]) if len(sys.argv) == 3 else 16.0
    paths = chunk_files(store)
    memory_state("before")
    read_bandwidth(paths, os.cpu_count(), repeats=1)
    report("store cached", paths)
    cuda = runtime()
    held, took = [], []
    while len(held) * SLAB < gib * 2**30:
        started = time.perf_counter()
        held.append(host_alloc(cuda, SLAB))
        took.append(time.perf_counter() - started)
    print(f"pinned: {len(held)} slabs of 64 MiB in {sum(took):.1f} s "
          f"(slowest {1e3 * max(took):.0f} ms)")
    memory_state("holding it")
    report("store after", paths)
    for pointer in held:
        cuda.cudaFreeHost(ctypes.c_void_p(pointer))
    memory_state("given back")


if __name__ == "__main__":
    main()
