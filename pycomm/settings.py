"""Every PYCOMM_* environment variable, declared, read and validated here and nowhere else.

Each Setting names its variable, the kind of value it takes (pycomm/_setting_values.py), its default,
what it does and who reads it. Readers call `get(name)`; a malformed value raises SettingError (a
ValueError) naming the variable, the value and what it accepts. `import pycomm` validates every
runtime variable that is set and warns about an unknown PYCOMM_* (a misspelling, named with the
closest real one).

The compiled core never reads the environment: `apply()` hands it the parsed values of the `core`
settings (_C.apply_settings) when it loads (pycomm._build.core) and again before each communicator
is created, so a variable set after `import pycomm` but before `pycomm.init()` counts.
PYCOMM_INLINE_BYTES, PYCOMM_SPIN_US, PYCOMM_CPU_ISA and PYCOMM_NUM_THREADS keep the value of their
first use. Build-time switches (scope "build") are listed for the README only: setup.py and CMake
read them, and nothing here validates them.

`python -m pycomm.settings_doc` lists every setting with its current value (pycomm/settings_doc.py:
the README tables are generated from this table there)."""
from __future__ import annotations

import difflib
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from pycomm._setting_values import Choice, Directory, FilePath, Flag, Integer, Number, Pattern, Text, ValueKind
from pycomm.errors import SettingError, SettingWarning

RUNTIME, APPS, TESTS, BUILD, SCRIPTS = "runtime", "apps", "tests", "build", "scripts"
VALIDATED_SCOPES = (RUNTIME, APPS, TESTS)  # build and script switches are not ours to judge at import
PREFIX = "PYCOMM_"
NVTX_TOOL_ENV = "NVTX_INJECTION64_PATH"
AUTO_ON_OFF = Choice({"auto": "auto", "on": "on", "off": "off"})


@dataclass(frozen=True)
class Setting:
    name: str
    kind: ValueKind
    default: Any                          # the value when unset or empty
    doc: str                              # what it does (the README's "effect" column)
    read_by: str                          # who uses it
    scope: str = RUNTIME
    core: bool = False                    # handed to the compiled core by apply()
    default_text: Optional[str] = None    # how the default reads, where str(default) would not do

    @property
    def default_words(self) -> str:
        if self.default_text is not None:
            return self.default_text
        if isinstance(self.default, bool):
            return "1" if self.default else "0"
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)

    def parse(self, raw: str) -> Any:
        text = raw.strip()
        if not text:
            return self.default
        try:
            return self.kind.parse(text)
        except ValueError:
            raise SettingError(f"{self.name}={raw!r} is not valid: expected {self.kind.accepted}; "
                               f"unset or empty, it is {self.default_words}") from None


def _fail_at(match: Any) -> tuple[int, int, str]:
    return int(match[1]), int(match[2]), match[3] or "raise"


