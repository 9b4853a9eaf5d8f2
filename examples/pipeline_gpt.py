"""The char GPT of apps.models.gpt cut into 2 pipeline stages (embedding and first half of the blocks on
one rank, the rest and the head on the next), trained with the 1F1B schedule over 4 micro-batches, and
ZeRO-2 (AdamW, gradients clipped by the whole model's norm) on each stage's data-parallel ranks.

    mpirun -n 2 python examples/pipeline_gpt.py     # pp=2; from the checkout root (as root add --allow-run-as-root)
    mpirun -n 4 python examples/pipeline_gpt.py     # pp=2 x dp_shard=2: ZeRO-2 shards each stage over 2 ranks

One pycomm.Mesh lays the ranks out (docs/composition.md); the Pipeline takes its stages from mesh["pp"]
and ZeRO-2 its shards from mesh["dp_shard"] (on 2 ranks a stage has one rank: nothing is sharded, the
code is the same). Every rank builds the whole model from the same seed and keeps its stage's layers
(`pipe.stage_module`); x is read on the first stage, y on the last, and the loss comes back on every
rank. A small GPT (4 layers, 64 wide, context 64) trains in seconds. Run from a checkout, the script
finds pycomm, algorithms and apps there."""

import argparse
import pathlib
import sys

import torch
import torch.nn.functional as F

sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))  # the checkout's packages, unless installed
import algorithms
import pycomm
from apps.data import text  # windows of characters of any text file
from apps.models.gpt import GPT

parser = argparse.ArgumentParser(description="A char GPT in 2 pipeline stages")
parser.add_argument("--data", default=None, help="a text file (default: the tiny Shakespeare apps ships)")
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--batch-size", type=int, default=16, help="windows per step and data-parallel rank")
parser.add_argument("--lr", type=float, default=3e-3)
parser.add_argument("--log-every", type=int, default=10)
args = parser.parse_args()
if args.data is not None and not pathlib.Path(args.data).is_file():
    parser.error(f"--data {args.data}: no such file (leave --data out for the tiny Shakespeare apps ships)")

comm = pycomm.init()
mesh = pycomm.Mesh(comm, pp=2, dp_shard=-1)  # 2 stages; the other ranks shard each stage
torch.manual_seed(0)  # the same whole model on every rank
corpus = text.load(args.data, block_size=64)
model = GPT(
    vocab_size=corpus.info["vocab_size"], block_size=64, n_layer=4, n_head=4, n_embd=64, dropout=0.0, tie_weights=False
)  # the head is on the last stage, the token embedding on the first
pipe = algorithms.Pipeline(model.pipeline_layers(), mesh=mesh, schedule="1f1b", microbatches=4)
opt = algorithms.CommOptimizer(
    torch.optim.AdamW(pipe.stage_module.parameters(), lr=args.lr, weight_decay=0.1),
    algorithm="zero2",
    mesh=mesh,
    model=pipe.stage_module,
)


def loss_fn(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


for step in range(args.steps):
    # the stages of a replica read the same batch; each data-parallel rank its own
    batch = torch.randint(
        len(corpus.train),
        (args.batch_size,),
        generator=torch.Generator().manual_seed(step * mesh["dp"].size + mesh["dp"].rank),
    )
    x, y = corpus.train.batch(batch)
    opt.zero_grad()
    loss = pipe.train_step(x, y, loss_fn)  # forward and backward of 4 micro-batches through the stages
    opt.clip_grad_norm_(1.0)  # the whole model's norm: over the shards and the stages
    opt.step()
    if (step + 1) % args.log_every == 0 and comm.rank == 0:
        print(f"step {step + 1}: loss {loss:.4f}")
if comm.rank == 0:
    print(
        f"stage {pipe.stage} of {pipe.stages} held layers {list(dict(pipe.stage_module.named_children()))}; "
        f"{pipe.comm_stats()['bytes_by_dim']['pp']} bytes sent to the next stage"
    )
