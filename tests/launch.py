"""Starting real ranks from tests (`mpirun`, `torchrun`, plain and independent processes; tests/slurm.py adds
`srun`). The launchers live in benchmarks/run_ranks.py, which the benchmarks share: nothing imports
tests (tests/infra/test_python_layers.py), so tests take them from there."""
from benchmarks.run_ranks import (ROOT, check, finish, have_mpirun, independent, mpirun, mpirun_argv,  # noqa: F401
                                  python, torchrun, worker_env)
