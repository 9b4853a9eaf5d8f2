"""The char GPT of apps.models.gpt on tiny Shakespeare with ZeRO-3: its parameters, gradients and AdamW
state sharded over the ranks, gradients clipped through the optimizer (the global norm over the shards),
a checkpoint of every rank's shard every --save-every steps, and a resume from the newest one.

    mpirun -n 2 python examples/zero3_gpt.py --steps 50     # from the checkout root; as root add --allow-run-as-root
    mpirun -n 2 python examples/zero3_gpt.py --steps 100    # resumes at step 50 from runs/zero3_gpt

Stopped at any point (Ctrl-C, a batch system's kill), the same command continues from the newest
checkpoint, and on as many ranks bit for bit as if it had not stopped: the checkpoint holds the AdamW
state and the step, and each step's batches are drawn from the step. A checkpoint directory appears only
once every shard is on disk (a kill while saving leaves the previous one). It also loads on another
number of ranks (the shards are reassembled and cut again; the batches then differ). A small GPT (2
layers, 64 wide, context 64) trains in seconds; its size is set below. Run from a checkout, the script
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

parser = argparse.ArgumentParser(description="A char GPT with ZeRO-3, checkpointed and resumed")
parser.add_argument("--data", default=None, help="a text file (default: the tiny Shakespeare apps ships)")
parser.add_argument("--steps", type=int, default=100, help="train until this step (a resume counts from where it was)")
parser.add_argument("--batch-size", type=int, default=16, help="windows per rank and step")
parser.add_argument("--lr", type=float, default=3e-3)
parser.add_argument("--save-every", type=int, default=25)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--checkpoint-dir", type=pathlib.Path, default=pathlib.Path("runs/zero3_gpt"))
args = parser.parse_args()
if args.data is not None and not pathlib.Path(args.data).is_file():
    parser.error(f"--data {args.data}: no such file (leave --data out for the tiny Shakespeare apps ships)")

comm = pycomm.init()
torch.manual_seed(0)
corpus = text.load(args.data, block_size=64)
model = GPT(vocab_size=corpus.info["vocab_size"], block_size=64, n_layer=2, n_head=4, n_embd=64, dropout=0.0)
opt = algorithms.CommOptimizer(
    torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1), algorithm="zero3", model=model
)  # each rank keeps 1/N of everything
saved = sorted(args.checkpoint_dir.glob("step*"))
if saved:
    opt.load_sharded_state_dict(saved[-1])  # the shards of any number of ranks; opt.steps is where it was
    if comm.rank == 0:
        print(f"resumed from {saved[-1]} at step {opt.steps}")

for step in range(opt.steps, args.steps):
    batch = torch.randint(
        len(corpus.train),
        (args.batch_size,),  # this rank's windows of this step
        generator=torch.Generator().manual_seed(step * comm.size + comm.rank),
    )
    x, y = corpus.train.batch(batch)
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    opt.zero_grad()
    loss.backward()
    opt.clip_grad_norm_(1.0)  # torch's clip_grad_norm_ cannot see sharded gradients
    opt.step()
    if (step + 1) % args.log_every == 0 and comm.rank == 0:
        print(f"step {step + 1}: loss {loss.item():.4f}")
    if (step + 1) % args.save_every == 0 or step + 1 == args.steps:
        opt.save_sharded_state_dict(args.checkpoint_dir / f"step{step + 1:06d}")  # every rank its shard
# the whole model on every rank (to evaluate, serve or save it once): opt.full_model_state_dict()
