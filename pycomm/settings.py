"""The registry of PYCOMM_* environment variables, and pycomm's own table of them.

Each layer declares the variables it reads in a table of its own (pycomm's run-time variables and
build switches here; apps' in apps/apps_settings.py, the parameter servers' in
algorithms/ps/ps_settings.py, the benchmarks' in benchmarks/benchmark_settings.py, the set-up scripts'
in scripts/script_settings.py) and registers it with `register(table, entries)` when it is imported.
Each Setting names its variable, the kind of value it takes (pycomm/_setting_values.py), its default,
what it does and who reads it. Readers call `get(name)`; a malformed value raises SettingError (a
ValueError) naming the variable, the value and what it accepts. `import pycomm` validates pycomm's
variables that are set, and each table validates its own when it registers; an unknown PYCOMM_* close
to a declared name (a misspelling) warns, naming it, when that name's table is checked.

Settings marked `agreed` must be the same on every rank: pycomm/rank_agreement.py compares them when a
communicator is made, and a difference is a SettingError naming the variable and both values.

The compiled core never reads the environment: `apply()` hands it the parsed values of the `core`
settings (_C.apply_settings) when it loads (pycomm._build.core) and again before each communicator
is created, so a variable set after `import pycomm` but before `pycomm.init()` counts.
PYCOMM_INLINE_BYTES, PYCOMM_SPIN_US, PYCOMM_CPU_ISA and PYCOMM_NUM_THREADS keep the value of their
first use. Build-time switches (scope "build") are listed for the documentation only: setup.py and
CMake read them, and nothing here validates them.

`python -m pycomm.settings_doc` lists every setting with its current value and generates
docs/settings.md from the tables (pycomm/settings_doc.py)."""

from __future__ import annotations

import difflib
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

# every kind, so that an entry of any kind merges into this table as into the others
from pycomm._setting_values import (  # noqa: F401
    Choice,
    Directory,
    FilePath,
    Flag,
    Integer,
    NewDirectory,
    Number,
    Pattern,
    Text,
    ValueKind,
)
from pycomm.errors import SettingError, SettingWarning

RUNTIME, APPS, TESTS, BUILD, SCRIPTS = "runtime", "apps", "tests", "build", "scripts"
VALIDATED_SCOPES = (RUNTIME, APPS, TESTS)  # build and script switches are not ours to judge at import
PREFIX = "PYCOMM_"
MISSPELLING_CUTOFF = 0.85  # difflib ratio above which an unknown name is taken for a misspelling
NVTX_TOOL_ENV = "NVTX_INJECTION64_PATH"
AUTO_ON_OFF = Choice({"auto": "auto", "on": "on", "off": "off"})


