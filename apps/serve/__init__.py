"""apps.serve: the char GPT of apps.train behind an HTTP API and a web page, split into pipeline
stages with a KV cache per stage and micro-batched continuous batching (`python -m apps.serve`).

Files: __main__ (arguments, launch), model_source (what is served), stage + kv_cache (a stage's
cached incremental forward), sampling, wire (stage-to-stage messages), scheduler (slots, queue,
micro-batches), engine (the pipeline loops), metrics, api (FastAPI), http_server (rank 0), static/ (page)."""
