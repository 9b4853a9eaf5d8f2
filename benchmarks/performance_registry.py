"""Every benchmark behind docs/performance.md: what it measures, the peer it is measured against in the same
run, and the command that writes benchmarks/results/<name>.json (and .png). benchmarks/performance_doc.py
renders the documents from these entries and the results; a result without an entry here fails its test."""

from __future__ import annotations

from dataclasses import dataclass


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
    "composition_pp2": Benchmark(
        "the composition benchmark's pipeline layouts with more repeats: pp2 x mbsgd and pp2 x zero1-3 "
        "against torch pipelining 1F1B x DDP, samples/s median, min and max of 5",
        "torch.distributed.pipelining 1F1B x DDP (gloo)",
        "python -m benchmarks.composition --repeats 5 --layouts pp2_mbsgd pp2_zero1 pp2_zero2 pp2_zero3 "
        "torch_pp2_1f1b_ddp "
        "--results-dir DIR (results copied to composition_pp2)",
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
        "DiLoCo int4, and DiLoCo with torchft's settings; each seed (the model's initialisation and the data "
        "order) alike for every case; medians of 3 seeds, quiet machine (2026-11-29, load 2-3)",
        "torch DDP and FSDP2 as HSDP on a 2-D DeviceMesh (gloo, torchrun per node); torchft DiLoCo",
        "python -m benchmarks.nodes --seeds 3 --rates 100mbit 1gbit 10gbit --cases ddp mbsgd mbsgd+int8 "
        "mbsgd-nocomm hsdp+plsgd hsdp+diloco torchft-diloco diloco-torchft-settings fsdp2-hsdp",
    ),
    "nodes_diloco": Benchmark(
        "pycomm's DiLoCo against torchft's with torchft's settings (3 fragments, H = 24, one step of delay, "
        "mixing 0.5, outer SGD 0.7 / Nesterov 0.9, fp32), MNIST CNN, 2 nodes x 1 rank at 100 Mbit/s: "
        "through apps.train under HSDP zero2, through apps.train alone (preemption agreed once per period), "
        "and in torchft's own bare loop with its fragments (the like-for-like one); medians of 3 seeds (the "
        "loss's spread in final_loss_min / max), quiet machine (2026-11-29)",
        "torchft DiLoCo (gloo, a replica group per node); torch DDP for the target",
        "python -m benchmarks.nodes --rates 100mbit --seeds 3 --name nodes_diloco --cases ddp torchft-diloco "
        "diloco-torchft-settings diloco-apps diloco-bare",
    ),
    "nodes_gpt": Benchmark(
        "a small character GPT (2 layers, 128 wide, context 64, AdamW; benchmarks/nodes_problem.py) on 2 nodes "
        "x 2 ranks of the emulated cluster at 100 Mbit/s: training seconds to DDP's final eval loss (within 1%), "
        "samples/s, bytes across the nodes and final loss of every pycomm method, against DDP and FSDP2 as "
        "HSDP with the same model, samples and optimizer; one seed, quiet machine (2026-11-29; the peers re-run "
        "after their loop took apps.train's data order). torchft's cases need one rank per node",
        "torch DDP and FSDP2 as HSDP on a 2-D DeviceMesh (gloo, torchrun per node)",
        "python -m benchmarks.nodes --problem gpt-char --ranks-per-node 2 --rates 100mbit --name nodes_gpt "
        "--cases ddp fsdp2-hsdp mbsgd mbsgd+int8 mbsgd+1bit mbsgd-nocomm zero3 hsdp-zero2 hsdp+plsgd hsdp+diloco "
        "diloco-bare qsr lsgd",
    ),
    "nodes_gpt_seeds": Benchmark(
        "the char GPT of nodes_gpt on 2 nodes x 2 ranks at 100 Mbit/s, 3 seeds (medians; the loss's spread "
        "in final_loss_min / max): the hierarchical and quantized synchronous methods and the DiLoCo cases, "
        "quiet machine (2026-11-29)",
        "torch DDP and FSDP2 as HSDP (gloo, torchrun per node)",
        "python -m benchmarks.nodes --problem gpt-char --ranks-per-node 2 --seeds 3 --rates 100mbit "
        "--name nodes_gpt_seeds --cases ddp fsdp2-hsdp mbsgd+int8 hsdp-zero2 hsdp+diloco diloco-bare",
    ),
    "nodes_more": Benchmark(
        "the rest of the nodes benchmark's methods at 100 Mbit/s, 1 Gbit/s and 10 Gbit/s, in runs of their own (its "
        "own DDP): zero3, qsr, lsgd, mbsgd and mbsgd + int8 on pycomm's gloo backend, mbsgd + "
        "1-bit, HSDP zero2 (dp_shard 1 at 1 rank per node); torchft LocalSGD (H = 8); medians of 3 seeds, "
        "quiet machine (2026-11-29)",
        "torch DDP (gloo, torchrun per node); torchft LocalSGD",
        "python -m benchmarks.nodes --seeds 3 --rates 100mbit 1gbit 10gbit --name nodes_more --cases ddp zero3 qsr "
        "lsgd mbsgd-gloo mbsgd+int8-gloo torchft-localsgd mbsgd+1bit hsdp-zero2",
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
    "small_profile_quiet_before": Benchmark(
        "small_profile's splits on a quiet machine, on the build before op matching carried only the blocks "
        "each rank still needs (it carried whole buffers)",
        "mpi4py on the same buffers, on 2 ranks and on COMM_SELF",
        "python -m benchmarks.small_profile --calls 1000 --name small_profile_quiet_before",
    ),
    "small_profile_quiet_blocks": Benchmark(
        "small_profile_quiet_before's splits minutes later on the build whose op matching carries a small "
        "all-gather's and reduce-scatter's blocks only",
        "mpi4py on the same buffers, on 2 ranks and on COMM_SELF",
        "python -m benchmarks.small_profile --calls 1000 --name small_profile_quiet_blocks",
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
