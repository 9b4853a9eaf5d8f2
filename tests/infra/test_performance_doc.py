"""Measurements live in benchmarks/results/*.json: docs/performance.md and benchmarks/README.md's table are
generated from them and must be up to date; every result says what it measures, against which peer
and how to run it; and the committed plots that are drawn again from their JSON draw every case
properly (algorithms.png: one colour per algorithm and no line collapsed to a vertical; zero.png)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks import performance_doc
from benchmarks.harness import RESULTS


def test_eager_rows_are_shown_as_a_ratio_per_limit():
    """collectives_eager repeats mpi4py's row once per eager limit: the document shows one line per case,
    mpi4py time / pycomm time at each limit, not the raw rows."""
    case = {"pattern": "isolated", "ranks": 2, "op": "broadcast", "bytes": 4096}
    rows = [
        {**case, "peer": peer, "eager_bytes": limit, "seconds": {"median": sec}}
        for limit, peer, sec in (
            (4096, "pycomm", 2.0),
            (4096, "mpi4py", 1.0),
            (8192, "pycomm", 4.0),
            (8192, "mpi4py", 1.0),
        )
    ]
    assert performance_doc.eager_ratios(rows) == [{**case, "ratio at 4 KiB": 0.5, "ratio at 8 KiB": 0.25}]
    doc = performance_doc.performance({"collectives_eager": {"eager": rows}}, Path("/nonexistent"))
    assert "eager: mpi4py time / pycomm time per eager limit: 1 rows" in doc and "eager: 4 rows" not in doc


def test_the_documents_match_the_results():
    doc, readme = performance_doc.generated()
    assert performance_doc.DOC.read_text() == doc, f"run `{performance_doc.COMMAND}` and commit docs/performance.md"
    assert performance_doc.README.read_text() == readme, f"run `{performance_doc.COMMAND}` and commit its table"
    for name in performance_doc.results():
        assert f"## {name}\n" in doc and f"[{name}](../docs/performance.md#{name})" in readme, name


def test_a_changed_result_changes_the_documents_and_an_undescribed_one_is_refused(tmp_path: Path):
    shutil.copy(RESULTS / "zero.json", tmp_path / "zero.json")
    before = performance_doc.generated(tmp_path)
    doc = json.loads((tmp_path / "zero.json").read_text())
    doc["rows"][0]["speed_vs_fsdp2"] = 123.0
    lowest = min(r["speed_vs_fsdp2"] for r in doc["rows"] if "speed_vs_fsdp2" in r)  # of the committed rows
    (tmp_path / "zero.json").write_text(json.dumps(doc))
    after = performance_doc.generated(tmp_path)
    assert before[0] != after[0] and f"speed_vs_fsdp2 {lowest:.3g}-123" in after[1], after[1]
    (tmp_path / "mystery.json").write_text(json.dumps({"benchmark": "mystery", "rows": []}))
    with pytest.raises(ValueError, match="results without an entry in BENCHMARKS .*'mystery'"):
        performance_doc.generated(tmp_path)


def test_algorithms_png_gives_each_algorithm_its_colour_and_no_vertical_line():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.algorithms import accuracy_and_bytes

    results = json.loads((RESULTS / "algorithms.json").read_text())["results"]
    fig, axes = plt.subplots(1, 2)
    accuracy_and_bytes(results, "default")(list(axes))
    for ax in axes:
        lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
        assert [ln.get_label() for ln in lines] == [r["algorithm"] for r in results["default"]]
        assert len({ln.get_color() for ln in lines}) == len(lines), [ln.get_color() for ln in lines]
        assert all(len(set(ln.get_xdata())) > 1 for ln in lines)  # qsr sends nothing after its start
    plt.close(fig)


def test_zero_png_is_drawn_from_its_json(tmp_path: Path):
    from benchmarks import zero

    shutil.copy(RESULTS / "zero.json", tmp_path / "zero.json")
    png = zero.replot(tmp_path)
    assert png == tmp_path / "zero.png" and png.read_bytes()[:4] == b"\x89PNG"
