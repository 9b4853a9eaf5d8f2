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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from benchmarks.collectives_common import mpi4py_ratios
from benchmarks.harness import RESULTS

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


@dataclass(frozen=True)
class Benchmark:
    what: str  # what it measures
    peer: str  # what it is measured against, in the same run
    command: str  # what writes results/<name>.json and .png


BENCHMARKS: dict[str, Benchmark] = {
    "algorithms": Benchmark(
        "every algorithm on the tiny MNIST CNN, 2 ranks, default and TCP-only transports: "
        "samples/s, bytes per step, time to 95%, final accuracy",
        "torch DDP (gloo)",
        "python -m benchmarks.algorithms --repeats 3",
    ),
    "algorithms_busy": Benchmark(
        "a user's own MNIST script (AdamW, OneCycle, clipping, bf16 autocast), 2 ranks, "
        "idle and beside a busy process per core: samples/s, final loss",
        "torch DDP (gloo) started the same way (mpirun; torchrun)",
        "python -m benchmarks.algorithms --busy --repeats 3",
    ),
    "algorithms_gpt": Benchmark(
        "a 10.7M-parameter char GPT on 4 ranks, mbsgd / plsgd / qsr with and without int8, "
        "also over an emulated 10 Gbit/s link",
        "torch DDP (gloo)",
        "python -m benchmarks.algorithms --model gpt --repeats 2 --links default shaped",
    ),
    "algorithms_lap": Benchmark(
        "LAP-SGD and LPP-SGD (2 Hogwild workers per rank, and 1) on the MNIST CNN",
        "torch DDP (gloo)",
        "python -m benchmarks.algorithms --cases ddp lapsgd lppsgd "
        "lapsgd-1w --repeats 3 --transports default --name algorithms_lap",
    ),
    "collectives": Benchmark(
        "all-reduce busbw 4 KiB-256 MiB, ResNet-50 gradient fusion, int8 / 1-bit quantized all-reduce",
        "mpi4py on the same buffers; torch.distributed gloo",
        "python -m benchmarks.collectives",
    ),
    "collectives_busbw_fusion": Benchmark(
        "all-reduce busbw and ResNet-50 gradient fusion on an idle machine",
        "mpi4py; torch.distributed gloo",
        "python -m benchmarks.collectives --sections busbw,fusion --name collectives_busbw_fusion",
    ),
    "collectives_fusion": Benchmark(
        "ResNet-50's 161 gradients all-reduced per tensor, fused, and with defaults",
        "flat mpi4py; per-tensor torch gloo",
        "python -m benchmarks.collectives --sections fusion --name collectives_fusion",
    ),
    "collectives_eager": Benchmark(
        "where PYCOMM_EAGER_BYTES should sit: the four collectives from 4 to 64 KiB under "
        "a plain mpirun, isolated and back-to-back calls, once per limit (4-64 KiB)",
        "mpi4py in the same processes",
        "python -m benchmarks.collectives --sections eager --name collectives_eager",
    ),
    "collectives_plain": Benchmark(
        "all-reduce, broadcast, all-gather, reduce-scatter from 4 KiB under a plain "
        "`mpirun -n N` (Open MPI's default binding): isolated calls (a barrier, then one) "
        "and back-to-back calls, 2 and 4 ranks",
        "mpi4py in the same processes",
        "python -m benchmarks.collectives --sections plain --name collectives_plain",
    ),
    "collectives_shaped": Benchmark(
        "fp32 / int8 / 1-bit all-reduce on an emulated 10 Gbit/s link (tc tbf in a "
        "network namespace; root only), with the codec's roofline",
        "fp32 all-reduce; the link floor",
        "python -m benchmarks.collectives --sections quantized_shaped --name collectives_shaped",
    ),
    "collectives_shards": Benchmark(
        "ZeRO's reduce_scatter_coalesced / allgather_coalesced on flat shards",
        "mpi4py Reduce_scatter / Allgather on one flat buffer",
        "python -m benchmarks.collectives --sections shards --name collectives_shards",
    ),
    "collectives_small": Benchmark(
        "all-reduce, broadcast, all-gather, reduce-scatter from 4 KiB, idle, beside busy loops, and on huge pages",
        "mpi4py in the same processes",
        "python -m benchmarks.collectives --sections small,small_busy,small_hugepages --name collectives_small",
    ),
    "composition": Benchmark(
        "the char GPT on 4 ranks in every supported layout (DP, ZeRO-3, HSDP, ZeRO-3 in plsgd, "
        "pp2 x mbsgd / zero1-3): samples/s, memory per rank, bytes per step per mesh dimension",
        "torch DDP, FSDP2 on a 2-D mesh (HSDP), torch.distributed.pipelining 1F1B x DDP (gloo)",
        "python -m benchmarks.composition --repeats 3",
    ),
    "composition_busy": Benchmark(
        "the same, 3 repeats of 4 steps, after zero3 under a pipeline gathers each unit "
        "once per step (pp2 x zero3: 32.6 MB over dp_shard per step, was 76.1), measured "
        "at load average 23-27 (other jobs on the 2 cores): min-max spreads up to 2.6x",
        "as composition, in the same run",
        "python -m benchmarks.composition --repeats 3 --steps 4 (results copied to composition_busy)",
    ),
    "ddp_backend": Benchmark(
        "DDP and FSDP2 on the tiny MNIST CNN, 2 and 4 ranks, idle and beside a busy loop per core, on the "
        'torch.distributed backend "pycomm": samples/s',
        "the same on gloo in the same job",
        "python -m benchmarks.ddp_backend",
    ),
    "ddp_backend_gpt": Benchmark(
        'DDP and FSDP2 on a char GPT (4 x 128, tiny Shakespeare), 2 and 4 ranks, "idle" (load average 8-14 '
        'from other jobs) and beside a busy loop per core, on the torch.distributed backend "pycomm": samples/s',
        "the same on gloo in the same job",
        "python -m benchmarks.ddp_backend --model gpt --repeats 3 --steps 10",
    ),
    "ddp_hooks_link": Benchmark(
        "DDP with pycomm's int8 and 1-bit communication hooks, 2 emulated nodes x 1 rank over a shaped 1 Gbit/s "
        'link, the MNIST CNN and a char GPT (4 x 128), on backend "pycomm" and on gloo, 2 repeats of 30 steps: '
        "samples/s, final loss, bytes on the wire per step",
        "DDP fp32 on the same backend in the same run",
        "python -m benchmarks.ddp_hooks_link --repeats 2 --steps 30",
    ),
    "diloco": Benchmark(
        "eval loss against bytes sent per rank for DDP, plsgd, qsr, DiLoCo (H 16, 64; int8, int4), "
        "streaming DiLoCo on the char GPT, 4 ranks, equal steps and samples",
        "mbsgd (DDP's rule)",
        "python -m benchmarks.diloco --lock /tmp/pycomm-bench.lock",
    ),
    "diloco_batch16": Benchmark(
        "diloco's long run at 4x the batch: mbsgd against DiLoCo H 64 with int8 outer "
        "gradients, 1024 steps of 16 sequences per rank (16 outer rounds), char GPT, 4 ranks",
        "mbsgd (DDP's rule)",
        "python -m benchmarks.diloco --steps 1024 --batch 16 --seeds 1 --links default "
        "--cases mbsgd diloco-h64+int8 --name diloco_batch16",
    ),
    "diloco_long": Benchmark(
        "diloco over 16x the steps: mbsgd against DiLoCo H 64 (fp32, int8, int4 outer "
        "gradients), 2048 steps of 4 sequences per rank (32 outer rounds), char GPT, 4 ranks",
        "mbsgd (DDP's rule)",
        "python -m benchmarks.diloco --steps 2048 --seeds 1 --links default --cases mbsgd "
        "diloco-h64 diloco-h64+int8 diloco-h64+int4 --name diloco_long",
    ),
    "diloco_sweep": Benchmark(
        "DiLoCo's outer lr (0.4, 0.7, 1.0), momentum (0.9, 0) and period (H 64 with int8, "
        "H 32 and QSR's with int4, H 16 and 8 with 1-bit outer gradients) at diloco_long's "
        "setting: 2048 steps of 4 sequences per rank, char GPT, 4 ranks, seed 0",
        "mbsgd (DDP's rule)",
        "python -m benchmarks.diloco_sweep",
    ),
    "hogwild_staleness": Benchmark(
        "what the LAP workers' 0.9 updates of staleness cost in accuracy",
        "the same rule without staleness",
        "python -m benchmarks.hogwild_staleness",
    ),
    "kernels": Benchmark(
        "the CPU kernels (pack, quantize, 1-bit, averaging) in GB/s, one thread",
        "memcpy; the same operation composed from torch ops",
        "PYCOMM_NUM_THREADS=1 python -m benchmarks.kernels",
    ),
    "kernels_gpu": Benchmark(
        "the GPU kernels (pack, quantize, 1-bit, averaging, elastic) in GB/s on one GPU, CUDA events",
        "a device-to-device copy; the same operation composed from torch ops",
        "python -m benchmarks.kernels (on the GPU, through bash scripts/gpu_check.sh)",
    ),
    "lap_profile": Benchmark(
        "a LAP worker's step split into fetch / forward / backward / update",
        "a DDP rank's local step",
        "python -m benchmarks.lap_profile",
    ),
    "nodes": Benchmark(
        "the MNIST CNN of apps.train on 2 nodes x 1 rank of the emulated cluster at 100 Mbit/s, 1 Gbit/s "
        "and 10 Gbit/s: training seconds to DDP's final eval loss (within 1%), samples/s, bytes across the "
        "nodes, final loss of mbsgd (fp32, int8, and its no-communication ceiling), HSDP plsgd / streaming "
        "DiLoCo int4, and DiLoCo with torchft's settings; one seed per link, on a busy shared 2-core machine",
        "torch DDP and FSDP2 as HSDP on a 2-D DeviceMesh (gloo, torchrun per node); torchft DiLoCo",
        "python -m benchmarks.nodes --rates 100mbit; python -m benchmarks.nodes --rates 1gbit 10gbit --merge "
        "--cases ddp mbsgd mbsgd+int8 mbsgd-nocomm hsdp+plsgd hsdp+diloco torchft-diloco "
        "diloco-torchft-settings fsdp2-hsdp",
    ),
    "nodes_diloco": Benchmark(
        "pycomm's DiLoCo against torchft's with torchft's settings (3 fragments, H = 24, one step of delay, "
        "mixing 0.5, outer SGD 0.7 / Nesterov 0.9, fp32), MNIST CNN, 2 nodes x 1 rank at 100 Mbit/s: "
        "through apps.train under HSDP zero2, through apps.train alone (preemption agreed once per period), "
        "and in torchft's own bare loop with its fragments (the like-for-like one); 2 seeds, busy machine",
        "torchft DiLoCo (gloo, a replica group per node); torch DDP for the target",
        "python -m benchmarks.nodes --rates 100mbit --seeds 2 --name nodes_diloco --cases ddp torchft-diloco "
        "diloco-torchft-settings diloco-apps diloco-bare",
    ),
    "nodes_more": Benchmark(
        "the rest of the nodes benchmark's methods at 100 Mbit/s, 1 Gbit/s and 10 Gbit/s, in runs of their own (its "
        "own DDP): zero3, qsr, lsgd, mbsgd and mbsgd + int8 on pycomm's gloo backend, mbsgd + "
        "1-bit, HSDP zero2 (dp_shard 1 at 1 rank per node); torchft LocalSGD (H = 8)",
        "torch DDP (gloo, torchrun per node); torchft LocalSGD",
        "python -m benchmarks.nodes --rates 100mbit --name nodes_more --cases ddp zero3 qsr lsgd "
        "mbsgd-gloo mbsgd+int8-gloo torchft-localsgd mbsgd+1bit hsdp-zero2; the same with --rates 1gbit 10gbit --merge",
    ),
    "overlap": Benchmark(
        "share of backward's compute time with a gradient reduction in flight, char GPT on 2 ranks "
        "(2 cores): mbsgd and zero2, and both with overlap_backward=False (the floor, 0)",
        "torch DDP (gloo) profiled in the same run",
        "python -m benchmarks.overlap",
    ),
    "pipeline": Benchmark(
        "Pipeline (gpipe, 1f1b, interleaved 1f1b) on an MLP, 2 and 4 stages",
        "torch.distributed.pipelining on gloo",
        "python -m benchmarks.pipeline",
    ),
    "pipeline_inference": Benchmark(
        "apps.serve's tokens/s and time to first token for 1, 4, 16 clients",
        "one process; SmolCluster's no-cache star through rank 0",
        "python -m benchmarks.pipeline_inference",
    ),
    "reproduce": Benchmark(
        "the papers' comparisons through apps.train: every method, with and without int8, "
        "MNIST CNN and char GPT, 4 ranks, 3 seeds",
        "the methods against each other at equal bytes",
        "python -m benchmarks.reproduce",
    ),
    "ssp_momentum": Benchmark(
        "why ssp with momentum 0.9 diverges, and the corrections",
        "ssp without staleness",
        "python -m benchmarks.ssp_momentum",
    ),
    "staleness": Benchmark(
        "mbsgd, ssp K = 1, 2, 4, asyncps fp32 / int8, syncps on 4 processes, with and without a 2x straggler",
        "mbsgd",
        "python -m benchmarks.staleness --lock FILE",
    ),
    "startup": Benchmark(
        "time to the first collective, and apps.train --nproc 2 to its first step, phase by phase",
        "mpi4py; torchrun + gloo; the floors (import torch, MPI_Init)",
        "python -m benchmarks.startup",
    ),
    "startup_before": Benchmark(
        "the start-up benchmark before the config checks stopped importing torch._dynamo",
        "mpi4py; torchrun + gloo; the floors",
        "python -m benchmarks.startup",
    ),
    "startup_quiet": Benchmark(
        "the start-up benchmark at a quiet moment",
        "the floors",
        "python -m benchmarks.startup --cases script apps floor --repeats 3",
    ),
    "small_profile_before": Benchmark(
        "where a small collective's time goes on 2 ranks under a plain mpirun (the cases below 0.9x): "
        "the op, op matching's round alone, the op on 1 rank (fixed cost), isolated and back to back; "
        "the build before one-way broadcast matching",
        "mpi4py on the same buffers, on 2 ranks and on COMM_SELF",
        "python -m benchmarks.small_profile --calls 60 --name small_profile_before",
    ),
    "small_profile_one_way": Benchmark(
        "small_profile_before's splits on the build with one-way broadcast matching",
        "mpi4py on the same buffers, on 2 ranks and on COMM_SELF",
        "python -m benchmarks.small_profile --calls 60 --name small_profile_one_way",
    ),
    "trace_overhead": Benchmark(
        "a 4 KiB all-reduce on 2 ranks with tracing compiled in but off, and on",
        "the core built from before tracing (the same source without trace events)",
        "python -m benchmarks.trace_overhead",
    ),
    "zero": Benchmark(
        "ZeRO 1/2/3 on the char GPT (small and wide), idle and beside a busy process per core: "
        "parameters + gradients + optimizer state per rank, backward's peak, samples/s (median, min, "
        "max of shuffled repeats), 2 and 4 ranks",
        "torch DDP and FSDP2 (gloo); mbsgd",
        "python -m benchmarks.zero --repeats 3",
    ),
}


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
            f"results without an entry in BENCHMARKS of benchmarks/performance_doc.py: {missing}; say "
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
