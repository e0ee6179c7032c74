"""Missing time steps and training statistics on the gap stores written by xarray
(tests/fixtures/stores/gaps_v2, gaps_v3), against what numpy and pandas found
(tests/fixtures/expected/gaps.json)."""

import json

import numpy as np
import pytest

import zarrpipe
from conftest import FIXTURES, store

EXPECTED = json.loads((FIXTURES / "expected" / "gaps.json").read_text())


@pytest.fixture(params=["gaps_v2", "gaps_v3"])
def gap_store(request):
    return store(request.param)


def sample_dates(pipe, path):
    dates = EXPECTED["stored_dates"]
    return [dates[origin[0]] for batch in pipe for _, origin in batch.samples]


def test_skip_leaves_out_samples_touching_missing_steps(gap_store):
    pipe = zarrpipe.Pipeline(gap_store, variables=["t2m", "z"], batch_size=4, tensors="raw")
    assert sample_dates(pipe, gap_store) == EXPECTED["kept_history1"]
    pipe = zarrpipe.Pipeline(gap_store, variables=["t2m", "z"], history=2, leads=[1, 2],
                             tensors="raw")
    assert sample_dates(pipe, gap_store) == EXPECTED["kept_history2_leads_1_2"]


def test_fill_keeps_them_with_nan(gap_store):
    pipe = zarrpipe.Pipeline(gap_store, variables=["t2m"], history=2, leads=[1, 2],
                             missing="fill", nan_mask=True, batch_size=16, tensors="raw")
    (batch,) = list(pipe)
    assert batch.inputs.shape[0] == 13  # the regular grid's 16 steps, less history and leads
    # Sample at grid step 5 (2020-01-02T06:00), left out by the coordinate: its own step is NaN.
    row = [n for n, (_, origin) in enumerate(batch.samples) if origin[0] == 5][0]
    assert np.isnan(batch.inputs[row, 1]).all() and not batch.nan_mask[row, 1].any()
    assert not np.isnan(batch.inputs[row, 0]).all()


def test_error_names_the_dates(gap_store):
    with pytest.raises(zarrpipe.ZarrpipeError, match="2020-01-03T00:00"):
        zarrpipe.Pipeline(gap_store, variables=["t2m", "z"], missing="error")
    with pytest.raises(ValueError, match="missing"):
        zarrpipe.Pipeline(gap_store, missing="sometimes")


def test_stats_per_channel_over_a_date_range_equal_numpy(gap_store):
    start, end = EXPECTED["stats_range"]
    report = zarrpipe.stats(gap_store, start=start, end=end)
    assert report["computed_over"]["start"] == start
    for ours, numpy in zip(report["channels"], EXPECTED["stats"], strict=True):
        # numpy's script names levels by index, zarrpipe by value: the same channels in order.
        assert ours["variable"] == numpy["channel"].split("[")[0]
        assert ours["count"] == numpy["count"]
        for key in ("mean", "std", "min", "max"):
            assert ours[key] == pytest.approx(numpy[key], rel=1e-12)
            assert ours["tendency"][key] == pytest.approx(numpy["tendency"][key], rel=1e-12)
    # What normalize= takes: each level with its own statistics.
    options = dict(variables=["t2m", "z"], batch_size=2, tensors="raw")
    raw = next(iter(zarrpipe.Pipeline(gap_store, **options)))
    batch = next(iter(zarrpipe.Pipeline(gap_store, normalize=report, **options)))
    for channel in range(3):
        entry = report["channels"][channel]
        want = (raw.inputs[:, channel] - np.float32(entry["mean"])) / np.float32(entry["std"])
        np.testing.assert_array_equal(batch.inputs[:, channel], want)


def test_info_reports_missing_steps(gap_store):
    missing = zarrpipe.info(gap_store)["missing"]
    assert missing["frequency_text"] == "6 hours"
    dates = [d for gap in missing["gaps"] for d in gap["dates"]]
    assert dates == EXPECTED["gap_dates"]
    assert [s["date"] for s in missing["absent"]] == EXPECTED["absent_dates"]
