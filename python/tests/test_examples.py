"""The notebook-style examples (examples/python/) run on the sample dataset, each in a fresh
interpreter; those that need torch or a GPU skip, saying why, where there is none."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import zarrpipe

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "python"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A working directory with the sample dataset (data/sample.zarr) written once."""
    return tmp_path_factory.mktemp("examples")


def run(example: str, workdir: Path) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / example)], cwd=workdir,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{example} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def test_01_open_dataset(workdir):
    out = run("01_open_dataset.py", workdir)
    assert "t2m" in out and "inputs (8, 43, 64, 64)" in out  # all 7 variables, z and others on 13 levels


def test_04_resumed_epoch(workdir):
    out = run("04_resumed_epoch.py", workdir)
    assert "the same as the rest of the epoch: True" in out


def test_02_cpu_batches_into_torch(workdir):
    if not has_torch():
        pytest.skip("skipped: example 02 feeds torch, which is not installed")
    assert "epoch 1:" in run("02_cpu_batches_into_torch.py", workdir)


def test_03_gpu_batches_bf16(workdir):
    if not zarrpipe.cuda_available():
        pytest.skip("skipped: example 03 needs a build with the `cuda` feature")
    if not has_torch():
        pytest.skip("skipped: example 03 needs torch")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("skipped: example 03 needs a CUDA device")
    assert "area-weighted channel means" in run("03_gpu_batches_bf16.py", workdir)