@dataclass(frozen=True)
class Setting:
    name: str
    kind: ValueKind
    default: Any  # the value when unset or empty
    doc: str  # what it does (the "effect" column of docs/settings.md)
    read_by: str  # who uses it
    scope: str = RUNTIME
    core: bool = False  # handed to the compiled core by apply()
    default_text: Optional[str] = None  # how the default reads, where str(default) would not do
    agreed: bool = False  # must be the same on every rank: compared when a communicator is made
    secret: bool = False  # a key or secret: its value is never printed (errors, listings, logs)

    def shown(self, raw: str) -> str:
        """`raw` as an error or a listing may print it: a secret's value only as its length."""
        return f"<hidden, {len(raw)} characters>" if self.secret else repr(raw)

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
            raise SettingError(
                f"{self.name}={self.shown(raw)} is not valid: expected {self.kind.accepted}; "
                f"unset or empty, it is {self.default_words}"
            ) from None


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "PYCOMM_TIMEOUT",
        Number(0, 1e9, "seconds", {0: "no timeout"}),
        300.0,
        "seconds a `wait()` may block before it raises `pycomm.StallError` naming the op, its sequence number "
        "and sizes; also bounds every wait of the TCP store (`pycomm.TCPStore`, NCCL start-up without MPI)",
        "the core's stall check (csrc/diagnostics/stall.cc), pycomm.store, pycomm.nccl_backend",
        core=True,
    ),
    Setting(
        "PYCOMM_DEBUG",
        Flag(),
        False,
        "`1`: the full op check (docs/diagnostics.md, *The op check*): also before every NCCL collective, and "
        "`allreduce_coalesced` matched as one op",
        "the core's op check (csrc/diagnostics/op_check.cc), pycomm.fusion",
        core=True,
        agreed=True,
    ),
    Setting(
        "PYCOMM_NUM_THREADS",
        Integer(1, 65536, "threads"),
        None,
        "OpenMP threads of the CPU kernels (fixed at first use); ranks that share a node's cores get their "
        "share each, since more threads than cores make every kernel wait for descheduled ones",
        "the CPU kernels (csrc/kernels/cpu/parallel.cc)",
        core=True,
        default_text="the cores this process may use / the launcher's ranks on this node (at least 1)",
    ),
    Setting(
        "PYCOMM_CPU_ISA",
        Choice({"auto": "auto", "generic": "generic"}),
        "auto",
        "`generic`: force the baseline x86-64 kernels instead of the AVX2 ones `auto` picks where the CPU "
        "has AVX2 (fixed at first use)",
        "the CPU kernels (csrc/kernels/cpu/isa.cc)",
        core=True,
    ),
    Setting(
        "PYCOMM_MPI_NONBLOCKING",
        Flag(),
        False,
        "`1`: MPI collectives as nonblocking calls polled by the progress thread (default: blocking calls on "
        "it above `PYCOMM_INLINE_BYTES`, faster with Open MPI for large messages). Host all-reduces never "
        "use MPI's collectives: pycomm's own, on point-to-point messages (recursive doubling up to 32 KiB, "
        "Rabenseifner or the ring above, reused scratch buffers), run on the caller's thread",
        "the MPI transport, at each communicator's creation (csrc/transport/mpi/mpi_transport.cc)",
        core=True,
        agreed=True,
    ),
    Setting(
        "PYCOMM_INLINE_BYTES",
        Integer(0, 1 << 62, "bytes", {0: "off"}),
        0,
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
        '`pycomm.stats()[op]["inline_calls"]` counts the ops that ran on the caller\'s thread. The same on '
        "every rank because it decides which MPI calls match; fixed from the first communicator on",
        "the host transports' blocking path (csrc/queue/inline_run.cc)",
        core=True,
        agreed=True,
    ),
    Setting(
        "PYCOMM_EAGER_BYTES",
        Integer(0, 1 << 20, "bytes"),
        8192,
        "largest host broadcast, all-gather or reduce-scatter (bytes: the gathered or scattered whole) on MPI "
        "whose data travels inside op matching's messages (one round of messages in all, like MPI's eager "
        "protocol) instead of a schedule after it; the data lands in a buffer of pycomm's own and reaches "
        "your tensor only once every rank's op, size and dtype agreed (a wrong-sized payload is refused with "
        "`pycomm.MismatchError`). Host all-reduces carry theirs up to 32 KiB whatever it says. Measured in "
        "docs/performance_notes.md (*The eager limit*): from 16 KiB on 2 ranks the data is faster in a schedule "
        "after matching; at 8 KiB 4 ranks gain and 2 neither gain nor lose. The same on every rank because it decides which "
        "messages the ranks exchange; fixed for a communicator when it is made",
        "the MPI transport, at each communicator's creation (csrc/transport/mpi/p2p_collective_op.cc)",
        core=True,
        agreed=True,
    ),
    Setting(
        "PYCOMM_SPIN_US",
        Integer(0, 1_000_000, "microseconds", {0: "no spinning"}),
        250,
        "microseconds a waiter on a queued op yield-spins before blocking (fixed at first use); the idle "
        "progress thread never spins, it sleeps until an op is queued",
        "the core's waits (csrc/queue/spin.cc)",
        core=True,
    ),
    Setting(
        "PYCOMM_FAIL_FAST",
        Flag(),
        True,
        "`1`: when `pycomm.init()` or `pycomm.from_mpi4py()` sees several ranks, an uncaught exception on any rank prints its "
        "traceback and ends the whole job within seconds (`pycomm.abort`: `MPI_Abort` under mpirun / srun), "
        "and a rank that exits with ops it never waited for ends the job when one of them fails or stalls; "
        "`0`: Python's own handling (the other ranks then wait in their next collective until "
        "`PYCOMM_TIMEOUT`)",
        "pycomm.fail_fast, at pycomm.init() / from_mpi4py()",
    ),
    Setting(
        "PYCOMM_HUGEPAGES",
        Flag(),
        True,
        "`1`: large host buffers pycomm allocates (fusion buckets, shard buffers) ask the kernel for "
        "transparent huge pages, and the `--nproc` launchers start their ranks with "
        "`THP_MEM_ALLOC_ENABLE=1` (torch's allocator then does the same for your tensors of >= 2 MiB) "
        "unless it is set: Open MPI's shared-memory copies pin every source page, and 2 ranks broadcast "
        "64 MiB 2.2x faster on huge pages (see pycomm/hugepages.py); `0`: neither",
        "pycomm.hugepages (pycomm._buffers, apps.launch)",
    ),
    Setting(
        "PYCOMM_QUANTIZED_SEGMENT",
        Integer(1, 1 << 62, "elements"),
        None,
        "elements per pipelined segment of `allreduce_quantized`: a larger tensor encodes segment k+1 while "
        "k is on the wire (the same on every rank: the segments are the ops the ranks match)",
        "pycomm.quantized, at each call",
        default_text="1048576 for host tensors where `comm.oversubscribed` is False (ranks have a core each), "
        "else 4194304",
        agreed=True,
    ),
    Setting(
        "PYCOMM_MPI_GPU_AWARE",
        Choice({"auto": None, "0": False, "1": True}),
        None,
        "override the detection of a CUDA/ROCm-aware MPI (without one, GPU buffers are staged through "
        "pinned host memory)",
        "the MPI transport (csrc/transport/mpi/mpi_env.cc)",
        core=True,
        default_text="auto",
    ),
    Setting(
        "PYCOMM_OVERSUBSCRIBED",
        Choice({"auto": None, "0": False, "1": True}),
        None,
        "override the detection of ranks outnumbering the cores of their node (auto: more ranks on a node "
        "than the cores in the union of their CPU affinities; 1 on any node counts for the whole "
        "communicator). Oversubscribed, the host broadcast takes the binomial tree at every size (fewer "
        "rounds, each of which waits for a descheduled partner), polls yield the core, and point-to-point "
        "schedules keep a whole step in flight; `comm.oversubscribed` says what a communicator agreed",
        "the MPI transport, at each communicator's creation (csrc/transport/mpi/mpi_transport.cc)",
        core=True,
        default_text="auto",
    ),
    Setting(
        "PYCOMM_NCCL_SPLIT",
        Choice({"split": "split", "init": "init"}),
        "split",
        "`init`: split NCCL communicators with a fresh unique id (what NCCL < 2.18 always does) instead of "
        "`ncclCommSplit`",
        "the NCCL transport's split (csrc/transport/nccl/nccl_setup.cc)",
        core=True,
        agreed=True,
    ),
    Setting(
        "PYCOMM_RANKS_PER_NODE",
        Integer(1, (1 << 31) - 1, "ranks"),
        None,
        "declares nodes of k consecutive ranks for `split_by_node` (and so hybrid ZeRO) instead of the "
        "machine's real ones, to exercise node-aware code on one machine; k must divide the size",
        "Communicator.split_by_node, at each call",
        default_text="the real nodes",
        agreed=True,
    ),
    Setting(
        "PYCOMM_PROFILE_STARTUP",
        FilePath("appended to; every process of the job writes there"),
        None,
        "start-up profile: each process (the `--nproc` launcher and every rank) appends one JSON line per "
        "start-up phase it finishes (`process_start`, `torch_imported`, `pycomm_imported`, `mpi_init`, `init`, "
        "and apps' phases up to `first_step`) to this file; `python -m pycomm.startup_report FILE` prints "
        "them per process (docs/diagnostics.md, *Start-up time*)",
        "pycomm.startup_profile",
        default_text="no profile",
    ),
    Setting(
        "PYCOMM_TRACE",
        NewDirectory("every rank writes there; rank 0 also reads the others' files"),
        None,
        "trace every op of the run: each rank records its ops' facts and phases in the core and, at "
        "`pycomm.finalize()` (or exit), writes its chrome trace to `DIR/ranks/rank<R>.json`, and rank 0 the "
        "merged `DIR/trace.json` (clocks aligned by a ping exchange); as `with pycomm.profile(DIR):` around "
        "the whole program (see docs/tracing.md). A StallError also dumps every reachable rank's last events "
        "there (the flight recorder)",
        "pycomm.tracing.profiling, pycomm.tracing.flight_recorder",
        default_text="no trace",
    ),
    Setting(
        "PYCOMM_TRACE_EVENTS",
        Integer(16, 1 << 30, "events"),
        32768,
        "trace events each thread's ring holds (128 bytes each, rounded up to a power of two): a thread's "
        "older events are overwritten, and the trace counts them as dropped (about 5 events per op)",
        "pycomm.tracing",
    ),
    Setting(
        "PYCOMM_FLIGHT_RECORDER",
        NewDirectory("every rank writes there"),
        None,
        "keep recording trace events (ring of `PYCOMM_TRACE_EVENTS` per thread, no trace files) so that a "
        "`StallError` dumps the last events of every rank still reachable into this directory "
        "(`flight_rank<R>.json`, and on the rank that stalled `flight.json` naming each rank's last op), as "
        "PyTorch's NCCL flight recorder does; the error's message names the file",
        "pycomm.tracing.flight_recorder",
        default_text="off (on with `PYCOMM_TRACE`, dumping there)",
    ),
    Setting(
        "PYCOMM_CUDA",
        AUTO_ON_OFF,
        "auto",
        "CUDA kernels; `auto`: when `nvcc` is found (`CUDA_HOME`, `/usr/local/cuda`) and a GPU is visible "
        "(`nvidia-smi -L`, else `/dev/nvidia0`) or `PYCOMM_CUDA_ARCHS` is set",
        "setup.py, CMakeLists.txt (cmake/PycommGpuChoice.cmake)",
        scope=BUILD,
    ),
    Setting(
        "PYCOMM_CUDA_ARCHS",
        Text("a ;-separated list of SM architectures"),
        "80;90",
        "SM architectures",
        "setup.py, CMakeLists.txt",
        scope=BUILD,
    ),
    Setting(
        "PYCOMM_HIP",
        AUTO_ON_OFF,
        "auto",
        "HIP kernels; `auto`: when `hipcc` is found (ROCm or Debian's `hipcc` + `libamdhip64-dev`) and a GPU "
        "is visible (`rocminfo`, else `/dev/kfd`) or `PYCOMM_HIP_ARCHS` is set",
        "setup.py, CMakeLists.txt (cmake/PycommGpuChoice.cmake)",
        scope=BUILD,
    ),
    Setting(
        "PYCOMM_HIP_ARCHS",
        Text("a ;-separated list of offload architectures"),
        "gfx90a",
        "offload architectures",
        "setup.py, CMakeLists.txt",
        scope=BUILD,
    ),
    Setting(
        "PYCOMM_MPI",
        AUTO_ON_OFF,
        "auto",
        "MPI transport, linked against the MPI mpi4py uses",
        "setup.py, CMakeLists.txt (cmake/PycommMpi.cmake)",
        scope=BUILD,
    ),
    Setting(
        "PYCOMM_NCCL",
        AUTO_ON_OFF,
        "auto",
        "NCCL (from `NCCL_HOME` or the `nvidia-nccl-cu13` wheel) / RCCL (ROCm)",
        "setup.py, CMakeLists.txt (cmake/PycommNccl.cmake)",
        scope=BUILD,
    ),
    Setting(
        "PYCOMM_NVTX",
        AUTO_ON_OFF,
        "auto",
        "NVTX3 ranges (CUDA toolkit headers, `NVTX_HOME`, or the `nvidia-nvtx` wheel); at run time the "
        "ranges are made only while a profiler attaches to NVTX (`NVTX_INJECTION64_PATH` set, as Nsight "
        "Systems does), so that ops pay nothing for them otherwise",
        "setup.py, CMakeLists.txt (cmake/PycommNvtx.cmake)",
        scope=BUILD,
    ),
    Setting(
        "PYCOMM_BUILD_TYPE",
        Choice({t: t for t in ("Release", "Debug", "RelWithDebInfo", "MinSizeRel")}),
        "Release",
        "CMake build type (`pip install` only)",
        "setup.py",
        scope=BUILD,
    ),
    Setting(
        "PYCOMM_BUILD_JOBS",
        Integer(1, 4096, "jobs"),
        None,
        "parallel compile jobs (`pip install` only)",
        "setup.py",
        scope=BUILD,
        default_text="the CPU count",
    ),
)
TABLE = __name__
TABLES: dict[str, tuple[Setting, ...]] = {}  # table (the module that declares it) -> its settings
BY_NAME: dict[str, Setting] = {}  # every registered setting by variable
TABLE_OF: dict[str, str] = {}  # variable -> the table declaring it
AGREEABLE = (Integer, Flag, Choice)  # the kinds rank_agreement can carry as one integer


