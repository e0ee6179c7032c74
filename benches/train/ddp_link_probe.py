"""Whether the batches' uploads and DDP's gradient all-reduce share a link: under torchrun, each
rank times an NCCL all-reduce of 256 MB alone and beside its own uploads of 2 GiB from pinned
memory on another stream, and the uploads alone (one rank at a time) and on every rank at once.

    NCCL_DEBUG=INFO torchrun --standalone --nproc-per-node 2 benches/train/ddp_link_probe.py
"""
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    gradients = torch.ones(64 * 2**20, device=device)  # 256 MB of fp32
    host = torch.empty(2 * 2**30, dtype=torch.uint8).pin_memory()
    target = torch.empty_like(host, device=device)

    def all_reduce_seconds(times: int = 20) -> float:
        dist.barrier()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(times):
            dist.all_reduce(gradients)
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / times

    def upload_gb_per_s(times: int = 10) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(times):
            target.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        return times * host.numel() / (time.perf_counter() - start) / 1e9

    all_reduce_seconds(3)  # NCCL's set-up
    alone = all_reduce_seconds()
    upload_alone = 0.0
    for turn in range(world):
        dist.barrier()
        if rank == turn:
            upload_alone = upload_gb_per_s()
    dist.barrier()
    upload_together = upload_gb_per_s()
    with torch.cuda.stream(torch.cuda.Stream(device)):
        for _ in range(40):  # about 1.5 s of uploads, queued behind nothing
            target.copy_(host, non_blocking=True)
    beside = all_reduce_seconds()
    torch.cuda.synchronize()
    print(f"rank {rank}: all-reduce of 256 MB {alone * 1e3:.2f} ms alone, {beside * 1e3:.2f} ms "
          f"beside uploads; uploads {upload_alone:.1f} GB/s alone, {upload_together:.1f} with "
          f"every rank uploading", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
