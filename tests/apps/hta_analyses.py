"""Holistic Trace Analysis (0.5) on CPU traces: which of its analyses run on a trace. The reference is torch's
own CPU-only torch.profiler trace: an analysis that runs there must run on pycomm's traces too (those that
fail there count GPU kernels, which a CPU trace has none of; docs/tracing.md lists both kinds)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

ANALYSES: dict[str, Callable[[Any], Any]] = {
    "get_profiler_steps": lambda a: a.get_profiler_steps(),
    "get_comm_comp_overlap": lambda a: a.get_comm_comp_overlap(visualize=False),
    "get_temporal_breakdown": lambda a: a.get_temporal_breakdown(visualize=False),
    "get_idle_time_breakdown": lambda a: a.get_idle_time_breakdown(visualize=False),
    "get_gpu_kernel_breakdown": lambda a: a.get_gpu_kernel_breakdown(visualize=False),
    "get_cuda_kernel_launch_stats": lambda a: a.get_cuda_kernel_launch_stats(visualize=False),
    "get_queue_length_summary": lambda a: a.get_queue_length_summary(),
    "get_memory_bw_summary": lambda a: a.get_memory_bw_summary(),
    "critical_path_analysis": lambda a: a.critical_path_analysis(
        rank=0, annotation="ProfilerStep", instance_id=int(a.get_profiler_steps()[0])
    ),
}


def torch_cpu_trace(directory: Path) -> Path:
    """A few steps of a linear layer under torch.profiler (CPU only), as HTA reads a rank's trace."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "rank0.json"
    model = torch.nn.Linear(64, 64)
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=3)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=schedule,
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(4):
            model(torch.randn(8, 64)).sum().backward()
            prof.step()
    trace = json.loads(path.read_text())
    trace["distributedInfo"] = {"rank": 0}  # what HTA reads the rank from
    path.write_text(json.dumps(trace))
    return directory


def outcomes(trace_dir: Path) -> dict[str, str]:
    """Each analysis's outcome on the traces in trace_dir: "ok", or the exception's type and message."""
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_dir=str(trace_dir))
    result = {}
    for name, run in ANALYSES.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run(analysis)
            result[name] = "ok"
        except Exception as e:  # HTA's own failures, whatever their type
            result[name] = f"{type(e).__name__}: {e}"
    return result
