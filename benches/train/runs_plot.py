"""The runs of `benches/train/ab.sh` in the order they ran: samples/s per run, one marker per
build and mode, beside the synthetic runs and the target share of synthetic. Two builds run
side by side on a lent host share its slow and fast periods; this plot shows which runs fell
together.

    python benches/train/runs_plot.py ab.jsonl [more.jsonl ...] --out plot.png \
        [--title TEXT] [--target 0.95]

Each file is one call's runs (its `build`, `loader` and `samples_per_s` fields); the files'
runs are numbered on, in the order given.
"""

from __future__ import annotations

import statistics

from plot_runs_common import arguments, figure, finish


def main() -> None:
    args = arguments(__doc__, target=0.95)

    runs, reference, fig, ax = figure(args)
    series: dict[str, list[tuple[int, float]]] = {}
    for number, run in enumerate(runs, start=1):
        if run["loader"] == "synthetic":
            continue
        mode = run["loader"].removeprefix("zarrpipe-")
        series.setdefault(f"{run.get('build', '?')} {mode}", []).append(
            (number, run["samples_per_s"])
        )
    markers = "osD^v<>px*"
    for index, (label, points) in enumerate(sorted(series.items())):
        xs, ys = zip(*points)
        median = statistics.median(ys)
        ax.plot(xs, ys, markers[index % len(markers)], label=f"{label} (median {median:.1f})")
    finish(fig, ax, args, reference, "run, in the order the runs ran")


if __name__ == "__main__":
    main()
