"""docs/performance.md and the table of benchmarks/README.md, generated from benchmarks/results/*.json: for
each result, what it measures, against which peer, the command that writes it, where and when it was
measured, its headline ratios, its plot, and every row it holds. A figure lives in its JSON only; the
documents are drawn from it, and tests/infra/test_performance_doc.py fails when they are out of date.

    python -m benchmarks.performance_doc            # rewrite docs/performance.md and benchmarks/README.md's table
    python -m benchmarks.performance_doc --check    # exit 1 when either is out of date"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any, Optional, Sequence

from benchmarks.collectives_common import mpi4py_ratios
from benchmarks.harness import RESULTS
from benchmarks.performance_registry import BENCHMARKS

ROOT = RESULTS.parent.parent
DOC = ROOT / "docs" / "performance.md"
README = ROOT / "benchmarks" / "README.md"
COMMAND = "python -m benchmarks.performance_doc"
BEGIN = f"<!-- benchmarks table: generated from benchmarks/results/*.json by `{COMMAND}` -->"
END = "<!-- end of benchmarks table -->"
# ratios against a peer, in the keys the benchmarks write (the headline of each result)
RATIOS = (
    "speedup_vs_ddp",
    "vs_ddp_mpi",
    "speed_vs_fsdp2",
    "bytes_vs_ddp",
    "vs torch",
    "of memcpy",
    "ratio",
    "speedup",
    "speed_vs_star",
    "speed_vs_single",
    "vs_link_floor",
    "measured_ratio",
    "train_s_vs_ddp",
    "to_target_vs_ddp",
    "overlap_vs_ddp",
)


def eager_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """collectives_eager's rows (mpi4py's repeated once per limit) as one line per case: mpi4py time /
    pycomm time at each PYCOMM_EAGER_BYTES value."""
    ratios = mpi4py_ratios(rows, ("pattern", "ranks", "op", "bytes", "eager_bytes"))
    lines: dict[tuple, dict[str, Any]] = {}
    for (pattern, ranks, op, nbytes, limit), ratio in sorted(ratios.items()):
        line = lines.setdefault((pattern, ranks, op, nbytes), {"pattern": pattern, "ranks": ranks, "op": op})
        line["bytes"] = nbytes
        line[f"ratio at {limit // 1024} KiB"] = ratio
    return list(lines.values())


# Tables shown as a summary instead of their raw rows: (result, table) -> (title, summary of the rows).
SUMMARIES = {("collectives_eager", "eager"): ("eager: mpi4py time / pycomm time per eager limit", eager_ratios)}


def results(results_dir: Path = RESULTS) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(results_dir.glob("*.json"))}


def _scalar(value: Any) -> Optional[Any]:
    """A cell: scalars as they are, a {min, median, max} timing as its median; None for anything else."""
    if isinstance(value, dict) and "median" in value:
        value = value["median"]
    return value if isinstance(value, (int, float, str, bool)) or value is None else None


def tables(doc: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(name, rows) of each list of records in a result, at the top level or one level down."""
    found = []
    for key, value in doc.items():
        if key == "environment":
            continue
        if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            found.append((key, value))
        elif isinstance(value, dict):
            found += [
                (f"{key}.{k}", v)
                for k, v in value.items()
                if isinstance(v, list) and v and all(isinstance(r, dict) for r in v)
            ]
    return found


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if 1e4 <= abs(value) < 1e15 else f"{value:.4g}"
    return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: list[dict[str, Any]]) -> str:
    columns = [c for c in dict.fromkeys(k for r in rows for k in r) if any(_scalar(r.get(c)) is not None for r in rows)]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(_cell(_scalar(r.get(c))) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def headline(doc: dict[str, Any]) -> str:
    """The ratios against the peer a result holds (each key's range over its rows), and its goals met."""
    parts = []
    for name, rows in tables(doc):
        for key in RATIOS:
            values = [v for r in rows if isinstance(v := _scalar(r.get(key)), (int, float)) and not isinstance(v, bool)]
            if values and not (key == "ratio" and "goal" in rows[0]):
                parts.append(f"{key} {min(values):.3g}-{max(values):.3g} ({name}, {len(values)} rows)")
        met = [r["met"] for r in rows if isinstance(r.get("met"), bool)]
        if met:
            parts.append(f"goals met {sum(met)} of {len(met)} ({name})")
    return "; ".join(parts) or "see the rows"


def _measured(doc: dict[str, Any]) -> str:
    env = doc.get("environment", {})
    where = ", ".join(
        str(x)
        for x in (
            env.get("host"),
            f"{env.get('cpus')} CPUs" if env.get("cpus") else None,
            f"torch {env['torch']}" if env.get("torch") else None,
            env.get("gpu"),
        )
        if x
    )
    return f"{env.get('date', 'undated')} on {where or 'an unrecorded machine'}"


def performance(docs: dict[str, dict[str, Any]], results_dir: Path = RESULTS) -> str:
    out = [
        "# Performance",
        "",
        f"Generated from `benchmarks/results/*.json` by `{COMMAND}`: do not edit by hand. Every figure is a",
        "ratio against a peer measured in the same run on the same machine (median of repeats); what each",
        "benchmark does and how to run it: benchmarks/README.md; why the figures are what they are:",
        "docs/performance_notes.md.",
        "",
    ]
    for name, doc in docs.items():
        b = BENCHMARKS[name]
        out += [
            f"## {name}",
            "",
            f"{b.what}. Against: {b.peer}.",
            "",
            f"- command: `{b.command}`",
            f"- measured: {_measured(doc)}",
            f"- headline: {headline(doc)}",
        ]
        if isinstance(doc.get("note"), str) and doc["note"].strip():
            out.append(f"- note: {' '.join(doc['note'].split())}")
        out.append("")
        if (results_dir / f"{name}.png").exists():
            out += [f"![{name}](../benchmarks/results/{name}.png)", ""]
        for table_name, rows in tables(doc):
            if (name, table_name) in SUMMARIES:
                table_name, summarize = SUMMARIES[(name, table_name)]
                rows = summarize(rows)
            out += [
                f"<details><summary>{table_name}: {len(rows)} rows</summary>",
                "",
                markdown_table(rows),
                "",
                "</details>",
                "",
            ]
    return "\n".join(out).rstrip() + "\n"


def readme_table(docs: dict[str, dict[str, Any]], results_dir: Path = RESULTS) -> str:
    rows = ["| result | measures | against | command | latest figure | plot |", "| --- | --- | --- | --- | --- | --- |"]
    for name, doc in docs.items():
        b = BENCHMARKS[name]
        plot = f"[{name}.png](results/{name}.png)" if (results_dir / f"{name}.png").exists() else "-"
        rows.append(
            f"| [{name}](../docs/performance.md#{name}) | {_cell(b.what)} | {_cell(b.peer)} | "
            f"`{b.command}` | {_cell(headline(doc))} ({doc.get('environment', {}).get('date', '')[:10]}) "
            f"| {plot} |"
        )
    return "\n".join([BEGIN, *rows, END])


def undescribed(docs: dict[str, dict[str, Any]]) -> list[str]:
    return [name for name in docs if name not in BENCHMARKS]


def generated(results_dir: Path = RESULTS, readme_text: Optional[str] = None) -> tuple[str, str]:
    """(docs/performance.md, benchmarks/README.md) as the results make them."""
    docs = results(results_dir)
    missing = undescribed(docs)
    if missing:
        raise ValueError(
            f"results without an entry in BENCHMARKS of benchmarks/performance_registry.py: {missing}; say "
            "what each measures, against which peer, and its command"
        )
    text = README.read_text() if readme_text is None else readme_text
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"{README} has no benchmarks table: put the lines\n{BEGIN}\n{END}\nwhere it belongs")
    return performance(docs, results_dir), pattern.sub(lambda _: readme_table(docs, results_dir), text, count=1)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.performance_doc", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 when a generated document is out of date")
    args = p.parse_args(argv)
    doc, readme = generated()
    stale = [
        str(path.relative_to(ROOT))
        for path, text in ((DOC, doc), (README, readme))
        if not path.exists() or path.read_text() != text
    ]
    if args.check:
        print(f"out of date: {', '.join(stale)}; run `{COMMAND}`" if stale else "up to date with the results")
        return 1 if stale else 0
    for path, text in ((DOC, doc), (README, readme)):
        path.write_text(text)
    print(f"wrote {', '.join(stale) or 'nothing (up to date)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
