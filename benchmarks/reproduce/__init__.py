"""The papers' comparisons reproduced at small scale: every method of the grid (mbsgd, plsgd H = 2, 4, 8,
16, QSR with two alphas, EASGD, LSGD, LAP-SGD; with and without the int8 codec where the method takes
one) trained by `python -m apps.train` on 4 ranks, 3 seeds, on the MNIST CNN and a small char GPT on
tiny Shakespeare; final eval metric against bytes sent per rank, time to a target, and whether QSR >=
constant-H local SGD at equal bytes and LSGD >= EASGD hold here.

    python -m benchmarks.reproduce            # full grid (~40 min on 2 idle cores); resumable
    python -m benchmarks.reproduce --quick    # tiny budgets, 1 seed, a few methods, 2 ranks (the test)

Writes results/reproduce.json, reproduce.md (printed too), reproduce_mnist.png, reproduce_gpt.png;
the runs themselves go to runs/reproduce/<task>-<method>-<codec>-s<seed>/ (a finished run is skipped
when started again), with apps.plot's training curves of seed 0 in runs/reproduce/compare-<task>/.

The grid is data in grid.py; runner.py starts the runs, summary.py reads them, report.py and figure.py
present them, __main__.py ties them together."""