SETTINGS: tuple[Setting, ...] = (
    Setting("PYCOMM_TIMEOUT", Number(0, 1e9, "seconds", {0: "no timeout"}), 300.0,
            "seconds a `wait()` may block before it raises `pycomm.StallError` naming the op, its sequence number "
            "and sizes; also bounds every wait of the TCP store (`pycomm.TCPStore`, NCCL start-up without MPI)",
            "the core's stall check (csrc/diagnostics/stall.cc), pycomm.store, pycomm.nccl_backend", core=True),
    Setting("PYCOMM_DEBUG", Flag(), False,
            "`1`: the full op check (see *The op check* below): also before every NCCL collective, and "
            "`allreduce_coalesced` matched as one op",
            "the core's op check (csrc/diagnostics/op_check.cc), pycomm.fusion", core=True),
    Setting("PYCOMM_NUM_THREADS", Integer(1, 65536, "threads"), None,
            "OpenMP threads of the CPU kernels (fixed at first use); ranks that share a node's cores get their "
            "share each, since more threads than cores make every kernel wait for descheduled ones",
            "the CPU kernels (csrc/kernels/cpu/parallel.cc)", core=True,
            default_text="the cores this process may use / the launcher's ranks on this node (at least 1)"),
    Setting("PYCOMM_CPU_ISA", Choice({"auto": "auto", "generic": "generic"}), "auto",
            "`generic`: force the baseline x86-64 kernels instead of the AVX2 ones `auto` picks where the CPU "
            "has AVX2 (fixed at first use)",
            "the CPU kernels (csrc/kernels/cpu/isa.cc)", core=True),
    Setting("PYCOMM_MPI_NONBLOCKING", Flag(), False,
            "`1`: MPI collectives as nonblocking calls polled by the progress thread (default: blocking calls on "
            "it above `PYCOMM_INLINE_BYTES`, faster with Open MPI for large messages). Host all-reduces never "
            "use MPI's collectives: pycomm's own, on point-to-point messages (recursive doubling up to 32 KiB, "
            "Rabenseifner or the ring above, reused scratch buffers), run on the caller's thread",
            "the MPI transport, at each communicator's creation (csrc/transport/mpi/mpi_transport.cc)", core=True),
    Setting("PYCOMM_INLINE_BYTES", Integer(0, 1 << 62, "bytes", {0: "off"}), 0,
            "largest op (bytes) that a blocking call (`async_op=False`, `send`, `recv`) runs on the caller's own "
            "thread when nothing else of that communicator is queued or in flight, instead of handing it to the "
            "progress thread and waiting (some always do, at any size: blocking host all-reduces, broadcasts, "
            "all-gathers and reduce-scatters on MPI, which never block inside MPI, and the one-rank `local` "
            "transport's collectives on host tensors). MPI ops up to this size always use nonblocking MPI calls, "
            "on either path (the caller's thread needs them to give up at `PYCOMM_TIMEOUT`, and MPI never matches"
            " a blocking collective with a nonblocking one), and Open MPI's nonblocking collectives are slower "
            "than its blocking ones: set it (e.g. 65536) where ranks' threads outnumber the cores, where the "
            "hand-off to the progress thread costs far more (2 ranks on a loaded 2-core node: 4 KiB all-reduce "
            "40-70 us instead of 300-640 us; on the idle node 25 us instead of 12 us); "
            "`pycomm.stats()[op][\"inline_calls\"]` counts the ops that ran on the caller's thread. Must be the "
            "same on every rank (it decides which MPI calls match); fixed from the first communicator on",
            "the host transports' blocking path (csrc/queue/inline_run.cc)", core=True),
    Setting("PYCOMM_SPIN_US", Integer(0, 1_000_000, "microseconds", {0: "no spinning"}), 250,
            "microseconds a waiter on a queued op yield-spins before blocking (fixed at first use); the idle "
            "progress thread never spins, it sleeps until an op is queued",
            "the core's waits (csrc/queue/spin.cc)", core=True),
    Setting("PYCOMM_FAIL_FAST", Flag(), True,
            "`1`: when `pycomm.init()` starts several ranks, an uncaught exception on any rank prints its "
            "traceback and ends the whole job within seconds (`pycomm.abort`: `MPI_Abort` under mpirun / srun), "
            "and a rank that exits with ops it never waited for ends the job when one of them fails or stalls; "
            "`0`: Python's own handling (the other ranks then wait in their next collective until "
            "`PYCOMM_TIMEOUT`)",
            "pycomm.fail_fast, at pycomm.init()"),
    Setting("PYCOMM_HUGEPAGES", Flag(), True,
            "`1`: large host buffers pycomm allocates (fusion buckets, shard buffers) ask the kernel for "
            "transparent huge pages, and the `--nproc` launchers start their ranks with "
            "`THP_MEM_ALLOC_ENABLE=1` (torch's allocator then does the same for your tensors of >= 2 MiB) "
            "unless it is set: Open MPI's shared-memory copies pin every source page, and 2 ranks broadcast "
            "64 MiB 2.2x faster on huge pages (see pycomm/hugepages.py); `0`: neither",
            "pycomm.hugepages (pycomm._buffers, apps.launch)"),
    Setting("PYCOMM_QUANTIZED_SEGMENT", Integer(1, 1 << 62, "elements"), None,
            "elements per pipelined segment of `allreduce_quantized`: a larger tensor encodes segment k+1 while "
            "k is on the wire. Must be the same on every rank",
            "pycomm.quantized, at each call",
            default_text="1048576 for host tensors where `comm.oversubscribed` is False (ranks have a core each), "
                         "else 4194304"),
    Setting("PYCOMM_MPI_GPU_AWARE", Choice({"auto": None, "0": False, "1": True}), None,
            "override the detection of a CUDA/ROCm-aware MPI (without one, GPU buffers are staged through "
            "pinned host memory)",
            "the MPI transport (csrc/transport/mpi/mpi_env.cc)", core=True, default_text="auto"),
    Setting("PYCOMM_OVERSUBSCRIBED", Choice({"auto": None, "0": False, "1": True}), None,
            "override the detection of ranks outnumbering the cores of their node (auto: more ranks on a node "
            "than the cores in the union of their CPU affinities; 1 on any node counts for the whole "
            "communicator). Oversubscribed, the host broadcast takes the binomial tree at every size (fewer "
            "rounds, each of which waits for a descheduled partner), polls yield the core, and point-to-point "
            "schedules keep a whole step in flight; `comm.oversubscribed` says what a communicator agreed",
            "the MPI transport, at each communicator's creation (csrc/transport/mpi/mpi_transport.cc)", core=True,
            default_text="auto"),
    Setting("PYCOMM_NCCL_SPLIT", Choice({"split": "split", "init": "init"}), "split",
            "`init`: split NCCL communicators with a fresh unique id (what NCCL < 2.18 always does) instead of "
            "`ncclCommSplit`",
            "the NCCL transport's split (csrc/transport/nccl/nccl_setup.cc)", core=True),
    Setting("PYCOMM_RANKS_PER_NODE", Integer(1, (1 << 31) - 1, "ranks"), None,
            "declares nodes of k consecutive ranks for `split_by_node` (and so hybrid ZeRO) instead of the "
            "machine's real ones, to exercise node-aware code on one machine; k must divide the size",
            "Communicator.split_by_node, at each call", default_text="the real nodes"),
    Setting("PYCOMM_PROFILE_STARTUP", FilePath("appended to; every process of the job writes there"), None,
            "start-up profile: each process (the `--nproc` launcher and every rank) appends one JSON line per "
            "start-up phase it finishes (`process_start`, `torch_imported`, `pycomm_imported`, `mpi_init`, `init`, "
            "and apps' phases up to `first_step`) to this file; `python -m pycomm.startup_report FILE` prints "
            "them per process (see *Start-up time* below)",
            "pycomm.startup_profile", default_text="no profile"),
    Setting("PYCOMM_APPS_FAIL_AT",
            Pattern(r"(\d+):(\d+)(?::(raise|exit|kill))?", "RANK:STEP[:raise|exit|kill] (e.g. 1:5:raise)", _fail_at),
            None, "testing aid: that rank raises, leaves with `os._exit(70)` and no message, or is killed by "
            "SIGKILL (`kill`), after optimizer step STEP (a parameter server: its round of pushes STEP), whatever "
            "its role; a resumed process (a server the launcher restarted too) does not fail again (fault "
            "injection as torchft's `fail_at`: `apps/fault_injection.py`, used by `tests/apps/test_failures.py` "
            "and `tests/apps/test_fault_matrix.py`)",
            "apps.fault_injection", scope=APPS, default_text="no failure"),
    Setting("PYCOMM_APPS_TTY", Flag(), None,
            "whether rank 0 draws its progress line in place, as on a terminal; the `--nproc` launcher passes "
            "on whether its own output is a terminal",
            "apps.metrics.Progress", scope=APPS, default_text="1 on a terminal, 0 under mpirun"),
    Setting("PYCOMM_APPS_FAILURE_DIR", Directory("the launcher makes it"), None,
            "set by the `--nproc` launcher for its ranks: where a failing rank records its error for the "
            "launcher's one-line summary",
            "apps.failure", scope=APPS,
            default_text="Open MPI's session directory, else one per job under the temp directory"),
    Setting("PYCOMM_APPS_SPAWNED", Flag(), False,
            "set by the `--nproc` launcher for its ranks, so that they do not launch again",
            "apps.launch, apps.requirements", scope=APPS),
    Setting("PYCOMM_PS_RANK", Integer(0, (1 << 31) - 1, "rank"), None,
            "set by the launch of independent processes (parameter servers, ssp): this process's rank, servers "
            "first; with it set, `--nproc` does not launch again",
            "algorithms.ps.layout, apps.launch", scope=APPS, default_text="not an independent process"),
    Setting("PYCOMM_PS_WORLD", Integer(1, (1 << 31) - 1, "processes"), None,
            "with `PYCOMM_PS_RANK`: the number of independent processes", "algorithms.ps.layout", scope=APPS),
    Setting("PYCOMM_PS_ADDRESS", Pattern(r"[^\s,]+:\d+", "HOST:PORT", lambda m: m.group(0)), None,
            "with `PYCOMM_PS_RANK`: HOST:PORT of rank 0; rank r listens on PORT + r", "algorithms.ps.layout",
            scope=APPS),
    Setting("PYCOMM_PS_ADDRESSES", Pattern(r"[^\s,]+:\d+(,[^\s,]+:\d+)*", "HOST:PORT,HOST:PORT,... (one per rank)",
                                           lambda m: tuple(m.group(0).split(","))), None,
            "with `PYCOMM_PS_RANK`, instead of `PYCOMM_PS_ADDRESS`: every rank's HOST:PORT (several machines)",
            "algorithms.ps.layout", scope=APPS),
    Setting("PYCOMM_PS_SERVER_RESTARTS", Integer(0, 1000, "restarts", {0: "never restart"}), 3,
            "how many times the launch of independent processes (`--nproc N`, `python -m apps.ps server`) "
            "restarts a parameter-server rank that dies while its workers go on; each restart resumes from "
            "the server's latest checkpoint (`--resume auto`)",
            "apps.supervisor", scope=APPS),
    Setting("PYCOMM_MNIST", Directory("holding MNIST's idx files"), None,
            "where the tests find MNIST", "tests/algorithms/mnist.py", scope=TESTS,
            default_text="../shared/data/mnist beside the checkout"),
    Setting("PYCOMM_FAULT_MATRIX", Flag(), False,
            "`1`: tests/apps/test_fault_matrix.py runs every cell of the fault matrix (every algorithm x SIGTERM, "
            "kill -9 of a worker, kill -9 of a server); `0`: the cells CI runs, one or two per class of algorithm",
            "tests/apps/test_fault_matrix.py", scope=TESTS),
    Setting("PYCOMM_CUDA", AUTO_ON_OFF, "auto",
            "CUDA kernels; `auto`: when `nvcc` is found (`CUDA_HOME`, `/usr/local/cuda`) and a GPU is visible "
            "(`nvidia-smi -L`, else `/dev/nvidia0`) or `PYCOMM_CUDA_ARCHS` is set",
            "setup.py, CMakeLists.txt (cmake/PycommGpuChoice.cmake)", scope=BUILD),
    Setting("PYCOMM_CUDA_ARCHS", Text("a ;-separated list of SM architectures"), "80;90",
            "SM architectures", "setup.py, CMakeLists.txt", scope=BUILD),
    Setting("PYCOMM_HIP", AUTO_ON_OFF, "auto",
            "HIP kernels; `auto`: when `hipcc` is found (ROCm or Debian's `hipcc` + `libamdhip64-dev`) and a GPU "
            "is visible (`rocminfo`, else `/dev/kfd`) or `PYCOMM_HIP_ARCHS` is set",
            "setup.py, CMakeLists.txt (cmake/PycommGpuChoice.cmake)", scope=BUILD),
    Setting("PYCOMM_HIP_ARCHS", Text("a ;-separated list of offload architectures"), "gfx90a",
            "offload architectures", "setup.py, CMakeLists.txt", scope=BUILD),
    Setting("PYCOMM_MPI", AUTO_ON_OFF, "auto", "MPI transport, linked against the MPI mpi4py uses",
            "setup.py, CMakeLists.txt (cmake/PycommMpi.cmake)", scope=BUILD),
    Setting("PYCOMM_NCCL", AUTO_ON_OFF, "auto",
            "NCCL (from `NCCL_HOME` or the `nvidia-nccl-cu13` wheel) / RCCL (ROCm)",
            "setup.py, CMakeLists.txt (cmake/PycommNccl.cmake)", scope=BUILD),
    Setting("PYCOMM_NVTX", AUTO_ON_OFF, "auto",
            "NVTX3 ranges (CUDA toolkit headers, `NVTX_HOME`, or the `nvidia-nvtx` wheel); at run time the "
            "ranges are made only while a profiler attaches to NVTX (`NVTX_INJECTION64_PATH` set, as Nsight "
            "Systems does), so that ops pay nothing for them otherwise",
            "setup.py, CMakeLists.txt (cmake/PycommNvtx.cmake)", scope=BUILD),
    Setting("PYCOMM_BUILD_TYPE", Choice({t: t for t in ("Release", "Debug", "RelWithDebInfo", "MinSizeRel")}),
            "Release", "CMake build type (`pip install` only)", "setup.py", scope=BUILD),
    Setting("PYCOMM_BUILD_JOBS", Integer(1, 4096, "jobs"), None, "parallel compile jobs (`pip install` only)",
            "setup.py", scope=BUILD, default_text="the CPU count"),
    Setting("PYCOMM_APT_UPDATED", Flag(), False,
            "set by scripts/lib.sh once `apt-get update` ran, so that the scripts it starts skip it",
            "scripts/lib.sh", scope=SCRIPTS),
)
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def declared(name: str) -> Setting:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} is not declared in pycomm/settings.py (closest: {closest(name)})") from None


