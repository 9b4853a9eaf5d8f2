"""apps.serve: the char GPT of apps.train behind SmolCluster's API, an OpenAI-compatible /v1 and a web
page, split into pipeline stages with a KV cache per stage and micro-batched continuous batching,
generating past the model's context (`python -m apps.serve`, `pycomm-serve`; README.md beside this).

Files: __main__ (arguments, launch), model_source (what is served), stage + kv_cache (a stage's
cached incremental forward), sampling, stop_strings, stage_messages (stage-to-stage messages), scheduler
(slots, queue, micro-batches, the context window), engine (the pipeline loops), metrics; on rank 0's
HTTP side: request_checks (every field's range), chat_template, chat_sessions, smolcluster_routes,
openai_routes, http_errors + body_limit (one error shape per API), access (the API key, the Host
check), api (the Service and the app), connection_limits + log_limit (bounds on connections, one log
line per kind of message), http_server (uvicorn, stopping), static/ (the page)."""
