"""benchmarks/cost_model.py: the fit recovers the constants a set of points was made from (each point built from
what its method sends over a 100 Mbit/s and a 1 Gbit/s link), reproduces the committed benchmarks/nodes.py
runs within the tolerance docs/scaling.md states, and its predictions at scale behave as the physics says
(more nodes never make a step cheaper; a method that sends less never costs more)."""

from __future__ import annotations

import json

import pytest

from benchmarks import cost_model
from benchmarks.cost_model import FRONTIER, S3DF, Fit, Point
from benchmarks.harness import RESULTS

MODEL_BYTES = 861_480  # SmallCNN's fp32 parameters
TRUE = Fit(
    compute_s_per_sample=2.5e-4,
    latency_s=1e-3,
    byte_s={"100mbit": 8 / 100e6, "1gbit": 8 / 1e9},
    codec_s_per_element=2e-9,
)


def synthetic() -> list[Point]:
    """Each method's bytes per node per step (whole-model collectives per step x its codec's size ratio), and
    the step time the true constants give it."""
    sends = {"ddp": 1.0, "zero3": 3.0, "hsdp+plsgd": 1 / 8, "mbsgd+int8": 1.0, "mbsgd+1bit": 1.0, "mbsgd-nocomm": 0.0}
    points = []
    for link in TRUE.byte_s:
        for case, ops in sends.items():
            ratio = cost_model.CODEC_RATIO.get(cost_model.CASE_CODEC.get(case, ""), 1.0)
            p = Point(case, link, 32, ops * MODEL_BYTES * ratio, MODEL_BYTES, step_s=1.0)
            points.append(Point(case, link, 32, p.bytes_per_step, MODEL_BYTES, TRUE.step_s(p)))
    return points


def test_the_fit_recovers_the_constants_of_synthetic_points():
    points = synthetic()
    got = cost_model.fit(points)
    assert got.compute_s_per_sample == pytest.approx(TRUE.compute_s_per_sample, rel=1e-6)
    assert got.latency_s == pytest.approx(TRUE.latency_s, rel=1e-6)
    assert got.codec_s_per_element == pytest.approx(TRUE.codec_s_per_element, rel=1e-6)
    assert got.byte_s == pytest.approx(TRUE.byte_s, rel=1e-6)
    assert max(cost_model.relative_errors(got, points)) < 1e-6


def test_the_fit_reproduces_the_committed_runs():
    doc = json.loads((RESULTS / "nodes.json").read_text())
    points = cost_model.points_from_results(doc, MODEL_BYTES)
    assert {p.link for p in points} >= {"100mbit", "1gbit"} and len(points) >= 10, [p.case for p in points]
    errors = sorted(cost_model.relative_errors(cost_model.fit(points), points))
    median, worst = errors[len(errors) // 2], errors[-1]
    assert median <= cost_model.MEDIAN_TOLERANCE and worst <= cost_model.WORST_TOLERANCE, errors


def test_predictions_grow_with_nodes_and_with_bytes():
    points = {p.case: p for p in synthetic() if p.link == "100mbit"}
    for system in (FRONTIER, S3DF):
        steps = [cost_model.predict(system, g, points["ddp"], 17.5e6, TRUE)["step_s"] for g in (64, 512, 4096)]
        assert steps == sorted(steps) and steps[0] < steps[-1], steps
        ddp, plsgd = (cost_model.predict(system, 4096, points[c], 17.5e6, TRUE) for c in ("ddp", "hsdp+plsgd"))
        assert plsgd["comm_s"] == pytest.approx(ddp["comm_s"] / 8) and plsgd["step_s"] < ddp["step_s"]


def test_a_fit_without_points_is_refused():
    with pytest.raises(ValueError, match="no points"):
        cost_model.fit([])
