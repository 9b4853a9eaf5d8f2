"""PYCOMM_* variables are read only through the registry of pycomm/settings.py: every one refuses garbage
with an error naming it, the value and what it accepts (in a fresh process importing its layer's table,
where the check happens, and again where each is first used); the compiled core holds exactly the values
Python parsed; a misspelt variable warns with the closest real name; PYCOMM_TIMEOUT=0 is "no timeout";
settings every rank must share are compared when a communicator is made."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import pytest

import pycomm
from pycomm import settings, settings_doc
from pycomm._build import core
from tests.launch import ROOT, mpirun, worker_env

settings_doc.load_tables((ROOT / settings_doc.DOC).read_text())  # every layer's table, as the docs gather them

# A value each validated setting must refuse; a test below checks that none is missing.
GARBAGE = {
    "PYCOMM_TIMEOUT": "soon",
    "PYCOMM_DEBUG": "maybe",
    "PYCOMM_NUM_THREADS": "0",
    "PYCOMM_CPU_ISA": "avx512",
    "PYCOMM_MPI_NONBLOCKING": "2",
    "PYCOMM_INLINE_BYTES": "64k",
    "PYCOMM_SPIN_US": "-1",
    "PYCOMM_EAGER_BYTES": "2097152",
    "PYCOMM_QUANTIZED_SEGMENT": "1e6",
    "PYCOMM_MPI_GPU_AWARE": "yes",
    "PYCOMM_HUGEPAGES": "maybe",
    "PYCOMM_NCCL_SPLIT": "fresh",
    "PYCOMM_FAIL_FAST": "sometimes",
    "PYCOMM_OVERSUBSCRIBED": "yes",
    "PYCOMM_RANKS_PER_NODE": "two",
    "PYCOMM_APPS_FAIL_AT": "1:2:crash",
    "PYCOMM_APPS_TTY": "tty",
    "PYCOMM_APPS_FAILURE_DIR": "/nonexistent/pycomm-failures",
    "PYCOMM_APPS_SPAWNED": "spawned",
    "PYCOMM_MNIST": "/nonexistent/mnist",
    "PYCOMM_FAULT_MATRIX": "all",
    "PYCOMM_PS_RANK": "-1",
    "PYCOMM_PS_WORLD": "0",
    "PYCOMM_PS_ADDRESS": "localhost",
    "PYCOMM_PS_ADDRESSES": "a:1,,b:2",
    "PYCOMM_PS_SERVER_RESTARTS": "-1",
    "PYCOMM_PS_SECRET": "too-short",
    "PYCOMM_PS_HOST": "host:29500",
    "PYCOMM_SERVE_API_KEY": "a key with spaces",
    "PYCOMM_PROFILE_STARTUP": "/nonexistent/pycomm-profile/startup.jsonl",
    "PYCOMM_TRACE": "/nonexistent/pycomm-trace/run",
    "PYCOMM_TRACE_EVENTS": "8",
    "PYCOMM_FLIGHT_RECORDER": "/nonexistent/pycomm-flight/run",
}
# Valid values other than the defaults, and what each parses to.
NON_DEFAULT = {
    "PYCOMM_TIMEOUT": ("7.5", 7.5),
    "PYCOMM_DEBUG": ("1", True),
    "PYCOMM_NUM_THREADS": ("3", 3),
    "PYCOMM_CPU_ISA": ("generic", "generic"),
    "PYCOMM_MPI_NONBLOCKING": ("on", True),
    "PYCOMM_INLINE_BYTES": ("65536", 65536),
    "PYCOMM_SPIN_US": ("0", 0),
    "PYCOMM_MPI_GPU_AWARE": ("1", True),
    "PYCOMM_NCCL_SPLIT": ("init", "init"),
    "PYCOMM_OVERSUBSCRIBED": ("0", False),
    "PYCOMM_EAGER_BYTES": ("16384", 16384),
}
VALIDATED = [s.name for s in settings.BY_NAME.values() if s.scope in settings.VALIDATED_SCOPES]
CORE = [s.name for s in settings.SETTINGS if s.core]


def python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in worker_env().items()
        if not k.startswith(("PYCOMM_", "OMPI_", "PMI", "SLURM_", "TORCHELASTIC_"))
    }
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=300
    )


def test_every_validated_setting_has_garbage_and_every_core_one_a_non_default_value():
    assert sorted(GARBAGE) == sorted(VALIDATED)
    assert sorted(NON_DEFAULT) == sorted(CORE)


@pytest.mark.parametrize("name", VALIDATED)
def test_garbage_fails_import_naming_the_variable_the_value_and_what_it_accepts(name):
    bad = GARBAGE[name]
    table = settings.TABLE_OF[name]
    p = python("import pycomm" if table == settings.TABLE else f"import pycomm, {table}", {name: bad})
    assert p.returncode != 0, f"importing {table} accepted {name}={bad!r}"
    declared = settings.declared(name)
    shown = f"<hidden, {len(bad)} characters>" if declared.secret else repr(bad)
    assert f"pycomm.errors.SettingError: {name}={shown} is not valid: expected {declared.kind.accepted}" in p.stderr, (
        p.stderr
    )
    if declared.secret:  # a key or secret, even a malformed one, is never printed
        assert bad not in p.stderr, p.stderr


def test_garbage_set_after_import_fails_where_the_core_first_uses_it():
    """Each core setting, made garbage after `import pycomm`: the core's first load (the first
    init) or the next communicator's creation refuses it, and a good value afterwards works."""
    p = python(
        "import os, pycomm\n"
        f"for name, bad in {[(n, GARBAGE[n]) for n in CORE]!r}:\n"
        "    os.environ[name] = bad\n"
        "    try:\n        pycomm.init()\n    except pycomm.SettingError as e:\n        print('refused:', e)\n"
        "    del os.environ[name]\n"
        "c = pycomm.init()\n"
        "print('then:', c.backend)\n",
        {},
    )
    assert p.returncode == 0, p.stderr
    for name in CORE:
        assert f"refused: {name}={GARBAGE[name]!r} is not valid" in p.stdout, p.stdout
    assert "then: local" in p.stdout