def get(name: str, env: Optional[Mapping[str, str]] = None) -> Any:
    """The value of setting `name` in `env` (default: os.environ, as it is now); its default when unset
    or empty. Raises SettingError when the value is malformed."""
    return declared(name).parse((os.environ if env is None else env).get(name, ""))


def core_values(env: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """The settings of the compiled core, by variable name, as _C.apply_settings takes them."""
    values = {s.name: get(s.name, env) for s in SETTINGS if s.core}
    if values["PYCOMM_NUM_THREADS"] is None:
        values["PYCOMM_NUM_THREADS"] = kernel_threads(env)
    # Not ours: NVTX loads a profiler from this path (Nsight Systems sets it); without one the core's
    # NVTX ranges skip building their messages (csrc/diagnostics/nvtx.cc).
    values[NVTX_TOOL_ENV] = bool((os.environ if env is None else env).get(NVTX_TOOL_ENV))
    return values


def kernel_threads(env: Optional[Mapping[str, str]] = None) -> int:
    """PYCOMM_NUM_THREADS's default: this process's share of the cores it may use, among the ranks its
    launcher put on this node (2 ranks on 2 cores: 1 thread each)."""
    from pycomm import launch_env
    try:
        local = launch_env.detect(os.environ if env is None else env).local_size
    except ValueError:                  # a malformed launcher variable is reported where ranks are made
        local = 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, local))


def apply() -> None:
    """Hands the core settings to the compiled core, if it is loaded (else its loader will)."""
    core = sys.modules.get("pycomm._C")
    if core is not None:
        core.apply_settings(core_values())


def closest(name: str) -> str:
    """The declared variable most like `name` (for "did you mean")."""
    return difflib.get_close_matches(name, list(BY_NAME), n=1, cutoff=0.0)[0]


def check_environment(env: Optional[Mapping[str, str]] = None) -> None:
    """Validates every runtime, apps and tests setting that `env` (default os.environ) sets (raises
    SettingError on the first malformed one) and warns (SettingWarning) about each unknown PYCOMM_*."""
    env = os.environ if env is None else env
    for s in SETTINGS:
        if s.scope in VALIDATED_SCOPES:
            get(s.name, env)
    for name in sorted(n for n in env if n.startswith(PREFIX) and n not in BY_NAME):
        warnings.warn(f"{name} is not a pycomm setting and is ignored; did you mean {closest(name)}? "
                      f"(`python -m pycomm.settings_doc` lists them all)", SettingWarning, stacklevel=2)
