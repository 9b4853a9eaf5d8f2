"""Why ssp with K >= 1 and momentum 0.9 diverges, measured: the ssp rule simulated in one
process (no transport, so it is cheap and deterministic) on the staleness benchmark's problem (TinyCNN,
MNIST, 4 ranks, batch 32, SGD lr 0.05), with the staleness pattern of its straggler case: the three fast
ranks compute the gradient of step t on the parameters of step t - K (they run K steps ahead), the
straggler on those of step t. Loss curves and final accuracy for K = 0, 1, 2, 4 at momentum 0.9 and 0.5,
and at 0.9 with the remedies of algorithms/ps/stale_steps.py: `momentum` (ssp's
staleness_correction="momentum": the explicit momentum lowered by the implicit momentum s/(1+s) of the
step's mean staleness s, Mitliagkas et al. 2016), `momentum_bound` (the same for s = K) and `scale`
(each contribution scaled by 1/(1+s)). Usage: python -m benchmarks.ssp_momentum [--steps N]."""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from algorithms.ps.stale_steps import compensated_momentum, stale_scale
from benchmarks import harness
from benchmarks.mnist_cnn import TinyCNN, accuracy, shard_batches, split

WORLD, BATCH, LR = 4, 32, 0.05
STRAGGLER = 3
FIGURES = ((0.9, None), (0.5, None), (0.9, "momentum"), (0.9, "momentum_bound"), (0.9, "scale"))


def simulate(K: int, momentum: float, fix: str | None, steps: int, data) -> dict:
    """One ssp run from the rule: the mean of the ranks' (possibly stale) gradients through one SGD step."""
    (xt, yt), (xe, ye) = data
    torch.manual_seed(0)
    model, probe = TinyCNN(), TinyCNN()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=momentum)
    batches = [
        [b for epoch in range(100) for b in shard_batches(len(yt), r, WORLD, BATCH, epoch)][:steps]
        for r in range(WORLD)
    ]
    history = [torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()]
    losses = []
    for t in range(steps):
        grads, step_loss = [], 0.0
        stale = [0 if r == STRAGGLER else min(K, t) for r in range(WORLD)]
        mu = momentum
        if fix == "momentum_bound":  # compensated for the bound K
            mu = compensated_momentum(momentum, K)
        if fix == "momentum":  # compensated for the step's mean staleness (ssp's option)
            mu = compensated_momentum(momentum, sum(stale) / WORLD)
        opt.param_groups[0]["momentum"] = mu
        for r, s in enumerate(stale):
            torch.nn.utils.vector_to_parameters(history[t - s], probe.parameters())
            probe.zero_grad()
            loss = F.cross_entropy(probe(xt[batches[r][t]]), yt[batches[r][t]])
            loss.backward()
            step_loss += float(loss.detach()) / WORLD
            g = torch.nn.utils.parameters_to_vector([p.grad for p in probe.parameters()])
            grads.append(g * stale_scale(s) if fix == "scale" else g)
        losses.append(step_loss if step_loss == step_loss else float("inf"))
        mean = torch.stack(grads).mean(0)
        offset = 0
        for p in model.parameters():
            p.grad = mean[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        opt.step()
        history.append(torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone())
    acc = accuracy(model, xe, ye)
    return {
        "K": K,
        "momentum": momentum,
        "fix": fix or "none",
        "effective_momentum": mu,
        "final_loss": sum(losses[-10:]) / 10,
        "accuracy": acc,
        "losses": losses,
    }


def max_stable_step(momentum: float, K: int) -> float:
    """The largest eta * lambda for which heavy-ball SGD on the quadratic lambda x^2 / 2 with gradients K
    steps old converges: x_{t+2} = (1 + mu) x_{t+1} - mu x_t - eta lambda x_{t+1-K} (spectral radius < 1,
    bisection). The linear reason momentum and staleness together diverge."""
    import numpy as np

    def stable(a: float) -> bool:
        degree = max(2, K + 1)
        c = np.zeros(degree + 1)
        c[0], c[1], c[2] = 1.0, -(1.0 + momentum), momentum
        c[K + 1] += a
        return bool(np.abs(np.roots(c)).max() < 1.0 - 1e-9)

    lo, hi = 0.0, 4.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if stable(mid) else (lo, mid)
    return lo


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=150)
    args = p.parse_args()
    torch.set_num_threads(1)
    data = split()
    runs = []
    for momentum, fix in FIGURES:
        for K in (0, 1, 2, 4):
            runs.append(simulate(K, momentum, fix, args.steps, data))
            print(
                harness.table([runs[-1]], ["K", "momentum", "fix", "effective_momentum", "final_loss", "accuracy"]),
                flush=True,
            )
    print(harness.table(runs, ["K", "momentum", "fix", "effective_momentum", "final_loss", "accuracy"]))
    stability = [
        {
            "momentum": mu,
            "K": K,
            "max_stable_eta_lambda": max_stable_step(mu, K),
            "max_stable_eta_lambda_compensated_for_K": max_stable_step(compensated_momentum(mu, K), K),
        }
        for mu in (0.0, 0.5, 0.9)
        for K in (0, 1, 2, 4)
    ]
    print(harness.table(stability, list(stability[0])))

    def plot(ax) -> None:
        fig = ax.figure
        fig.delaxes(ax)
        fig.set_size_inches(14, 7)
        for ax, (momentum, fix) in zip(fig.subplots(2, 3).flat, FIGURES):
            for r in runs:
                if r["momentum"] == momentum and r["fix"] == (fix or "none"):
                    ax.plot([min(v, 5.0) for v in r["losses"]], label=f"K={r['K']}")
            ax.set_title(f"momentum {momentum}, fix: {fix}", fontsize=9)
            ax.set_ylim(0, 5)
            ax.set_xlabel("step")
            ax.set_ylabel("training loss (clipped at 5)")
            ax.legend(fontsize=8)
        fig.axes[-1].axis("off")  # five panels on a 2 x 3 grid

    harness.save(
        "ssp_momentum",
        {
            "steps": args.steps,
            "lr": LR,
            "world": WORLD,
            "straggler_pattern": "ranks 0-2 at staleness K, rank 3 at 0",
            "runs": runs,
            "stability": stability,
        },
        plot,
    )


if __name__ == "__main__":
    main()
