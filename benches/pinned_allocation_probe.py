"""Whether allocating or freeing pinned memory holds up a GPU host's other CUDA calls: how long
an upload call (cudaMemcpyAsync from pinned memory, one 1.5 MB chunk at a time) takes on one
thread while another thread allocates or frees pinned memory, and what those take. Calls the
CUDA runtime through ctypes, which lets go of the GIL during each call.

    python3 benches/pinned_allocation_probe.py

docs/benchmarks.md ("Defaults and the measurements behind them") has an H200 host's figures
(2026-11-25).
"""

import ctypes
import glob
import statistics
import threading
import time

CHUNK = 1_500_000
SLAB = 64 << 20


def runtime():
    """The CUDA runtime, from the toolkit's or a wheel's lib directory."""
    candidates = sorted(
        glob.glob("/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so*")
        + glob.glob("/usr/local/cuda/lib64/libcudart.so*")
    )
    if not candidates:
        raise SystemExit("no libcudart.so under /usr/local/cuda")
    cuda = ctypes.CDLL(candidates[-1])
    for name in ("cudaHostAlloc", "cudaFreeHost", "cudaMalloc", "cudaFree", "cudaStreamCreate",
                 "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaDeviceSynchronize"):
        getattr(cuda, name).restype = ctypes.c_int
    cuda.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                     ctypes.c_int, ctypes.c_void_p]
    cuda.cudaHostAlloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                                   ctypes.c_uint]
    cuda.cudaFreeHost.argtypes = [ctypes.c_void_p]
    return cuda


def check(status, what):
    if status != 0:
        raise SystemExit(f"{what}: CUDA error {status}")


def host_alloc(cuda, size):
    pointer = ctypes.c_void_p()
    check(cuda.cudaHostAlloc(ctypes.byref(pointer), size, 0), "cudaHostAlloc")
    return pointer.value


def upload_calls(cuda, seconds):
    """Milliseconds each upload call took, one chunk at a time for `seconds`, a sync per 140."""
    source = host_alloc(cuda, CHUNK * 140)
    target = ctypes.c_void_p()
    check(cuda.cudaMalloc(ctypes.byref(target), CHUNK * 140), "cudaMalloc")
    stream = ctypes.c_void_p()
    check(cuda.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
    took = []
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        for i in range(140):
            started = time.perf_counter()
            check(cuda.cudaMemcpyAsync(target.value + i * CHUNK, source + i * CHUNK, CHUNK, 1,
                                       stream), "cudaMemcpyAsync")
            took.append(1e3 * (time.perf_counter() - started))
        check(cuda.cudaStreamSynchronize(stream), "cudaStreamSynchronize")
    cuda.cudaFreeHost(ctypes.c_void_p(source))
    cuda.cudaFree(target)
    return took


def summary(values):
    ordered = sorted(values)
    p = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return (f"n {len(values)}, median {statistics.median(values):.3f}, p90 {p(0.9):.3f}, "
            f"p99 {p(0.99):.3f}, max {max(values):.1f} ms")


def beside(cuda, label, work, seconds=2.0):
    """Upload calls while `work(stop)` runs on another thread; prints both."""
    done = threading.Event()
    spent = []
    thread = threading.Thread(target=lambda: spent.extend(work(done)))
    thread.start()
    took = upload_calls(cuda, seconds)
    done.set()
    thread.join()
    print(f"upload calls {label}: {summary(took)}")
    if spent:
        print(f"  its calls: {summary(spent)}")


def allocating(cuda, size, free):
    def work(done):
        spent, held = [], []
        while not done.is_set():
            started = time.perf_counter()
            held.append(host_alloc(cuda, size))
            spent.append(1e3 * (time.perf_counter() - started))
            if free:
                started = time.perf_counter()
                cuda.cudaFreeHost(ctypes.c_void_p(held.pop()))
                spent.append(1e3 * (time.perf_counter() - started))
            if len(held) * size >= 8 << 30:
                break
        for pointer in held:
            cuda.cudaFreeHost(ctypes.c_void_p(pointer))
        return spent
    return work


def main():
    cuda = runtime()
    check(cuda.cudaDeviceSynchronize(), "starting the device")
    upload_calls(cuda, 0.3)  # warm up
    beside(cuda, "alone", lambda done: [])
    beside(cuda, "beside 64 MiB cudaHostAlloc, kept", allocating(cuda, SLAB, free=False))
    beside(cuda, "beside 64 MiB cudaHostAlloc + cudaFreeHost", allocating(cuda, SLAB, free=True))
    beside(cuda, "beside 1 GiB cudaHostAlloc, kept", allocating(cuda, 1 << 30, free=False))
    started = time.perf_counter()
    pointer = host_alloc(cuda, 1 << 30)
    print(f"1 GiB cudaHostAlloc alone: {1e3 * (time.perf_counter() - started):.0f} ms")
    cuda.cudaFreeHost(ctypes.c_void_p(pointer))


if __name__ == "__main__":
    main()
