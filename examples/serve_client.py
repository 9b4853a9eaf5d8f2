"""Talk to a running `python -m apps.serve` (apps/serve/README.md) as a client program would: through
the official `openai` package (its OpenAI-compatible /v1, streamed token by token) and through
SmolCluster's `POST /query` (one JSON answer). Both ask for the greedy answer to the same chat, so both
print the same text.

    python -m apps.serve --nproc 2 &                 # 2 pipeline stages; a random GPT, or --checkpoint runs/<GPT run>
    python examples/serve_client.py                  # waits for the server, then asks it
    python examples/serve_client.py --url http://127.0.0.1:8080 --prompt "Who art thou?" --max-tokens 100

Needs only `pip install openai httpx` (no torch): the client may run on another machine. Each reply
of a random GPT is gibberish; that of a trained one (apps/serve/README.md trains one in minutes) is
Shakespeare-like."""

import argparse
import time

import httpx
import openai

parser = argparse.ArgumentParser(description="A client of python -m apps.serve")
parser.add_argument("--url", default="http://127.0.0.1:8080", help="where the server listens")
parser.add_argument("--prompt", default="Who art thou?")
parser.add_argument("--max-tokens", type=int, default=60)
parser.add_argument("--wait", type=float, default=120.0, help="seconds to wait for the server to come up")
args = parser.parse_args()

deadline = time.monotonic() + args.wait  # the ranks load torch and the model first
while True:
    try:
        if httpx.get(f"{args.url}/health", timeout=5).status_code == 200:
            break
    except httpx.TransportError:
        pass
    if time.monotonic() > deadline:
        raise SystemExit(f"no server answers at {args.url}/health after {args.wait:.0f} s")
    time.sleep(0.5)
messages = [{"role": "user", "content": args.prompt}]

# OpenAI's API: the model's id from /v1/models, then a streamed chat completion (temperature 0: greedy)
client = openai.OpenAI(base_url=f"{args.url}/v1", api_key="unused")  # the server checks no key
model = client.models.list().data[0].id
print(f"model {model}\nopenai, streamed:")
stream = client.chat.completions.create(
    model=model, messages=messages, max_tokens=args.max_tokens, temperature=0, stream=True
)
for chunk in stream:
    if chunk.choices:
        print(chunk.choices[0].delta.content or "", end="", flush=True)
print()

# SmolCluster's API: the same chat, one JSON answer with timings
answer = httpx.post(
    f"{args.url}/query",
    json={"messages": messages, "max_tokens": args.max_tokens, "decoding_strategy": "greedy"},
    timeout=300,
).json()
if not answer["success"]:
    raise SystemExit(f"/query failed: {answer['error']}")
print(f"/query:\n{answer['generated_text']}")
print(
    f"{answer['num_tokens']} tokens, first after {answer['time_to_first_token_ms']:.0f} ms, "
    f"{answer['tokens_per_second']:.1f} tokens/s"
)