def test_the_core_holds_exactly_what_python_parsed():
    # NVTX's profiler path (not ours): set, the core's ranges build their messages; a library that does not
    # load leaves NVTX's calls no-ops, so the ops below also run the ranges' attached path
    env = {
        **{name: raw for name, (raw, _) in NON_DEFAULT.items()},
        settings.NVTX_TOOL_ENV: "/nonexistent/libpycomm-test-nvtx-injection.so",
    }
    p = python(
        "import pycomm\nfrom pycomm._build import core\n"
        "print(repr(core().settings()))\n"
        "assert core().settings() == pycomm.settings.core_values()\n"
        "print('timeout', core().stall_timeout(), 'debug', core().debug_checks(),"
        " 'isa', pycomm.build_info()['cpu_isa'])\n"
        "if pycomm.build_info()['mpi']:\n    print('mpi gpu-aware', core().mpi_info()['gpu_aware'])\n"
        "import torch\npycomm.init()\nt = torch.ones(4)\npycomm.world().allreduce(t, op=pycomm.SUM)\n"
        "print('op', t.tolist())\n",
        env,
    )
    assert p.returncode == 0, p.stderr
    assert "op [1.0, 1.0, 1.0, 1.0]" in p.stdout, p.stdout
    held = eval(p.stdout.splitlines()[0])  # the core's dict, as repr printed it
    assert held == {**{name: value for name, (_, value) in NON_DEFAULT.items()}, settings.NVTX_TOOL_ENV: True}
    # where the core's own answers show a setting, they follow it (CPU ISA forced, MPI declared GPU-aware)
    assert "timeout 7.5 debug True isa generic" in p.stdout
    assert not pycomm.build_info()["mpi"] or "mpi gpu-aware True" in p.stdout, p.stdout


def test_a_variable_set_after_the_core_loaded_counts_from_the_next_communicator():
    p = python(
        "import os, pycomm\nfrom pycomm._build import core\n"
        "print('before', core().stall_timeout(), core().debug_checks())\n"
        "os.environ.update(PYCOMM_TIMEOUT='42', PYCOMM_DEBUG='yes')\n"
        "pycomm.init()\n"
        "print('after', core().stall_timeout(), core().debug_checks())\n",
        {},
    )
    assert p.returncode == 0, p.stderr
    assert "before 300.0 False" in p.stdout and "after 42.0 True" in p.stdout, p.stdout


def test_the_core_refuses_an_incomplete_or_unknown_settings_dict():
    values = settings.core_values()
    with pytest.raises(ValueError, match="apply_settings: missing PYCOMM_TIMEOUT"):
        core().apply_settings({k: v for k, v in values.items() if k != "PYCOMM_TIMEOUT"})
    with pytest.raises(ValueError, match="PYCOMM_TIMOUT is not a setting of the core"):
        core().apply_settings({**values, "PYCOMM_TIMOUT": 5.0})
    assert core().settings() == values  # a refused dict changes nothing


def test_the_core_and_the_registry_default_to_the_same_eager_limit():
    """The core's own default (what it holds before Python applies its values) is the registry's, so a
    reader of either sees one number (the core said 4096 while the registry said 8192)."""
    assert core().EAGER_BYTES_DEFAULT == settings.declared("PYCOMM_EAGER_BYTES").default


