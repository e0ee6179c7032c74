"""Bad input raises a clear exception that names what failed; Ctrl-C stops a waiting epoch."""

from __future__ import annotations

import http.server
import shutil
import signal
import threading
import time
import _thread
from pathlib import Path

import pytest

import zarrpipe
from conftest import store


def test_missing_store():
    with pytest.raises(zarrpipe.StoreError) as raised:
        zarrpipe.Pipeline("/nonexistent/store.zarr")
    assert raised.value.url == "/nonexistent/store.zarr"
    assert "/nonexistent/store.zarr" in str(raised.value)


def test_missing_variable_names_the_variable_and_the_choices():
    with pytest.raises(zarrpipe.StoreError, match="no variable `t3m`.*t2m") as raised:
        zarrpipe.Pipeline(store("xr_v3"), variables=["t3m"])
    assert raised.value.variable == "t3m"
    assert isinstance(raised.value, zarrpipe.ZarrpipeError)


@pytest.mark.parametrize(
    "options, error, pattern",
    [
        (dict(input_dims={"latitude": 64}), zarrpipe.LayoutError, "size 64.*length 11"),
        (dict(input_dims={"latitude": 0}), zarrpipe.LayoutError, "`latitude`.*at least 1"),
        (dict(input_dims={"latitude": 4}, input_overlap={"latitude": 4}), zarrpipe.LayoutError,
         "overlap 4 of `latitude`"),
        (dict(input_overlap={"longitude": 1}), zarrpipe.LayoutError, "`longitude`"),
        (dict(input_dims={"height": 4}), zarrpipe.LayoutError, "height"),
        (dict(batch_size=0), zarrpipe.LayoutError, "batch"),
        (dict(rank=2, world_size=2), zarrpipe.LayoutError, "rank"),
        (dict(normalize=[{"variable": "u10", "mean": 0, "std": 1}]), zarrpipe.CollateError,
         "no statistics for variable `t2m`"),
        (dict(shuffle="sometimes"), ValueError, "shuffle"),
        (dict(dtype="bfloat16"), ValueError, "float32"),
        (dict(device="tpu:0"), ValueError, "device"),
        (dict(history=2), ValueError, "leads"),
        (dict(gpu_decode_streams=0), ValueError, "gpu_decode_streams"),
        (dict(device="cuda:0", decode_on="split", gpu_chunks=1.5), ValueError,
         "gpu_chunks.*from 0 to 1"),
        (dict(device="cuda:0", decode_on="auto", gpu_chunks=0.5), ValueError, "gpu_chunks.*split"),
        (dict(batch_size="eight"), TypeError, "batch_size"),
    ],
)
def test_bad_options_raise_when_the_pipeline_is_made(options, error, pattern):
    with pytest.raises(error, match=pattern):
        zarrpipe.Pipeline(store("xr_v3"), **{"variables": ["t2m"], **options})


def test_unknown_options_are_type_errors():
    with pytest.raises(TypeError):
        zarrpipe.Pipeline(store("xr_v3"), batchsize=3)


@pytest.mark.skipif(zarrpipe.cuda_available(), reason="this build has the GPU path")
def test_a_cuda_device_without_the_cuda_build_says_how_to_get_it():
    pipe = zarrpipe.Pipeline(store("xr_v3"), variables=["t2m"], device="cuda:0")
    with pytest.raises(zarrpipe.GpuError, match="--features cuda"):
        iter(pipe)


def test_a_corrupt_chunk_fails_its_batch_with_variable_key_and_url(tmp_path: Path):
    path = tmp_path / "corrupt.zarr"
    shutil.copytree(store("xr_v3"), path)
    (path / "t2m" / "c" / "1" / "0" / "0").write_bytes(b"not zstd at all")
    pipe = zarrpipe.Pipeline(path, variables=["t2m"], batch_size=2, tensors="raw")
    iterator = iter(pipe)
    assert next(iterator).index == 0
    with pytest.raises(zarrpipe.DecodeError) as raised:
        next(iterator)
    error = raised.value
    assert (error.variable, error.key, error.url) == ("t2m", "t2m/c/1/0/0", str(path))
    assert "t2m/c/1/0/0" in str(error) and "`t2m`" in str(error)


class _HangingStore(http.server.SimpleHTTPRequestHandler):
    """Serves a store's metadata; chunk requests hang (a stalled server)."""

    def do_GET(self):
        if "/c/" in self.path:
            time.sleep(20)
            return
        super().do_GET()

    def log_message(self, *args):
        pass


def test_ctrl_c_stops_an_epoch_that_waits():
    root = store("xr_v3")
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: _HangingStore(*a, directory=root)
    )
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    previous = signal.getsignal(signal.SIGINT)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        # missing="ignore": looking for missing steps reads the time coordinate, whose chunk
        # this server never serves.
        pipe = zarrpipe.Pipeline(url, variables=["t2m"], batch_size=2, missing="ignore",
                                 store_options={"allow_http": True})
        # A shell without job control starts background jobs with SIGINT ignored, and then
        # interrupt_main does nothing: Python's own handler, as in a terminal.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        threading.Timer(0.5, _thread.interrupt_main).start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            for _ in pipe:
                pass
        assert time.monotonic() - started < 3, "Ctrl-C took too long"
    finally:
        signal.signal(signal.SIGINT, previous)
        server.shutdown()


def test_a_pipeline_iterated_in_a_forked_process_says_why_not():
    import os

    pipe = zarrpipe.Pipeline(store("xr_v3"), variables=["t2m"])
    pipe._pid = os.getpid() + 1  # as after a fork
    with pytest.raises(RuntimeError, match="another process"):
        iter(pipe)
