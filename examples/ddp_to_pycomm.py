"""A plain single-process MNIST script made distributed with pycomm: an MLP on the 10,000 MNIST images
in the checkout (8,000 to train, 2,000 to evaluate), synchronous SGD on every rank's own part of the
data. docs/port_ddp.md shows this file as a diff from the single-process script it was made from: a
dozen lines change, the training step none.

    mpirun -n 2 python examples/ddp_to_pycomm.py       # from the checkout root; as root add --allow-run-as-root
    torchrun --nproc-per-node 2 examples/ddp_to_pycomm.py
    python examples/ddp_to_pycomm.py                   # one rank

Two epochs on 2 ranks are 250 steps of 32 images per rank and end near 93% accuracy. `--data DIR` reads
another folder of MNIST IDX files (the full 60,000-image set, Fashion-MNIST). Each rank prints the
fingerprint of its parameters at the end: the same on every rank, as with DDP. Run from a checkout, the
script finds pycomm, algorithms and apps there (the sys.path line); after `pip install .` it runs from
anywhere."""
import argparse
import hashlib
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))   # the checkout's packages, unless installed
import algorithms
import pycomm
from apps.data import idx                     # MNIST's IDX files (the 10,000 images in the checkout by default)

parser = argparse.ArgumentParser(description="An MLP on MNIST")
parser.add_argument("--data", default=None, help="a folder of MNIST IDX files (default: the embedded 10,000)")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--save", default="mnist_mlp.pt")
args = parser.parse_args()

comm = pycomm.init()                                  # rank and size from mpirun, srun or torchrun
torch.manual_seed(0)
mnist = idx.load(args.data)
train = TensorDataset(*mnist.train.batch(torch.arange(len(mnist.train))))
x_eval, y_eval = mnist.eval.batch(torch.arange(len(mnist.eval)))
sampler = pycomm.DistributedSampler(train, seed=0)    # this rank's part of each epoch
loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = algorithms.CommOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9),
                               algorithm="mbsgd", model=model)   # gradients averaged over the ranks

for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    for step, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 and comm.rank == 0:
            print(f"epoch {epoch} step {step}: loss {loss.item():.3f}")
    with torch.no_grad():
        accuracy = (model(x_eval).argmax(1) == y_eval).float().mean().item()
    if comm.rank == 0:
        print(f"epoch {epoch}: eval accuracy {accuracy:.4f}")

if comm.rank == 0:
    torch.save(model.state_dict(), args.save)
fingerprint = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:16]
print(f"rank {comm.rank}: parameters {fingerprint}")
