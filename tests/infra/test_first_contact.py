"""What a newcomer meets first works as written: README.md opens with its title and the two set-up
commands (.ci/run greps the second), stays short, and its scripts run; `help(pycomm)` teaches (its
quick start runs) and lists no stray public names; the console scripts say their own names."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pycomm
from tests.launch import ROOT, worker_env

README = (ROOT / "README.md").read_text()


def test_readme_opens_with_its_title_and_the_set_up_commands_and_stays_short():
    lines = README.splitlines()
    assert lines[0] == "# pycomm", lines[0]
    first_block = README.index("```bash\n")
    assert README[first_block:].startswith("```bash\nbash scripts/run.sh\nbash scripts/test.sh\n```"), "set-up"
    assert len(re.findall(r"\S+", README)) <= 1500


def test_readme_scripts_run(tmp_path: Path):
    """Each `# name.py` block of the README, saved and run as a user would (here on one rank)."""
    scripts = {
        block.splitlines()[0][2:]: block
        for block in re.findall(r"```python\n(.*?)```", README, re.S)
        if re.fullmatch(r"# \w+\.py", block.splitlines()[0])
    }
    assert set(scripts) == {"first.py", "train.py"}, set(scripts)
    for name, text in scripts.items():
        (tmp_path / name).write_text(text)
    run = "import runpy\nfor name in ('first.py', 'train.py'):\n    runpy.run_path(name, run_name='__main__')\n"
    p = subprocess.run(
        [sys.executable, "-c", run], cwd=tmp_path, env=worker_env(), capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rank 0 of 1 (local): mean of y = " in p.stdout and "rank 0: loss " in p.stdout, p.stdout
    assert (tmp_path / "ckpt.rank0.pt").exists()


def test_help_pycomm_teaches_and_its_quick_start_runs():
    doc = pycomm.__doc__
    assert len(doc.splitlines()) > 10 and "Communicator" in doc and "CommOptimizer" in doc
    quick = textwrap.dedent(doc.split("plain python for one rank):\n\n", 1)[1].split("\n\n", 1)[0])
    assert quick.lstrip().startswith("import torch, pycomm"), quick
    exec(compile(quick, "pycomm.__doc__", "exec"), {})
    assert all(hasattr(pycomm, name) for name in pycomm.__all__)
    assert "annotations" not in dir(pycomm)


@pytest.mark.parametrize("module, script", [("apps.train", "pycomm-train"), ("apps.plot", "pycomm-plot")])
def test_console_scripts_say_their_own_name(module: str, script: str, monkeypatch, capsys):
    import importlib

    main = importlib.import_module(module).main
    for argv0, usage in (
        (f"/venv/bin/{script}", f"usage: {script} "),
        (f"/src/{module.replace('.', '/')}.py", f"usage: python -m {module} "),
    ):
        monkeypatch.setattr(sys, "argv", [argv0])
        with pytest.raises(SystemExit):
            main(["--help"])
        assert capsys.readouterr().out.startswith(usage)
