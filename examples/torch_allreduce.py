"""torch.distributed on Loom: run with `torchrun --nproc-per-node=4 examples/torch_allreduce.py`."""
import torch
import torch.distributed as dist

import loom  # noqa: F401  (registers the "loom" backend)


def main():
    dist.init_process_group("loom")  # rank, world size and rendezvous from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    expected = world * (world + 1) / 2
    assert torch.equal(t, torch.full((4,), expected)), t
    print(f"rank {rank}: loom ok, all_reduce gave {t[0].item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
