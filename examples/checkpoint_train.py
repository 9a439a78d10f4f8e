"""Checkpoint/resume contract, runnable: a PyTorch (CPU, gloo) DDP training loop that survives a
node failure.

    #!/bin/bash
    #SBATCH -N2 --ntasks-per-node=1 --requeue --open-mode=append
    srun python examples/checkpoint_train.py --steps 200 --ckpt-dir $PWD/ckpt --out $PWD/final.pt

The contract Muster keeps:
* when a node of the job dies, the batch job is requeued under the same id and started again
  (``SLURM_RESTART_COUNT`` is 1, 2, ...); ``--open-mode=append`` keeps the earlier output;
* every task gets MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE, so ``init_method="env://"`` works.

The contract the script keeps:
* every ``--every`` steps rank 0 writes a checkpoint **atomically** (write to a temporary file in
  the same directory, fsync, ``os.replace``), so a crash never leaves a torn checkpoint;
* at start it resumes from the newest checkpoint if one exists (whatever SLURM_RESTART_COUNT
  says), restoring model, optimizer, step and RNG state;
* each step's data is generated from the step number alone, so a resumed run computes exactly
  what an uninterrupted run would: the final parameters are bit-identical.
"""

from __future__ import annotations

import argparse
import glob
import os
import time

import torch
import torch.distributed as dist


def build_model() -> torch.nn.Module:
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def batch(step: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The data of one step for one rank: a pure function of (step, rank)."""
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(64, 16, generator=g)
    y = (x[:, :1] * 0.5 - x[:, 1:2] * 0.25).tanh()
    return x, y


def latest_checkpoint(ckpt_dir: str) -> str | None:
    paths = sorted(glob.glob(os.path.join(ckpt_dir, "step-*.pt")))
    return paths[-1] if paths else None


def save_atomic(obj: dict, path: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--ckpt-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--step-sleep", type=float, default=0.0, help="slow down (for demos/tests)")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    path = latest_checkpoint(args.ckpt_dir)
    if path:
        state = torch.load(path, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        start = state["step"]
        torch.set_rng_state(state["rng"])
    if rank == 0:
        restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
        print(f"restart {restarts}: resuming at step {start} of {args.steps}", flush=True)
    for step in range(start, args.steps):
        x, y = batch(step, rank, world)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():  # average gradients across ranks (what DDP does)
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= world
        opt.step()
        done = step + 1
        if rank == 0 and (done % args.every == 0 or done == args.steps):
            os.makedirs(args.ckpt_dir, exist_ok=True)
            save_atomic({"model": model.state_dict(), "optim": opt.state_dict(), "step": done,
                         "rng": torch.get_rng_state()},
                        os.path.join(args.ckpt_dir, f"step-{done:08d}.pt"))
            print(f"checkpoint at step {done} loss {loss.item():.6f}", flush=True)
        if args.step_sleep:
            time.sleep(args.step_sleep)
    if rank == 0:
        save_atomic({"model": model.state_dict(), "step": args.steps}, args.out)
        print("done", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
