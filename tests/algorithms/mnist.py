"""The MNIST problem of the convergence tests (8,000 / 2,000 split, a tiny CNN): it lives in
benchmarks/mnist_cnn.py, which the algorithm benchmarks share (nothing imports tests)."""

from benchmarks.mnist_cnn import DATA, TinyCNN, accuracy, shard_batches, split  # noqa: F401
