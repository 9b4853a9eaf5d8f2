"""An unmodified FSDP2 script on pycomm: an MLP on the 10,000 MNIST images in the checkout, every layer
sharded with torch's `fully_shard`, plain torch.distributed throughout. The only pycomm lines are
`import pycomm` (which registers the torch.distributed backend "pycomm") and the backend's name in
`init_process_group`; the all-gathers and reduce-scatters then run on pycomm's core, with its op matching,
stall reports and tracing (PYCOMM_TRACE=1).

    mpirun -n 2 python examples/fsdp2_on_pycomm.py     # from the checkout root; as root add --allow-run-as-root
    torchrun --nproc-per-node 2 examples/fsdp2_on_pycomm.py
    mpirun -n 2 python examples/fsdp2_on_pycomm.py --backend gloo   # the same script on torch's gloo

One epoch on 2 ranks is 125 steps of 32 images per rank and ends near 89% accuracy. Each rank prints the
fingerprint of the full (unsharded) parameters at the end: the same on every rank, and the same on
"pycomm" as on "gloo". Run from a checkout, the script finds pycomm and apps there (the sys.path line)."""

import argparse
import hashlib
import pathlib
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))  # the checkout's packages, unless installed
import pycomm  # noqa: F401  (registers the torch.distributed backend "pycomm")
from apps.data import idx  # MNIST's IDX files (the 10,000 images in the checkout by default)

parser = argparse.ArgumentParser(description="FSDP2 on MNIST")
parser.add_argument("--backend", default="pycomm", help="torch.distributed backend: pycomm (default) or gloo")
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--lr", type=float, default=0.05)
args = parser.parse_args()

dist.init_process_group(args.backend)  # mpirun or torchrun: no other change for pycomm
rank = dist.get_rank()
torch.manual_seed(0)
mnist = idx.load()
train = TensorDataset(*mnist.train.batch(torch.arange(len(mnist.train))))
x_eval, y_eval = mnist.eval.batch(torch.arange(len(mnist.eval)))
sampler = DistributedSampler(train, seed=0)
loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer)  # each rank keeps half of each layer's parameters
fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    for step, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 and rank == 0:
            print(f"epoch {epoch} step {step}: loss {loss.item():.3f}")
    with torch.no_grad():
        accuracy = (model(x_eval).argmax(1) == y_eval).float().mean().item()
    if rank == 0:
        print(f"epoch {epoch}: eval accuracy {accuracy:.4f}")

full = [p.full_tensor().detach() for p in model.parameters()]  # all-gathered from the shards
fingerprint = hashlib.sha256(b"".join(t.numpy().tobytes() for t in full)).hexdigest()[:16]
print(f"rank {rank}: parameters {fingerprint} ({dist.get_backend()})")
dist.destroy_process_group()