def register(table: str, entries: Sequence[Setting], check: bool = True) -> tuple[Setting, ...]:
    """Adds a layer's table of settings (`table`: the module declaring it, which calls this at import).
    check: validate the table's variables that are set now and warn about misspellings of its names
    (pycomm's own table is checked by `import pycomm`). A variable declared by two tables, or agreed
    across ranks but outside pycomm's table, is refused. Registering a table again replaces it."""
    entries = tuple(entries)
    for s in entries:
        owner = TABLE_OF.get(s.name, table)
        if owner != table:
            raise ValueError(f"{s.name} is declared by both {owner} and {table}; one table declares each variable")
        if not s.name.startswith(PREFIX):
            raise ValueError(f"{table}: {s.name} does not start with {PREFIX}")
        if s.agreed and (table != TABLE or not isinstance(s.kind, AGREEABLE)):
            raise ValueError(
                f"{table}: {s.name} is marked agreed, which pycomm's own whole-number, flag and "
                "choice settings may be (pycomm/rank_agreement.py compares them)"
            )
    for s in TABLES.pop(table, ()):
        BY_NAME.pop(s.name, None)
        TABLE_OF.pop(s.name, None)
    TABLES[table] = entries
    BY_NAME.update((s.name, s) for s in entries)
    TABLE_OF.update((s.name, table) for s in entries)
    if check:
        check_environment(table=table)
    return entries


