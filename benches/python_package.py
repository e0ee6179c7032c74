"""The Python package's delivery rate on a W1 store, timed as `zarrpipe bench` times the Rust
pipeline, so the two can run side by side:

    python3 benches/python_package.py STORE [--device cpu|cuda:0] [--decode-on cpu|gpu|auto]
        [--passes 3] [--in-a-row]

Apart (the default): one pipeline, each pass an epoch of its own (`iter(pipe)`), the best of
`--passes` after one warm-up pass. `--in-a-row`: the epochs of one loop that calls `set_epoch`
(as a training loop does), timed together after two warm-up epochs. Prints one JSON line with
`decoded_gb_per_s`; beside it, `zarrpipe bench STORE --device ... --decode ... [--epochs-in-a-row]
--passes N --json` in the same call.
"""

from __future__ import annotations

import argparse
import json
import time

import zarrpipe


def consume(pipe, device: str) -> int:
    """Takes every batch of one epoch (on a GPU, until its tensors are written); returns the
    decoded bytes delivered."""
    delivered = 0
    for batch in pipe:
        delivered += batch.inputs.nbytes
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
    return delivered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--decode-on", default=None)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--in-a-row", action="store_true")
    args = parser.parse_args()
    options = dict(batch_size=4, device=args.device)
    if args.decode_on is not None:
        options["decode_on"] = args.decode_on
    pipe = zarrpipe.Pipeline(args.store, **options)
    if args.in_a_row:
        for epoch in range(2):
            pipe.set_epoch(epoch)
            consume(pipe, args.device)
        started, delivered = time.perf_counter(), 0
        for epoch in range(2, 2 + args.passes):
            pipe.set_epoch(epoch)
            delivered += consume(pipe, args.device)
        rate = delivered / (time.perf_counter() - started) / 1e9
    else:
        consume(pipe, args.device)
        rate = 0.0
        for _ in range(args.passes):
            started = time.perf_counter()
            delivered = consume(pipe, args.device)
            rate = max(rate, delivered / (time.perf_counter() - started) / 1e9)
    print(json.dumps({"decoded_gb_per_s": rate, "device": args.device, "decode_on": args.decode_on,
                      "in_a_row": args.in_a_row, "passes": args.passes}))


if __name__ == "__main__":
    main()
