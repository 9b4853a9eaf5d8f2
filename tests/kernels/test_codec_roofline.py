"""benchmarks/codec_roofline.py's byte counts: what each phase of the quantized all-reduce reads and writes
per rank, checked against the passes counted by hand for one case of each codec."""

import pytest

from benchmarks.codec_roofline import MIB, phase_bytes


def test_onebit_two_ranks_with_error_feedback():
    # 16 MiB fp32, 2 ranks: encode reads the other chunk (8 MiB) and reads + writes its residual (16 MiB)
    # and writes 1/32 of 8 MiB plus scales; the reduce reads my chunk (8), my spent residual (8), the
    # server residual twice (16), writes my decode back (8); decode writes the other chunk (8)
    b = phase_bytes("1bit", 16 * MIB, 2, error_feedback=True)
    w = (1 / 8 + 4 / 256) / 4
    assert b["encode"] == pytest.approx(8 * MIB * (3 + w), rel=1e-12)
    assert b["reduce_reencode"] == pytest.approx(8 * MIB * (5 + 2 * w), rel=1e-12)
    assert b["decode"] == pytest.approx(8 * MIB * (1 + w), rel=1e-12)


def test_int8_four_ranks_without_error_feedback():
    b = phase_bytes("int8", 64 * MIB, 4, error_feedback=False)
    w = (1 + 4 / 256) / 4
    assert b["encode"] == pytest.approx(48 * MIB * (1 + w), rel=1e-12)
    assert b["reduce_reencode"] == pytest.approx(16 * MIB * (2 + 4 * w), rel=1e-12)
    assert b["decode"] == pytest.approx(48 * MIB * (1 + w), rel=1e-12)