def declared(name: str) -> Setting:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(
            f"{name} is not declared by any loaded settings table (closest: {closest(name)}); "
            "import the table that declares it, or declare it in its layer's table"
        ) from None


def get(name: str, env: Optional[Mapping[str, str]] = None) -> Any:
    """The value of setting `name` in `env` (default: os.environ, as it is now); its default when unset
    or empty. Raises SettingError when the value is malformed."""
    return declared(name).parse((os.environ if env is None else env).get(name, ""))


def core_values(env: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """The settings of the compiled core, by variable name, as _C.apply_settings takes them."""
    values = {s.name: get(s.name, env) for s in TABLES[TABLE] if s.core}
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
    except ValueError:  # a malformed launcher variable is reported where ranks are made
        local = 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, local))


def apply() -> None:
    """Hands the core settings to the compiled core, if it is loaded (else its loader will)."""
    core = sys.modules.get("pycomm._C")
    if core is not None:
        core.apply_settings(core_values())


def closest(name: str, among: Optional[Sequence[str]] = None) -> str:
    """The declared variable most like `name` (for "did you mean")."""
    return difflib.get_close_matches(name, list(BY_NAME if among is None else among), n=1, cutoff=0.0)[0]


def check_environment(env: Optional[Mapping[str, str]] = None, table: Optional[str] = None) -> None:
    """Validates every run-time setting of `table` (default: every registered table) that `env` (default
    os.environ) sets, raising SettingError on the first malformed one, and warns (SettingWarning) about
    each unknown PYCOMM_* whose closest declared name is one of that table's and close enough to be a
    misspelling of it (a name near none is left alone: it may belong to a table not loaded here)."""
    env = os.environ if env is None else env
    mine = [s for t, entries in TABLES.items() if table in (None, t) for s in entries]
    for s in mine:
        if s.scope in VALIDATED_SCOPES:
            get(s.name, env)
    names = {s.name for s in mine}
    for name in sorted(n for n in env if n.startswith(PREFIX) and n not in BY_NAME):
        meant = closest(name)
        if meant in names and difflib.SequenceMatcher(None, name, meant).ratio() >= MISSPELLING_CUTOFF:
            warnings.warn(
                f"{name} is not a pycomm setting and is ignored; did you mean {meant}? "
                f"(`python -m pycomm.settings_doc` lists them all)",
                SettingWarning,
                stacklevel=2,
            )


register(TABLE, SETTINGS, check=False)  # checked by `import pycomm` (pycomm/__init__.py)
