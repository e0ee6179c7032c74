"""GPU batches into torch (run on a GPU host: python/tests/run_gpu_tests.sh WHEEL). Each test
skips, with the reason, where there is no CUDA build, no torch or no GPU.

- zero copy: a torch tensor's data_ptr is the address zarrpipe allocated;
- the GPU's batches equal the CPU path's bit for bit (float32), whichever side decodes (GPU,
  CPU, split, auto), and their bfloat16 is the CPU's float32 rounded to nearest even;
- `ZARRPIPE_LOG` prints split decoding's traces;
- torch's stream waits for a batch on the device (no host synchronisation), also on a side
  stream;
- memory: a tensor torch frees goes back to zarrpipe's pool (a pool that holds three batches
  runs whole epochs), not to be overwritten before the kernels torch queued on it have run,
  and nothing is left on the device once the pipeline and tensors are gone.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import numpy as np
import pytest

import zarrpipe
from conftest import store


@pytest.fixture(scope="module")
def torch():
    if not zarrpipe.cuda_available():
        pytest.skip("skipped: zarrpipe was built without the `cuda` feature (maturin build --features cuda)")
    torch = pytest.importorskip("torch", reason="skipped: the GPU tests hand batches to torch, which is not installed")
    if not torch.cuda.is_available():
        pytest.skip("skipped: no CUDA device (torch.cuda.is_available() is False)")
    torch.cuda.init()
    return torch


OPTIONS = dict(
    variables=["t2m", "z", "tp", "cls"],
    input_dims={"latitude": 8, "longitude": 8},
    input_overlap={"latitude": 5, "longitude": 7},
    batch_size=16,
    shuffle=True,
    seed=5,
)


def cpu_batches(path, **options):
    return [b for b in zarrpipe.Pipeline(path, tensors="raw", **{**OPTIONS, **options})]


@pytest.mark.parametrize("decode_on", ["gpu", "cpu", "split", "split:0.5", "auto"])
@pytest.mark.parametrize("name", ["xr_v2", "xr_v3"])
@pytest.mark.parametrize("streams", [None, 1])
def test_gpu_batches_equal_the_cpu_path_bit_for_bit(torch, name, decode_on, streams):
    path = store(name)
    stats = zarrpipe.stats(path, OPTIONS["variables"])
    extra = dict(normalize=stats, nan_mask=True, latitude_weights="latitude")
    want = cpu_batches(path, **extra)
    decode_on, _, gpu_chunks = decode_on.partition(":")
    pipe = zarrpipe.Pipeline(path, device="cuda:0", decode_on=decode_on, gpu_decode_streams=streams,
                             gpu_chunks=float(gpu_chunks) if gpu_chunks else None,
                             **OPTIONS, **extra)
    got = list(pipe)
    assert len(got) == len(want) == len(pipe)
    for gpu, cpu in zip(got, want):
        assert gpu.inputs.is_cuda and gpu.inputs.dtype == torch.float32
        assert gpu.samples == cpu.samples
        for name in ("inputs", "nan_mask", "latitude_weights"):
            host = getattr(gpu, name).cpu().numpy()
            expected = getattr(cpu, name)
            assert host.shape == expected.shape, name
            assert host.tobytes() == expected.tobytes(), f"{name} differs from the CPU path"


def test_zarrpipe_log_prints_the_splits_traces(torch):
    code = ("import sys, zarrpipe; pipe = zarrpipe.Pipeline(sys.argv[1], variables=['t2m', 'z'], "
            "batch_size=2, device='cuda:0', decode_on='split', tensors='raw'); print(len(list(pipe)))")
    done = subprocess.run([sys.executable, "-c", code, store("xr_v3")], capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "ZARRPIPE_LOG": "zarrpipe_codec_gpu::split=debug"})
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0
    assert "split: a batch shared out" in done.stderr and "split: a part decoded" in done.stderr
    assert "\x1b[" not in done.stderr, "no colour codes when stderr is not a terminal"


def test_bfloat16_is_the_cpu_float32_rounded(torch):
    path = store("xr_v3")
    want = cpu_batches(path, nan_fill=0.0)
    got = list(zarrpipe.Pipeline(path, device="cuda:0", dtype=torch.bfloat16, nan_fill=0.0, **OPTIONS))
    for gpu, cpu in zip(got, want):
        assert gpu.inputs.dtype == torch.bfloat16
        assert torch.equal(gpu.inputs.cpu(), torch.from_numpy(cpu.inputs).to(torch.bfloat16))


def test_torch_tensors_are_zarrpipe_memory_without_a_copy(torch):
    pipe = zarrpipe.Pipeline(store("xr_v3"), device="cuda:0", history=2, leads=[1], nan_mask=True,
                             **{**OPTIONS, "shuffle": False})
    for batch in pipe:
        for name in ("inputs", "targets", "nan_mask"):
            tensor = getattr(batch, name)
            assert tensor.device == torch.device("cuda:0")
            assert tensor.data_ptr() == batch.device_pointers[name], f"{name} was copied"
            assert tensor.is_contiguous()


def test_raw_tensors_export_through_dlpack(torch):
    pipe = zarrpipe.Pipeline(store("xr_v3"), device="cuda:0", tensors="raw", **OPTIONS)
    batch = next(iter(pipe))
    raw = batch.inputs
    assert isinstance(raw, zarrpipe.CudaTensor)
    assert raw.__dlpack_device__() == (2, 0)
    tensor = torch.from_dlpack(raw)
    assert tensor.data_ptr() == raw.data_ptr() == batch.device_pointers["inputs"]
    assert list(tensor.shape) == raw.shape
    try:
        import cupy
    except ImportError:
        return
    array = cupy.from_dlpack(raw)
    assert array.data.ptr == raw.data_ptr()
    assert cupy.asnumpy(array).tobytes() == tensor.cpu().numpy().tobytes()


def test_a_side_stream_waits_for_the_batch_on_the_device(torch):
    want = cpu_batches(store("xr_v2"), nan_fill=0.0)
    side = torch.cuda.Stream()
    sums = []
    with torch.cuda.stream(side):
        # No synchronisation anywhere: from_dlpack makes `side` wait on the batch's event.
        for batch in zarrpipe.Pipeline(store("xr_v2"), device="cuda:0", nan_fill=0.0, **OPTIONS):
            sums.append(batch.inputs.double().sum())
    side.synchronize()
    for got, cpu in zip(sums, want):
        assert got.item() == pytest.approx(cpu.inputs.astype(np.float64).sum(), rel=1e-12)


def test_freed_tensors_go_back_to_the_pool(torch):
    first = next(iter(zarrpipe.Pipeline(store("xr_v3"), device="cuda:0", **OPTIONS)))
    batch_bytes = first.inputs.numel() * 4
    del first
    # The pool holds three batches: the pipeline can only go on if torch's frees return memory.
    pipe = zarrpipe.Pipeline(store("xr_v3"), device="cuda:0", prefetch=1,
                             gpu_tensor_memory=3 * batch_bytes, **OPTIONS)
    for epoch in range(3):
        pipe.set_epoch(epoch)
        assert sum(1 for _ in pipe) == len(pipe)


@pytest.mark.parametrize("decode_on", ["gpu", "cpu"])
def test_a_tensor_torch_frees_is_not_overwritten_while_its_kernels_are_queued(torch, decode_on):
    """torch frees a tensor when its last reference goes, with kernels that read it still
    queued: its buffer goes back to zarrpipe's pool, and the next batches must not be written
    into it before those kernels ran. A pool of three batches reuses every buffer at once; a
    long sleep kernel queued before each read keeps the reads waiting while later batches
    are collated."""
    want = cpu_batches(store("xr_v3"), nan_fill=0.0)
    first = next(iter(zarrpipe.Pipeline(store("xr_v3"), device="cuda:0", **OPTIONS)))
    batch_bytes = first.inputs.numel() * 4
    del first
    pipe = zarrpipe.Pipeline(store("xr_v3"), device="cuda:0", decode_on=decode_on, prefetch=1,
                             gpu_tensor_memory=3 * batch_bytes, nan_fill=0.0, **OPTIONS)
    copies = []
    for batch in pipe:
        inputs = batch.inputs  # torch's stream waits for the batch here
        del batch
        torch.cuda._sleep(20_000_000)  # tens of ms of GPU time before the read below
        copies.append(inputs.clone())
        del inputs  # freed now: back to the pool while the clone is still queued
    torch.cuda.synchronize()
    assert len(copies) == len(want)
    for got, cpu in zip(copies, want):
        np.testing.assert_array_equal(got.cpu().numpy(), cpu.inputs)


def test_no_device_memory_is_left_after_the_pipeline_and_tensors_are_dropped(torch):
    # A first pipeline loads what a process keeps (kernels, nvCOMP); then none may leak.
    warm = zarrpipe.Pipeline(store("xr_v3"), device="cuda:0", **OPTIONS)
    kept = [batch.inputs for batch in warm]
    del warm, kept
    gc.collect()
    torch.cuda.synchronize()
    free_before, _ = torch.cuda.mem_get_info()
    pipe = zarrpipe.Pipeline(store("xr_v3"), device="cuda:0", **OPTIONS)
    kept = [batch.inputs for batch in pipe]
    in_use = free_before - torch.cuda.mem_get_info()[0]
    assert in_use > 0
    del pipe, kept
    gc.collect()
    torch.cuda.synchronize()
    free_after, _ = torch.cuda.mem_get_info()
    # The CUDA context zarrpipe shares with torch stays; its allocations do not.
    assert free_before - free_after <= 8 << 20, (
        f"{(free_before - free_after) >> 20} MiB of device memory left "
        f"({in_use >> 20} MiB were in use)"
    )
