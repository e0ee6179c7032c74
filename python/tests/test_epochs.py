"""Epochs as a PyTorch data loader has them: shuffling per epoch and seed, resuming mid-epoch
from state_dict, ranks that together see every sample once."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import zarrpipe
from conftest import store

# 6 steps x 3 latitude windows x 3 longitude windows = 54 samples.
WINDOWS = dict(variables=["t2m", "z"], input_dims={"latitude": 3, "longitude": 5}, tensors="raw")


def order(pipe: zarrpipe.Pipeline) -> list[int]:
    return [index for batch in pipe for index in batch.sample_indices]


def pipeline(**options) -> zarrpipe.Pipeline:
    return zarrpipe.Pipeline(store("xr_v3"), **{**WINDOWS, **options})


def test_shuffling_changes_with_set_epoch_and_repeats_with_the_seed():
    pipe = pipeline(batch_size=8, shuffle=True, seed=7)
    assert pipe.num_samples == 54 and len(pipe) == 7
    first = order(pipe)
    assert sorted(first) == list(range(54)) and first != list(range(54))
    assert order(pipe) == first, "without set_epoch, the same epoch again"
    pipe.set_epoch(1)
    second = order(pipe)
    assert sorted(second) == list(range(54)) and second != first
    again = pipeline(batch_size=8, shuffle=True, seed=7)
    assert order(again) == first
    again.set_epoch(1)
    assert order(again) == second
    assert order(pipeline(batch_size=8, shuffle=True, seed=8)) != first
    assert order(pipeline(batch_size=8, shuffle="blocks", seed=7)) != first
    assert order(pipeline(batch_size=8)) == list(range(54))


def test_len_is_the_batches_per_epoch():
    assert len(pipeline(batch_size=8)) == len(list(pipeline(batch_size=8))) == 7
    assert len(pipeline(batch_size=8, drop_last=True)) == 6


@pytest.mark.parametrize("delivered", [0, 1, 4, 7])
def test_state_dict_resumes_with_exactly_the_remaining_batches(delivered):
    full = [(b.index, b.sample_indices, b.inputs.copy()) for b in pipeline(batch_size=8, shuffle=True, seed=3, epoch=2)]
    pipe = pipeline(batch_size=8, shuffle=True, seed=3)
    pipe.set_epoch(2)
    iterator = iter(pipe)
    for _ in range(delivered):
        next(iterator)
    state = pipe.state_dict()
    assert state["epoch"] == 2
    del iterator  # the epoch stops; its state stays
    assert pipe.state_dict() == state
    state = json.loads(json.dumps(state))  # what a checkpoint keeps

    fresh = pipeline(batch_size=8, shuffle=True, seed=3)
    fresh.load_state_dict(state)
    rest = [(b.index, b.sample_indices, b.inputs) for b in fresh]
    assert len(rest) == 7 - delivered
    for (index, samples, values), (want_index, want_samples, want_values) in zip(rest, full[delivered:]):
        assert (index, samples) == (want_index, want_samples)
        np.testing.assert_array_equal(values, want_values)
    # The next iteration is a whole epoch again.
    assert len(order(fresh)) == 54


def test_a_state_from_other_options_is_refused():
    pipe = pipeline(batch_size=8, shuffle=True, seed=3)
    iterator = iter(pipe)
    next(iterator)
    state = pipe.state_dict()
    other = pipeline(batch_size=8, shuffle=True, seed=4)
    other.load_state_dict(state)
    with pytest.raises(zarrpipe.LayoutError, match="seed"):
        iter(other)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_ranks_together_see_every_sample_once(world_size):
    seen = []
    for rank in range(world_size):
        pipe = pipeline(batch_size=5, shuffle=True, seed=1, rank=rank, world_size=world_size,
                        uneven="drop")
        assert (pipe.rank, pipe.world_size) == (rank, world_size)
        mine = order(pipe)
        assert len(mine) == 54 // world_size
        seen += mine
    assert len(seen) == len(set(seen)), "no sample on two ranks"
    if 54 % world_size == 0:
        assert sorted(seen) == list(range(54))


def test_padded_ranks_cover_every_sample():
    seen = set()
    for rank in range(4):
        seen |= set(order(pipeline(batch_size=5, shuffle=True, rank=rank, world_size=4)))
    assert seen == set(range(54))


def test_ranks_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    pipe = pipeline(batch_size=5)
    assert (pipe.rank, pipe.world_size) == (1, 3)
    assert len(order(pipe)) == 18
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(zarrpipe.LayoutError, match="RANK"):
        pipeline(batch_size=5)


def test_ranks_on_one_host_share_its_cores_for_cpu_decoding(monkeypatch):
    """Under torchrun the ranks on the host (``LOCAL_WORLD_SIZE``) go to the Rust builder's
    ``processes_on_host``, whose default CPU decode threads are each rank's share of the cores
    (its own test); a single process, or a value that is not a count, gives none."""
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert zarrpipe._processes_on_host() is None
    for value, expected in [("2", 2), ("64", 64), ("1", None), ("two", None)]:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", value)
        assert zarrpipe._processes_on_host() == expected, value
    # The builder takes the option.
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert len(order(pipeline(batch_size=5))) > 0


def test_each_rank_on_a_host_decodes_on_its_own_cores(monkeypatch):
    """Under torchrun with several ranks on the host, ``LOCAL_RANK`` goes to the Rust
    builder's ``rank_on_host`` (which keeps the rank's CPU decode threads on its share of the
    cores: its own test); a single process, or a value that is not a count, gives none."""
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert zarrpipe._rank_on_host() is None
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    for value, expected in [("0", 0), ("3", 3), ("gpu1", None), ("-1", None)]:
        monkeypatch.setenv("LOCAL_RANK", value)
        assert zarrpipe._rank_on_host() == expected, value
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert len(order(pipeline(batch_size=5))) > 0


def test_ranks_on_one_host_share_their_waits_under_the_launchers_name(monkeypatch):
    """Under torchrun with several ranks on the host, every rank passes the same name to the
    Rust builder's ``share_waits_on_host`` (so that ``auto`` in each sees any rank's waits,
    its own test): the launcher's process id, the parent of every rank, and its restart count.
    A single process shares nothing."""
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert zarrpipe._waits_shared_by() is None
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    assert zarrpipe._waits_shared_by() == f"torchrun-{os.getppid()}-0"
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    assert zarrpipe._waits_shared_by() == f"torchrun-{os.getppid()}-2"
    # The builder takes it (it opens the table only for `auto`, on a GPU: its own test).
    assert len(order(pipeline(batch_size=5))) > 0


def test_a_loaded_state_holds_for_its_own_epoch_only():
    pipe = pipeline(batch_size=8, shuffle=True, seed=3)
    pipe.set_epoch(1)
    iterator = iter(pipe)
    next(iterator), next(iterator)
    state = pipe.state_dict()
    del iterator
    fresh = pipeline(batch_size=8, shuffle=True, seed=3)
    fresh.load_state_dict(state)
    fresh.set_epoch(1)  # the training loop's own call, for the saved epoch: still resumes
    assert len(list(fresh)) == 5
    fresh.load_state_dict(state)
    fresh.set_epoch(2)  # the next epoch: whole, in its own order
    assert len(list(fresh)) == 7 and fresh.state_dict()["epoch"] == 2


@pytest.mark.parametrize("uneven", ["drop", "pad"])
@pytest.mark.parametrize("stop_after", [0, 2, 5])
def test_two_ranks_resumed_mid_epoch_deliver_the_epoch_exactly_once(uneven, stop_after):
    """Two ranks (as under torchrun), shuffled, 27 samples each in batches of 4 (the last
    batch short), each rank stopped after `stop_after` batches and resumed from its saved
    state in a new pipeline: each rank delivers exactly what an uninterrupted run delivers,
    and together they deliver each sample once."""
    options = dict(batch_size=4, shuffle=True, seed=11, world_size=2, uneven=uneven, epoch=3)
    delivered = []
    for rank in range(2):
        whole = order(pipeline(rank=rank, **options))
        pipe = pipeline(rank=rank, **options)
        iterator = iter(pipe)
        first = [i for _ in range(stop_after) for i in next(iterator).sample_indices]
        state = json.loads(json.dumps(pipe.state_dict()))
        del iterator
        resumed = pipeline(rank=rank, **options)
        resumed.load_state_dict(state)
        rest = order(resumed)
        assert first + rest == whole, f"rank {rank}: the resumed epoch differs"
        assert len(whole) == 27
        delivered += whole
    assert sorted(delivered) == list(range(54)), "each sample exactly once over the two ranks"


def test_odd_sample_counts_drop_or_pad_as_distributed_sampler():
    # 54 samples on 4 ranks: drop gives 13 each (2 left out), pad 14 each (2 repeated).
    for uneven, per_rank in (("drop", 13), ("pad", 14)):
        ranks = [order(pipeline(batch_size=5, shuffle=True, seed=2, rank=r, world_size=4,
                                uneven=uneven)) for r in range(4)]
        assert all(len(r) == per_rank for r in ranks), uneven
        flat = [i for r in ranks for i in r]
        if uneven == "drop":
            assert len(set(flat)) == 52
        else:
            assert set(flat) == set(range(54)) and len(flat) - len(set(flat)) == 2


def test_metrics_count_the_epoch():
    pipe = pipeline(batch_size=8)
    assert pipe.metrics() == {}
    batches = 0
    for _ in pipe:
        batches += 1
        assert pipe.metrics()["batches"] == batches
    metrics = pipe.metrics()
    assert metrics["batches"] == 7 and metrics["samples"] == 54
    assert metrics["gpu_decoded_chunks"] == 0 and metrics["gpu_busy_s"] == 0.0
    assert metrics["cpu_decoded_chunks"] + metrics["missing_chunks"] == metrics["chunks"] > 0
    assert metrics["consumer_wait_s"] >= metrics["first_wait_s"] >= 0.0
    assert 0.0 < metrics["decode_cpu_s"] <= metrics["decode_busy_s"]
    assert metrics["delivered_bytes"] == 54 * pipe.sample_shape[0] * 3 * 5 * 4


def test_epochs_in_a_row_deliver_what_epochs_apart_do():
    """One stream for the epochs iterated one after the other (the default) against a stream
    per epoch: the same batches and states, through a skipped epoch, a repeated one, an epoch
    stopped early and one resumed from a saved state."""
    def epoch(pipe: zarrpipe.Pipeline, number: int, stop_after: int | None = None):
        pipe.set_epoch(number)
        delivered = []
        for batch in pipe:
            delivered.append((batch.index, batch.sample_indices, batch.inputs.copy()))
            if len(delivered) == stop_after:
                break
        return delivered, pipe.state_dict()

    options = dict(batch_size=8, shuffle=True, seed=5)
    in_a_row, apart = pipeline(**options), pipeline(epochs_in_a_row=False, **options)
    plan = [(0, None), (1, None), (1, None), (4, None), (5, 3), (6, None), (7, None)]
    for number, stop_after in plan:
        got, state = epoch(in_a_row, number, stop_after)
        want, want_state = epoch(apart, number, stop_after)
        assert state == want_state, f"epoch {number}"
        assert len(got) == len(want) == (stop_after or 7), f"epoch {number}"
        for (index, samples, values), (want_index, want_samples, want_values) in zip(got, want):
            assert (index, samples) == (want_index, want_samples), f"epoch {number}"
            np.testing.assert_array_equal(values, want_values)
    assert state == {"epoch": 7, "sampler": {**state["sampler"], "epoch": 7, "position": 7}}
    # A state saved mid-epoch resumes in a row too, and the epoch after follows on.
    in_a_row.set_epoch(2)
    iterator = iter(in_a_row)
    next(iterator), next(iterator)
    saved = in_a_row.state_dict()
    del iterator
    resumed = pipeline(**options)
    resumed.load_state_dict(saved)
    rest = [b.sample_indices for b in resumed]
    resumed.set_epoch(3)
    after = order(resumed)
    assert rest == [b.sample_indices for b in pipeline(epoch=2, **options)][2:]
    assert after == order(pipeline(epoch=3, epochs_in_a_row=False, **options))
