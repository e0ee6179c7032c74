"""The peer comparison as a Markdown table and a bar chart, from run.sh's results.json.

    python3 benches/peers/report.py results.json [--markdown report.md] [--plot docs/peers_w1.png]

results.json: {"host": {...}, "results": [one object per tool and dataset]} as run.sh writes it
(a list of results, or JSON lines, are read too). Per dataset: each tool's decoded GB/s and
samples/s, the ratio zarrpipe GPU / that tool, the ratio zarrpipe CPU / that tool for tools
delivering to host memory, and whether its checksum agrees with zarrpipe's (relative tolerance
1e-9). The Markdown goes to
stdout unless --markdown names a file.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap

TOLERANCE = 1e-9


def load(path):
    text = open(path).read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]
    if isinstance(data, dict):
        return data.get("host", {}), data.get("results", [])
    return {}, data


def is_zarrpipe(row):
    """zarrpipe's own program (`zarrpipe bench`); the Python package is a row like the peers'."""
    if row.get("peer") == "zarrpipe-python":
        return False
    return row.get("peer") == "zarrpipe" or str(row.get("tool", "")).startswith("zarrpipe")


def on_gpu(row):
    return str(row.get("device", "")).startswith("cuda")


def label(row):
    tool = row.get("tool", row.get("peer", "?"))
    if is_zarrpipe(row):
        if row.get("decode_option"):  # run.sh's DECODES: one row per `--decode` side asked for
            decode = row["decode_option"].replace(":in-a-row", ", epochs in a row")
            return f"{tool.split(' (')[0]} (decode {decode})"
        return f"{tool.split(' (')[0]} ({'GPU' if on_gpu(row) else 'CPU'})"
    return tool


def checksum_mark(row, reference):
    if reference is None or row.get("checksum") is None:
        return "–"
    a, b = float(row["checksum"]), float(reference)
    diff = abs(a - b) / max(abs(a), abs(b), 1e-300)
    return ("✓" if diff <= TOLERANCE else "✗") + f" ({diff:.0e})"


def by_dataset(rows):
    datasets = {}
    for row in rows:
        datasets.setdefault(row.get("dataset", "?"), []).append(row)
    return datasets


def reference_rows(rows):
    """zarrpipe's GPU row and CPU row (either may be None), and the checksum to agree with (the
    GPU row's, else the CPU row's). With several GPU rows (run.sh's DECODES), the one with the
    device's default decoding, else `--decode gpu`'s, else the first."""
    zp = [r for r in rows if is_zarrpipe(r) and "skipped" not in r]
    gpus = [r for r in zp if on_gpu(r)]
    gpu = next(
        (r for r in gpus if not r.get("decode_option")),
        next((r for r in gpus if r.get("decode_option") == "gpu"), gpus[0] if gpus else None),
    )
    cpu = next((r for r in zp if not on_gpu(r)), None)
    check = next((r["checksum"] for r in (gpu, cpu) if r and r.get("checksum") is not None), None)
    return gpu, cpu, check


def like_for_like(reference, row, rows):
    """The zarrpipe row a row is compared with: for a row timed with epochs in a row,
    zarrpipe's GPU row timed the same way (`--decode gpu`, in a row), when there is one, so an
    in-a-row row is not divided by an apart one."""
    if reference is None or not row.get("epochs_in_a_row") or reference.get("epochs_in_a_row"):
        return reference
    in_a_row = [
        r for r in rows
        if is_zarrpipe(r) and on_gpu(r) and r.get("epochs_in_a_row") and "skipped" not in r
    ]
    return next((r for r in in_a_row if r.get("decode_option") == "gpu:in-a-row"),
                in_a_row[0] if in_a_row else reference)


def ratio(reference, row):
    if reference is None or not row.get("gb_per_s"):
        return ""
    return f"{reference['gb_per_s'] / row['gb_per_s']:.1f}x"


def markdown(host, rows):
    out = []
    if host:
        gpus = "; ".join(host.get("gpus") or []) or "none"
        mem = host.get("memory_bytes")
        out.append(
            f"Host: {host.get('cpu', '?')}, {host.get('cores', '?')} cores"
            + (f", {mem / 2**30:.0f} GiB RAM" if mem else "")
            + f"; GPU: {gpus}; Linux {host.get('kernel', '?')}; Python {host.get('python', '?')}; "
            f"{host.get('zarrpipe', 'zarrpipe')}; {host.get('date', '')}."
        )
        out.append("")
    for dataset, drows in by_dataset(rows).items():
        gpu, cpu, check = reference_rows(drows)
        first = next((r for r in drows if r.get("sample_shape") or r.get("codec")), {})
        shape = first.get("sample_shape")
        samples = next((r.get("samples") for r in drows if r.get("samples")), None)
        desc = f"**{dataset}**"
        if first.get("codec"):
            desc += f": {first['codec']}"
        if shape:
            desc += f"; samples `[{', '.join(map(str, shape))}]` float32"
        if samples:
            desc += f", {samples} per epoch"
        decoded = next((r.get("decoded_bytes") for r in drows if r.get("decoded_bytes")), None)
        if decoded:
            desc += f" ({decoded / 1e9:.2f} GB decoded)"
        batch = first.get("batch_size")
        if batch:
            desc += f", batches of {batch}"
        passes = next((r.get("passes") for r in drows if r.get("passes")), 2)
        desc += f". Best of {passes} passes after a warm-up pass"
        if any(r.get("epochs_in_a_row") for r in drows):
            desc += (
                "; rows with epochs in a row: the epochs of one stream (the next one's first"
                " batches load during this one's last), 10 timed together after two warm-up epochs"
            )
        out.append(desc + ".")
        out.append("")
        # zarrpipe GPU / tool for every row (rows timed in a row against zarrpipe's GPU row timed
        # in a row); zarrpipe CPU / tool for the rows delivered to host memory (the CPU path's
        # comparison). Without a GPU row, only the second.
        columns = (["zarrpipe GPU / tool"] if gpu else []) + (["zarrpipe CPU / tool (host rows)"] if cpu else [])
        out.append(
            "| tool | delivered to | GB/s | samples/s | " + " | ".join(columns + ["checksum vs zarrpipe"]) + " |"
        )
        out.append("| --- | --- | ---: | ---: | " + "---: | " * len(columns) + "--- |")
        ordered = sorted(
            drows, key=lambda r: (not is_zarrpipe(r), "skipped" in r, not on_gpu(r), -(r.get("gb_per_s") or 0))
        )
        for row in ordered:
            where = "GPU" if on_gpu(row) else "host"
            if "skipped" in row:
                reason = re.sub(r"\s+", " ", str(row["skipped"]))[:160].replace("|", "/")
                out.append(f"| {label(row)} | {where} | – | – | " + "– | " * len(columns) + f"skipped: {reason} |")
                continue
            cells = ([ratio(like_for_like(gpu, row, drows), row)] if gpu else []) + (
                [ratio(cpu, row) if not on_gpu(row) else ""] if cpu else []
            )
            sps = row.get("samples_per_s") or (row["samples"] / row["seconds"] if row.get("seconds") else 0)
            out.append(
                f"| {label(row)} | {where} | {row['gb_per_s']:.2f} | {sps:.1f} | "
                + " | ".join(cells + [checksum_mark(row, check)])
                + " |"
            )
        out.append("")
    versions = {}
    for row in rows:
        for name, v in (row.get("versions") or {}).items():
            versions.setdefault(name, set()).add(str(v))
    if versions:
        out.append(
            "Versions: " + ", ".join(f"{name} {'/'.join(sorted(v))}" for name, v in sorted(versions.items())) + "."
        )
        out.append("")
    notes = sorted({f"{row.get('peer')}: {n}" for row in rows for n in row.get("notes") or []})
    if notes:
        out.append("Notes:")
        out.extend(f"- {n}" for n in notes)
        out.append("")
    return "\n".join(out)


def plot(rows, path, host):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = {d: [r for r in rs if "skipped" not in r and r.get("gb_per_s")] for d, rs in by_dataset(rows).items()}
    datasets = {d: rs for d, rs in datasets.items() if rs}
    if not datasets:
        print("nothing to plot", file=sys.stderr)
        return
    # Long peer names (their settings in parentheses) wrapped, so the bars keep the width.
    height = sum(len(rs) for rs in datasets.values()) * 0.5 + 1.1 * len(datasets) + 0.6
    fig, axes = plt.subplots(
        len(datasets), 1, figsize=(10, height), squeeze=False,
        gridspec_kw={"height_ratios": [len(rs) for rs in datasets.values()]},
    )  # fmt: skip
    for ax, (dataset, drows) in zip(axes[:, 0], datasets.items()):
        drows = sorted(drows, key=lambda r: r["gb_per_s"])
        names = [label(r) if is_zarrpipe(r) else f"{label(r)} -> {'GPU' if on_gpu(r) else 'host'}" for r in drows]
        names = [textwrap.fill(name, 60) for name in names]
        values = [r["gb_per_s"] for r in drows]
        colors = ["#d62728" if is_zarrpipe(r) else ("#1f77b4" if on_gpu(r) else "#7f7f7f") for r in drows]
        bars = ax.barh(range(len(values)), values, color=colors)
        ax.set_yticks(range(len(values)), names, fontsize=7)
        for bar, v in zip(bars, values):
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {v:.2f}", va="center", fontsize=8)
        ax.set_xlim(0, max(values) * 1.15)
        passes = drows[0].get("passes", 2)
        ax.set_title(f"{dataset}: decoded GB/s delivered (best of {passes} passes)", fontsize=10, loc="left")
        ax.grid(axis="x", alpha=0.3)
    gpus = "; ".join((host or {}).get("gpus") or [])
    if host:
        cpu = f"{host.get('cpu', '')}, {host.get('cores', '?')} cores"
        fig.suptitle(f"{cpu}{'; ' + gpus if gpus else ''}", fontsize=9, x=0.99, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results")
    parser.add_argument("--markdown", help="write the table here (default: stdout)")
    parser.add_argument("--plot", help="write the bar chart (PNG) here")
    args = parser.parse_args()
    host, rows = load(args.results)
    text = markdown(host, rows)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
        print(f"wrote {args.markdown}", file=sys.stderr)
    else:
        print(text)
    if args.plot:
        try:
            plot(rows, args.plot, host)
        except ImportError as err:
            print(f"no chart: matplotlib is not installed ({err})", file=sys.stderr)


if __name__ == "__main__":
    main()