@pytest.mark.parametrize(
    "misspelt, meant",
    [
        ("PYCOMM_TIMOUT", "PYCOMM_TIMEOUT"),
        ("PYCOMM_INLINE_BYTE", "PYCOMM_INLINE_BYTES"),
        ("PYCOMM_NUMTHREADS", "PYCOMM_NUM_THREADS"),
        ("PYCOMM_APPS_FAILAT", "PYCOMM_APPS_FAIL_AT"),
    ],
)
def test_a_misspelt_variable_warns_with_the_closest_real_name(misspelt, meant):
    with pytest.warns(
        pycomm.errors.SettingWarning,
        match=f"{misspelt} is not a pycomm setting and is ignored; did you mean {meant}\\?",
    ):
        settings.check_environment({misspelt: "1"})


def test_import_warns_about_a_misspelling_and_leaves_build_switches_and_other_layers_alone():
    """`import pycomm` judges pycomm's names only: another layer's variable (its table not loaded yet) is no
    misspelling, and a misspelling of an apps variable is named once apps' table loads."""
    p = python(
        "import pycomm\nprint('apps next', flush=True)\nimport apps.apps_settings",
        {
            "PYCOMM_TIMOUT": "5",
            "PYCOMM_CUDA": "sometimes",
            "PYCOMM_APT_UPDATED": "1",
            "PYCOMM_APPS_SPAWNED": "1",
            "PYCOMM_PS_RANK": "0",
            "PYCOMM_APPS_FAILAT": "1:2",
        },
    )
    assert p.returncode == 0, p.stderr  # a build switch is CMake's to judge, not import's
    assert (
        "SettingWarning: PYCOMM_TIMOUT is not a pycomm setting and is ignored; did you mean PYCOMM_TIMEOUT?" in p.stderr
    ), p.stderr
    assert "did you mean PYCOMM_APPS_FAIL_AT?" in p.stderr, p.stderr
    for name in ("PYCOMM_CUDA", "PYCOMM_APT_UPDATED", "PYCOMM_APPS_SPAWNED", "PYCOMM_PS_RANK"):
        assert name not in p.stderr, p.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        settings.check_environment({"PYCOMM_TIMEOUT": "5", "PYCOMM_NVTX": "off"})  # no warning for known names


def test_timeout_zero_means_no_timeout_in_the_store_and_the_core(monkeypatch):
    monkeypatch.setenv("PYCOMM_TIMEOUT", "0")
    store = pycomm.TCPStore("127.0.0.1", 0, 1, is_server=True)
    try:
        assert store.timeout == math.inf
        store.set("k", b"v")
        assert store.get("k") == b"v"
    finally:
        store.close()
    p = python(
        "import pycomm, torch\nfrom pycomm._build import core\n"
        "c = pycomm.init()\nt = torch.ones(4)\nc.allreduce(t, op=pycomm.AVG)\n"
        "print('stall timeout', core().stall_timeout(), t.tolist())\n",
        {"PYCOMM_TIMEOUT": "0"},
    )
    assert p.returncode == 0, p.stderr
    assert "stall timeout 0.0 [1.0, 1.0, 1.0, 1.0]" in p.stdout, p.stdout


@pytest.mark.parametrize("raw, value", [("", 300.0), ("  12 ", 12.0), ("0", 0.0), ("1e3", 1000.0), (".5", 0.5)])
def test_timeout_values(raw, value):
    assert settings.get("PYCOMM_TIMEOUT", {"PYCOMM_TIMEOUT": raw}) == value


@pytest.mark.parametrize("raw", ["-1", "inf", "nan", "1e10", "5s", ".", "e5", "0x10"])
def test_timeout_out_of_range_or_malformed(raw):
    with pytest.raises(
        pycomm.SettingError,
        match=r"PYCOMM_TIMEOUT=.* is not valid: expected a number of seconds "
        r"from 0 to 1e9 \(0: no timeout\); unset or empty, it is 300",
    ):
        settings.get("PYCOMM_TIMEOUT", {"PYCOMM_TIMEOUT": raw})


def test_the_registry_refuses_a_variable_declared_twice_or_agreed_outside_pycomm():
    twice = settings.Setting("PYCOMM_TIMEOUT", settings.Flag(), False, "a second declaration", "nobody")
    with pytest.raises(ValueError, match="PYCOMM_TIMEOUT is declared by both pycomm.settings and elsewhere"):
        settings.register("elsewhere", [twice])
    agreed = settings.Setting("PYCOMM_SOMEWHERE_AGREED", settings.Flag(), False, "x", "nobody", agreed=True)
    with pytest.raises(ValueError, match="PYCOMM_SOMEWHERE_AGREED is marked agreed"):
        settings.register("elsewhere", [agreed])
    assert "elsewhere" not in settings.TABLES and "PYCOMM_SOMEWHERE_AGREED" not in settings.BY_NAME


@pytest.mark.mpi
def test_settings_every_rank_must_share_are_compared_when_a_communicator_is_made():
    proc = mpirun(2, "tests.comm.workers.agreement")
    assert proc.stdout.count("agreement ok") == 2, proc.stdout
