"""Starting real ranks from tests (`mpirun`, `torchrun`, plain and independent processes; tests/slurm.py adds
`srun`). The launchers live in benchmarks/run_ranks.py, which the benchmarks share: nothing imports
tests (tests/infra/test_python_layers.py), so tests take them from there."""

from benchmarks.run_ranks import (  # noqa: F401
    ROOT,
    SECRET,
    check,
    finish,
    have_mpirun,
    independent,
    mpirun,
    mpirun_argv,
    python,
    sigint_as_in_a_terminal,
    torchrun,
    worker_env,
)
