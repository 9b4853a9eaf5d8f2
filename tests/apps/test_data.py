"""Data loaders on real and synthetic files in the real formats; sharding disjoint and complete."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from apps.data import DATASETS, ShardPlan, cifar, idx, random_tensors, text


def test_embedded_mnist_parses_and_splits_8000_2000() -> None:
    images = idx.read_idx(idx.EMBEDDED / "t10k-images-idx3-ubyte.gz")
    labels = idx.read_idx(idx.EMBEDDED / "t10k-labels-idx1-ubyte.gz")
    assert images.shape == (10000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (10000,) and set(np.unique(labels)) == set(range(10))
    splits = DATASETS.build("mnist", {})
    assert (len(splits.train), len(splits.eval)) == (8000, 2000)
    x, y = splits.train.batch(torch.arange(5))
    assert x.shape == (5, 1, 28, 28) and x.dtype == torch.float32 and y.dtype == torch.int64
    again = DATASETS.build("mnist", {})  # the split is fixed: same on every rank and every run
    assert torch.equal(again.eval.labels, splits.eval.labels)
    assert (
        torch.bincount(torch.cat([splits.train.labels, splits.eval.labels]), minlength=10).tolist()
        == np.bincount(labels, minlength=10).tolist()
    )  # a partition of the 10,000


def test_embedded_tiny_shakespeare_is_the_text_default() -> None:
    """Every GPT config runs on a fresh clone: data.path unset reads the embedded tiny Shakespeare."""
    splits = DATASETS.build("text", {"block_size": 256})
    assert splits.info["vocab_size"] == 65 and len(text.EMBEDDED_TEXT.read_text(encoding="utf-8")) == 1_115_394
    assert len(splits.train) == len(range(0, int(1_115_394 * 0.9) - 256, 256)) and splits.eval is not None
    with pytest.raises(FileNotFoundError, match=r"data.path='/no/such.txt' is not a file .*-o data.path=PATH"):
        DATASETS.build("text", {"path": "/no/such.txt"})


def _write_idx(path: Path, array: np.ndarray, compress: bool) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    (gzip.open if compress else open)(path, "wb").write(header + array.tobytes())


@pytest.mark.parametrize("compress", [False, True])
def test_full_size_layout_uses_official_train_and_test(tmp_path: Path, compress: bool) -> None:
    sfx = ".gz" if compress else ""
    rng = np.random.default_rng(0)
    _write_idx(tmp_path / f"train-images-idx3-ubyte{sfx}", rng.integers(0, 255, (30, 28, 28), dtype=np.uint8), compress)
    _write_idx(tmp_path / f"train-labels-idx1-ubyte{sfx}", rng.integers(0, 10, 30, dtype=np.uint8), compress)
    _write_idx(tmp_path / f"t10k-images-idx3-ubyte{sfx}", rng.integers(0, 255, (7, 28, 28), dtype=np.uint8), compress)
    _write_idx(tmp_path / f"t10k-labels-idx1-ubyte{sfx}", rng.integers(0, 10, 7, dtype=np.uint8), compress)
    splits = DATASETS.build("fashion_mnist", {"path": str(tmp_path)})
    assert (len(splits.train), len(splits.eval)) == (30, 7)


def test_idx_errors_are_clear(tmp_path: Path) -> None:
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="not an IDX file"):
        idx.read_idx(tmp_path / "bad")
    _write_idx(tmp_path / "short", np.zeros((3, 2), np.uint8), False)
    (tmp_path / "short").write_bytes((tmp_path / "short").read_bytes()[:-1])
    with pytest.raises(ValueError, match="header says"):
        idx.read_idx(tmp_path / "short")
    with pytest.raises(FileNotFoundError, match="no IDX files"):
        idx.load(tmp_path)


def test_cifar10_binary_batches(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    records = {}
    for name, n in (("data_batch_1.bin", 6), ("data_batch_2.bin", 4), ("test_batch.bin", 3)):
        labels = rng.integers(0, 10, n, dtype=np.uint8)
        pixels = rng.integers(0, 255, (n, 3072), dtype=np.uint8)
        np.concatenate([labels[:, None], pixels], axis=1).tofile(tmp_path / name)
        records[name] = (labels, pixels)
    splits = cifar.load(tmp_path, augment=False)
    assert (len(splits.train), len(splits.eval)) == (10, 3)
    x, y = splits.train.batch(torch.tensor([7]))  # record 1 of data_batch_2
    labels, pixels = records["data_batch_2.bin"]
    assert int(y) == labels[1]
    expected = (torch.from_numpy(pixels[1].reshape(3, 32, 32)).float() / 255 - cifar.MEAN[0]) / cifar.STD[0]
    assert torch.allclose(x[0], expected)
    augmented = cifar.load(tmp_path, augment=True).train.batch(torch.arange(4))[0]
    assert augmented.shape == (4, 3, 32, 32)
    (tmp_path / "data_batch_3.bin").write_bytes(b"\x00" * 100)
    with pytest.raises(ValueError, match="not a multiple"):
        cifar.load(tmp_path)


def test_text_windows_shift_by_one(tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_text("abcdefghij" * 20)
    splits = text.load(tmp_path / "t.txt", block_size=8, eval_fraction=0.1)
    assert splits.info["vocab_size"] == 10
    x, y = splits.train.batch(torch.tensor([0, 2]))
    assert x.shape == (2, 8) and torch.equal(x[:, 1:], y[:, :-1])
    assert "".join(splits.info["vocab"][i] for i in x[1].tolist()) == "qrstuvwx".translate(
        str.maketrans("qrstuvwx", "ghijabcd")
    )


def test_random_tensors_are_a_function_of_the_index() -> None:
    splits = random_tensors.load(num_samples=10, eval_samples=2, shape=(1, 4, 4), num_classes=3, seed=5)
    a = splits.train.batch(torch.tensor([3, 1]))
    b = splits.train.batch(torch.tensor([1, 3]))
    assert torch.equal(a[0][0], b[0][1]) and a[0].shape == (2, 1, 4, 4) and int(a[1].max()) < 3
    images_only = random_tensors.load(num_samples=4, shape=(1, 2, 2), num_classes=0)
    assert len(images_only.train.batch(torch.arange(2))) == 1


@pytest.mark.parametrize("n, size, segment", [(103, 1, None), (103, 2, None), (100, 4, 30), (37, 3, 10)])
def test_shards_are_disjoint_equal_and_deterministic(n: int, size: int, segment: int | None) -> None:
    plans = [ShardPlan(n, r, size, batch_size=2, seed=3, segment_size=segment) for r in range(size)]
    for epoch in range(2):
        seen = []
        for s in range(plans[0].num_segments):
            shards = [p.shard(epoch, s) for p in plans]
            assert len({len(sh) for sh in shards}) == 1
            start, end = plans[0].bounds(s)
            assert end - start - sum(map(len, shards)) < size  # a segment's rest of fewer than `size` is left
            seen += [i for sh in shards for i in sh.tolist()]
            assert len({p.steps_in_segment(s) for p in plans}) == 1  # every rank takes the same number of steps
        assert len(set(seen)) == len(seen) and n - len(seen) < size * plans[0].num_segments  # disjoint
    assert not torch.equal(plans[0].order(0), plans[0].order(1))
    again = ShardPlan(n, 0, size, batch_size=2, seed=3, segment_size=segment)
    assert torch.equal(again.shard(1, 0), plans[0].shard(1, 0))
    batches = list(plans[0].batches(0, 0))
    taken = plans[0].global_batch  # one step of every rank: the position after it, in samples
    assert [b.tolist() for b in plans[0].batches(0, 0, taken)] == [b.tolist() for b in batches[1:]]
    assert plans[0].progress(1, 0, taken) == plans[0].steps_per_epoch + 1


def test_a_position_in_samples_means_the_same_data_on_other_ranks() -> None:
    """4 ranks take 2 steps of a segment; 2 ranks resume there (and the reverse): together every sample of
    the segment once, and the resumed world's progress counts its own steps."""
    for before, after in ((4, 2), (2, 4)):
        old = [ShardPlan(96, r, before, batch_size=4, seed=1, segment_size=48) for r in range(before)]
        new = [ShardPlan(96, r, after, batch_size=4, seed=1, segment_size=48) for r in range(after)]
        taken = 2 * old[0].global_batch
        seen = [i for p in old for b in list(p.batches(0, 1))[:2] for i in b.tolist()]
        seen += [i for p in new for b in p.batches(0, 1, taken) for i in b.tolist()]
        start, end = new[0].bounds(1)
        assert sorted(seen) == sorted(new[0].order(0)[start:end].tolist())
        assert new[0].progress(0, 1, taken) == new[0].steps_in_segment(0) + taken // new[0].global_batch


def test_shard_plan_rejects_batches_larger_than_a_shard() -> None:
    with pytest.raises(ValueError, match="fewer than one batch"):
        ShardPlan(10, 0, 4, batch_size=4, seed=0)
