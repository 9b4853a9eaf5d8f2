"""Every public function of pycomm fed generated bad arguments (tests/comm/bad_arguments/) raises
TypeError or ValueError naming the argument: never a crash, another exception, or a silent answer."""

from __future__ import annotations

import pytest

from tests.comm.bad_arguments import Case, all_cases, outcome

CASES = all_cases()


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
def test_bad_argument_gets_a_clear_error(case: Case):
    kind, detail = outcome(case)
    assert kind == "clear", f"{case.name}: {kind}: {detail}"


def test_the_catalog_covers_the_public_api():
    """Guards the generator itself: every family of callables is there, with many cases each."""
    apis = {c.api.split(".")[0] for c in CASES}
    assert {"kernels", "Int8Codec", "Int4Codec", "OneBitCodec", "TCPStore", "LayerwiseAverager", "Communicator"} <= apis
    assert len(CASES) > 700
