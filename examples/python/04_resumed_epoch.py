"""# 04: a resumed epoch

Training stops in the middle of an epoch; the checkpoint keeps `pipe.state_dict()` (as with
torchdata's StatefulDataLoader); a new process loads it and gets exactly the batches that were
not delivered, in the same shuffled order.

    python examples/python/04_resumed_epoch.py [URL]
"""

import json
import sys

import zarrpipe

url = sys.argv[1] if len(sys.argv) > 1 else zarrpipe.sample_dataset()


def pipeline():
    # The same options before and after the restart (a different seed would be refused).
    return zarrpipe.Pipeline(url, variables=["t2m", "z"], input_dims={"latitude": 64, "longitude": 64},
                             input_overlap={"latitude": 16}, history=2, leads=[1, 2],
                             batch_size=4, shuffle=True, seed=42, tensors="raw")


# --- 1. The whole epoch, for comparison ---
pipe = pipeline()
pipe.set_epoch(3)
whole = [batch.sample_indices for batch in pipe]
print(f"epoch 3: {len(whole)} batches; inputs {pipe.sample_shape} per sample")

# --- 2. Stop after 5 batches and save the state ---
pipe.set_epoch(3)
for count, batch in enumerate(pipe, start=1):
    if count == 5:
        break
checkpoint = json.dumps(pipe.state_dict())
print("checkpoint:", checkpoint)

# --- 3. A new pipeline (a new process) resumes ---
resumed = pipeline()
resumed.load_state_dict(json.loads(checkpoint))
rest = [batch.sample_indices for batch in resumed]
print(f"resumed: {len(rest)} batches, the same as the rest of the epoch: {rest == whole[5:]}")
assert rest == whole[5:]
