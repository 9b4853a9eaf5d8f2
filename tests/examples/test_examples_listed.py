"""Every example is listed in examples/README.md with the command its own opening lines show, and has a
test of its own here. (Which layers examples may import: tests/infra/test_python_layers.py.)"""

from __future__ import annotations

import re

from tests.examples import run_example
from tests.launch import ROOT

SCRIPTS = sorted(p.name for p in run_example.EXAMPLES.glob("*.py") if p.name != "__init__.py")


def test_each_example_is_listed_with_the_command_it_shows_and_has_a_test() -> None:
    assert SCRIPTS, "no examples"
    readme = (run_example.EXAMPLES / "README.md").read_text()
    for name in SCRIPTS:
        row = next((line for line in readme.splitlines() if line.startswith(f"| [{name}]({name})")), None)
        assert row, f"examples/README.md has no row for {name}"
        command = re.search(r"`((?:mpirun -n 2 )?python examples/\S+)`", row)
        assert command and command.group(1).endswith(name), f"{name}'s row shows no command running it: {row}"
        assert re.search(rf"^\s*{re.escape(command.group(1))}", run_example.docstring(name), re.M), (
            f"examples/{name}'s opening lines do not show `{command.group(1)}`"
        )
        assert (ROOT / "tests" / "examples" / f"test_{name}").is_file(), f"no tests/examples/test_{name}"
