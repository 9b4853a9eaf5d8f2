"""Local AdamW with the Quadratic Synchronization Rule (Gu et al., ICLR 2024): every rank takes H
optimizer steps on its own data, then the ranks average their parameters (and here AdamW's moments),
with H chosen after each round from the learning rate: H = max(h_base, floor((alpha / lr) ** 2)) after
the warm-up (h_base during it), so the rounds grow sparser as a cosine schedule decays the rate, and the
last round ends on the last step. An MLP on the 10,000 MNIST images in the checkout.

    mpirun -n 2 python examples/local_sgd_qsr.py     # from the checkout root; as root add --allow-run-as-root

Rank 0 prints each round: the step it ended on, its H and the learning rate H was chosen from; every rank prints the
fingerprint of its parameters at the end, the same on every rank (the last round has just averaged
them). --alpha 0 keeps H = h_base throughout (plain periodic local AdamW), for comparison. Run from a
checkout, the script finds pycomm, algorithms and apps there."""

import argparse
import hashlib
import pathlib
import sys

import torch
import torch.nn.functional as F

sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))  # the checkout's packages, unless installed
import algorithms
import pycomm
from apps.data import idx  # MNIST's IDX files

parser = argparse.ArgumentParser(description="Local AdamW with QSR on MNIST")
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--warmup", type=int, default=20)
parser.add_argument("--lr", type=float, default=2e-3, help="the peak learning rate")
parser.add_argument("--h-base", type=int, default=2)
parser.add_argument("--alpha", type=float, default=4e-3, help="QSR's alpha: H = (alpha / lr) ** 2")
args = parser.parse_args()

comm = pycomm.init()
torch.manual_seed(0)
mnist = idx.load()  # 8,000 images to train on, 2,000 to evaluate
x, y = mnist.train.batch(torch.arange(len(mnist.train)))
mine = torch.arange(comm.rank, len(x), comm.size)  # this rank's part of the data
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = algorithms.CommOptimizer(
    torch.optim.AdamW(model.parameters(), lr=args.lr),
    algorithm="qsr",
    model=model,
    h_base=args.h_base,
    alpha=args.alpha,
    warmup_steps=args.warmup,
    total_steps=args.steps,
    avg_m=True,
    avg_v=True,
)
sched = algorithms.CosineWithWarmup(opt, total_steps=args.steps, warmup_steps=args.warmup)

for step in range(1, args.steps + 1):
    if opt.steps_since_round == 0:  # a period starts: QSR chooses its H from this step's rate
        period, period_lr = opt.current_period, sched.get_last_lr()[0]
    batch = mine[torch.randint(len(mine), (32,))]
    loss = F.cross_entropy(model(x[batch]), y[batch])
    opt.zero_grad()
    loss.backward()
    opt.step()  # a local step; the H-th of a period also averages over the ranks
    sched.step()
    if opt.steps_since_round == 0 and comm.rank == 0:
        print(f"step {step}: averaged after H = {period} local steps (chosen at lr {period_lr:.2e})")

x_eval, y_eval = mnist.eval.batch(torch.arange(len(mnist.eval)))
with torch.no_grad():
    accuracy = (model(x_eval).argmax(1) == y_eval).float().mean().item()
if comm.rank == 0:
    print(f"{opt.rounds} rounds in {args.steps} steps; eval accuracy {accuracy:.4f}")
fingerprint = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:16]
print(f"rank {comm.rank}: parameters {fingerprint}")
