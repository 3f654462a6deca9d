"""Entry point: torchrun starts one copy of this script per process."""
import argparse
import hashlib
import json

import torch
import torch.distributed as dist

from minitrain.data import Blobs
from minitrain.model import make_model
from minitrain.training import train


def fingerprint(model):
    """A short hash of the parameters' bytes: equal fingerprints, equal weights."""
    data = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    return hashlib.sha256(data).hexdigest()[:12]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)    # per process
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")          # rank and world size come from torchrun's environment
    try:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        dataset = Blobs(args.examples, seed=args.seed)      # the same data in every process
        model = make_model(seed=args.seed + rank)           # another start in each process, on purpose
        start = fingerprint(model)
        losses = train(model, dataset, rank=rank, world_size=world_size, epochs=args.epochs,
                       batch_size=args.batch_size, lr=args.lr, seed=args.seed)
        report = {"rank": rank, "world_size": world_size, "start": start, "end": fingerprint(model),
                  "losses": [round(float(value), 5) for value in losses], "seen": dataset.seen}
        for turn in range(world_size):                      # one at a time: lines do not mix
            if turn == rank:
                print(json.dumps(report), flush=True)
            dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
