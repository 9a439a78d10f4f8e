"""Minimal PyTorch DDP check: every rank all-reduces its rank; reads no Slurm variable.

    srun -N2 --ntasks-per-node=2 python examples/ddp_allreduce.py

torch.distributed bootstraps from MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE, which Muster
sets for every task of a step.
"""

import os

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group(backend="gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    expected = world * (world - 1) / 2
    line = (f"rank {rank}/{world} local {os.environ.get('LOCAL_RANK')} sum {t.item():.0f} "
            f"{'ok' if t.item() == expected else 'WRONG'}\n")
    # one write(2) per line: workers that share a stdout (torchrun) cannot split each other's
    # lines (print() may write the text and the newline separately when unbuffered)
    os.write(1, line.encode())
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
