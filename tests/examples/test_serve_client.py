"""examples/serve_client.py against a real 2-stage `python -m apps.serve` (started as a user starts it):
its streamed answer through the official `openai` client and its answer from SmolCluster's /query are both
the server's greedy answer to the chat, which this test asks for itself."""

from __future__ import annotations

import pytest

from tests.apps.serving import RANDOM_GPT, serving
from tests.examples import run_example

MODEL = "tiny-random"


@pytest.mark.mpi
def test_the_client_gets_the_greedy_answer_from_both_apis() -> None:
    with serving("--nproc", "2", *RANDOM_GPT, "--model-name", MODEL) as server:
        out = run_example.run(
            "serve_client.py", "--url", server.url, "--prompt", "Who art thou?", "--max-tokens", "40", ranks=None
        ).stdout
        with server.client() as c:
            r = c.post(
                "/query",
                json={"text": "USER:\nWho art thou?\n\nASSISTANT:\n", "max_tokens": 40, "decoding_strategy": "greedy"},
            )  # the chat template, written out
        assert r.status_code == 200, r.text
        expected = r.json()["generated_text"]
    assert len(expected) == 40
    assert f"model {MODEL}\nopenai, streamed:\n{expected}\n/query:\n{expected}\n40 tokens, first after " in out, out
