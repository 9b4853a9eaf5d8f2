"""The gloo transport: torch.distributed's gloo under pycomm's Communicator, for launches MPI cannot join
(torchrun, srun --mpi=none, RANK/WORLD_SIZE set by hand); `pycomm.init(backend="gloo")` starts it.

Files: backend.py (the "gloo" backend: its availability and the world transport over a TCP store),
transport.py (the transport: every Communicator op on a ProcessGroupGloo), work.py (an op's handle),
matching.py (the op check: signatures exchanged before each collective), p2p.py (point-to-point framing),
progress.py (the progress each rank publishes, read when an op stalls).

Nothing is imported here: the backend registry imports backend.py on first use."""
