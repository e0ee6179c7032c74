"""The hackathon's DALI loader (examples/python/hackathon_dali.py) delivers what zarr-python
reads: every batch of an epoch and the first of the next, for one rank and for the second of
two, against the store's fields read with zarr-python and normalised alike.

    python3 benches/train/check_dali_loader.py STORE [--gpu]

STORE is a setup A store (`zarrpipe generate --variables setup-a --time 21 --lat 64 --lon
128` is enough). Without --gpu the DALI pipeline runs on the CPU alone (no GPU needed); with
--gpu, on cuda:0 with zarr-python's CuPy buffers, as the hackathon ran it. Needs DALI
(`benches/train/dali_wheels.sh`), zarr-python and numpy; exits 1 on the first difference.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import zarr

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python"))
import hackathon_dali  # noqa: E402

SETUP_A = ["t2m", "V500", "U500", "T500", "Z500", "Q500"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--batch-size", type=int, default=4)
    args = parser.parse_args()
    group = zarr.open_group(args.store, mode="r")
    fields = {name: group[name][:] for name in SETUP_A}
    statistics = {"channels": [{"variable": name, "mean": float(fields[name].mean()),
                                "std": float(fields[name].std())} for name in SETUP_A]}

    def expected(times) -> np.ndarray:
        return np.stack([np.stack([(fields[c["variable"]][t] - c["mean"]) / c["std"]
                                   for c in statistics["channels"]]) for t in times]).astype(np.float32)

    for rank, world in [(0, 1), (1, 2)]:
        source = hackathon_dali.SeqZarrSource(args.store, SETUP_A, args.batch_size, statistics,
                                              rank, world, gpu=args.gpu)
        pipe = hackathon_dali.pipeline(source, 0 if args.gpu else None)
        for number in range(len(source) + 1):  # past the end: the next epoch, in the same order
            outputs = pipe.run()
            if args.gpu:
                inputs, targets = (np.asarray(o.as_cpu().as_tensor())[0] for o in outputs)
            else:
                inputs, targets = (np.asarray(o.as_tensor())[0] for o in outputs)
            steps = source.batch_mapping[number % len(source)]
            for name, got, want in [("inputs", inputs, expected(steps)),
                                    ("targets", targets, expected(steps + 1))]:
                if got.shape != want.shape or not np.allclose(got, want, atol=1e-5):
                    print(f"rank {rank} of {world}, batch {number}: {name} differ "
                          f"({got.shape} against {want.shape})", file=sys.stderr)
                    return 1
        print(f"rank {rank} of {world}: {len(source)} batches and the next epoch's first as "
              f"zarr-python reads them (steps {source.batch_mapping.tolist()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
