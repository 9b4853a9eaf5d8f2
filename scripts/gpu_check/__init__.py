"""scripts/gpu_check.sh: one command that builds pycomm for a one-GPU machine's architecture, runs every GPU
test and the GPU benchmark within a time budget, and writes a short summary, one JUnit XML, the benchmark's
JSON + PNG and the failures' logs into one folder (docs/gpu.md). Standard library only: it runs before
anything is installed on that machine.

  phases.py   what runs, in order of value (the one place that names the GPU tests and benchmark)
  runner.py   the budget, and one step run under a time limit, killed with everything it started
  machine.py  the carried wheels, the CMake line, the build, and what the machine is
  report.py   summary, merged JUnit XML, failure log tails
  dry_run.py  the checks that need no GPU (CI: tests/infra/test_gpu_check.py)"""
