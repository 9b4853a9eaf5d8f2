// The apps.serve page: a chat view over POST /chat (Server-Sent Events read with fetch), the session's
// turns kept by the server (session_id; GET /memory/history restores them, POST /memory/clear forgets),
// each request's statistics, and the pipeline live from GET /metrics twice a second: tokens/s over
// the last minute as a chart, and per stage its busy fraction and micro-batches. A server started with
// an API key answers the page's requests only with it: the page asks for it once and keeps it in this
// tab (sessionStorage), sending it as OpenAI's clients do. No dependencies.
"use strict";

const $ = (id) => document.getElementById(id);
const DEFAULT_PROMPT = "ROMEO:";
const DEFAULT_MAX_TOKENS = 200;
let controller = null;
let config = null;

function newSessionId() {
  return "page-" + Date.now().toString(36) + "-" + Math.random().toString(36).slice(2, 10);
}
let session = localStorage.getItem("apps.serve.session") || newSessionId();
localStorage.setItem("apps.serve.session", session);

const KEY_STORE = "apps.serve.key";

class KeyRequired extends Error {}

// fetch with the server's key, when one was given; a 401 shows the key field and throws
async function call(url, options = {}) {
  const key = sessionStorage.getItem(KEY_STORE);
  const headers = {...(options.headers || {}), ...(key ? {Authorization: "Bearer " + key} : {})};
  const resp = await fetch(url, {...options, headers});
  if (resp.status === 401) {
    $("key-row").hidden = false;
    throw new KeyRequired(key ? "the server refused this API key: enter its key above"
                              : "this server requires its API key: enter it above");
  }
  return resp;
}

function useKey() {
  sessionStorage.setItem(KEY_STORE, $("api-key").value.trim());
  $("api-key").value = "";
  $("key-row").hidden = true;
  $("error").textContent = "";
  start();
}

function number(id, parse) {
  const text = $(id).value.trim();
  return text === "" ? null : parse(text);
}

function setStats(s) {
  $("stat-status").textContent = s.status;
  if ("num_tokens" in s) $("stat-tokens").textContent = s.num_tokens;
  if ("time_to_first_token_ms" in s) $("stat-ttft").textContent = s.time_to_first_token_ms.toFixed(1) + " ms";
  if ("tokens_per_second" in s) $("stat-tps").textContent = s.tokens_per_second.toFixed(1);
  if ("total_time_ms" in s) $("stat-total").textContent = s.total_time_ms.toFixed(1) + " ms";
  if ("finish_reason" in s) $("stat-finish").textContent = s.finish_reason;
  if ("context_restarts" in s) $("stat-restarts").textContent = s.context_restarts;
}

function addTurn(role, text) {
  const turn = document.createElement("div");
  turn.className = "turn " + role;
  const label = document.createElement("span");
  label.className = "role";
  label.textContent = role;
  const body = document.createElement("span");
  body.className = "text";
  body.textContent = text;
  turn.append(label, body);
  $("conversation").append(turn);
  $("conversation").scrollTop = $("conversation").scrollHeight;
  return body;
}

function showSession() {
  $("session").textContent = $("memory").checked ? `(session ${session}: the server keeps its turns)` :
    "(each message on its own: no session)";
}

async function restoreConversation() {
  $("conversation").innerHTML = "";
  if (!$("memory").checked) return;
  const r = await call("/memory/history?" + new URLSearchParams({session_id: session}));
  if (!r.ok) return;
  for (const m of (await r.json()).messages) addTurn(m.role, m.content);
}

function requestBody(text) {
  const body = {text, max_tokens: number("max_tokens", parseInt), temperature: number("temperature", parseFloat),
                top_k: number("top_k", parseInt), top_p: number("top_p", parseFloat), seed: number("seed", parseInt),
                decoding_strategy: $("strategy").value || null};
  if ($("memory").checked) body.session_id = session;
  Object.keys(body).forEach((k) => body[k] === null && delete body[k]);
  return body;
}

async function* sseEvents(resp) {
  const reader = resp.body.getReader();
  const utf8 = new TextDecoder();
  let buffered = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buffered += utf8.decode(value, {stream: true});
    let end;
    while ((end = buffered.indexOf("\n\n")) >= 0) {
      const block = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5)).join("\n");
      if (data) yield JSON.parse(data);
    }
  }
}

async function send() {
  const text = $("prompt").value;
  if (!text) { $("error").textContent = "error: the message is empty"; return; }
  const body = requestBody(text);
  const previous = $("answer");
  if (previous) previous.removeAttribute("id");
  addTurn("user", text);
  const answer = addTurn("assistant", "");
  answer.id = "answer";
  $("prompt").value = "";
  $("error").textContent = "";
  for (const k of ["stat-tokens", "stat-ttft", "stat-tps", "stat-total", "stat-finish", "stat-restarts"]) $(k).textContent = "-";
  setStats({status: "waiting"});
  $("send").disabled = true;
  $("stop").disabled = false;
  controller = new AbortController();
  let tokens = 0;
  try {
    const resp = await call("/chat", {method: "POST", headers: {"Content-Type": "application/json"},
                                       body: JSON.stringify(body), signal: controller.signal});
    if (!resp.ok) {
      const err = await resp.json().catch(() => ({error: resp.statusText}));
      throw new Error(err.error || resp.statusText);
    }
    for await (const event of sseEvents(resp)) {
      if (event.error) throw new Error(event.error);
      if (!event.done) {
        answer.textContent += event.token;
        tokens += 1;
        setStats({status: "streaming", num_tokens: tokens});
        $("conversation").scrollTop = $("conversation").scrollHeight;
      } else {
        setStats({status: "done", ...event});
      }
    }
  } catch (e) {
    if (e.name === "AbortError") setStats({status: "stopped"});
    else { $("error").textContent = "error: " + e.message; setStats({status: "error"}); }
  } finally {
    $("send").disabled = false;
    $("stop").disabled = true;
    controller = null;
  }
}

async function newChat() {
  if ($("memory").checked) {
    await call("/memory/clear", {method: "POST", headers: {"Content-Type": "application/json"},
                                  body: JSON.stringify({session_ids: [session]})});
  }
  session = newSessionId();
  localStorage.setItem("apps.serve.session", session);
  $("conversation").innerHTML = "";
  showSession();
}

function polyline(svg, values, top) {
  const w = svg.viewBox.baseVal.width, h = svg.viewBox.baseVal.height;
  const step = values.length > 1 ? w / (values.length - 1) : w;
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(h - 2 - (h - 4) * v / (top || 1)).toFixed(1)}`);
  svg.querySelector("polyline").setAttribute("points", points.join(" "));
}

function sparkline(values) {
  const w = 120, h = 18;
  const step = values.length > 1 ? w / (values.length - 1) : w;
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(h - 1 - (h - 2) * v).toFixed(1)}`).join(" ");
  return `<svg class="spark" width="${w}" height="${h}"><polyline points="${points}"></polyline></svg>`;
}

async function pollMetrics() {
  try {
    const m = await (await call("/metrics")).json();
    $("server").textContent = `queue ${m.queue_depth}, active ${m.active}/${m.slots}, micro-batches in flight ` +
      `${m.microbatches_in_flight}, ${m.tokens_per_second.toFixed(1)} tokens/s, context restarts ${m.context_restarts}`;
    const history = m.tokens_per_second_history;
    const peak = Math.max(1, ...history);
    $("tps-peak").textContent = Math.max(...history);
    polyline($("tps-chart"), history, peak);
    const rows = m.stages.map((s) => {
      const pct = Math.min(100, Math.max(0, s.busy_fraction * 100));
      return `<tr class="stage"><td>${s.stage}</td><td>${s.rank}</td><td>${s.layers[0]}..${s.layers[1] - 1}</td>` +
        `<td>${pct.toFixed(0)}%</td><td><div class="bar"><div style="width:${pct}%"></div></div></td>` +
        `<td>${sparkline(s.busy_fraction_history)}</td>` +
        `<td>${s.mean_latency_ms.toFixed(2)} ms</td><td>${s.microbatches}</td></tr>`;
    });
    document.querySelector("#stages tbody").innerHTML = rows.join("");
  } catch (e) { /* the server may be restarting: try again next time */ }
}

async function loadConfig() {
  config = await (await call("/config")).json();
  $("model").textContent = `${config.random_init ? "RANDOMLY INITIALISED GPT (noise)" : config.source}: ` +
    `${config.parameters.toLocaleString()} parameters, ${config.n_layer} blocks in ${config.stages.length} stage(s), ` +
    `context ${config.block_size} (longer answers restart from their last ${config.window_keep} tokens)`;
  if (config.random_init) $("model").className = "random";
  // defaults that always fit this model: the answer's length within the server's limit, a prompt in its vocabulary
  $("max_tokens").max = config.max_tokens_limit;
  $("max_tokens").value = Math.min(DEFAULT_MAX_TOKENS, config.max_tokens_limit);
  const fits = [...DEFAULT_PROMPT].every((c) => config.vocab.includes(c));
  $("prompt").value = fits ? DEFAULT_PROMPT : config.vocab.replace(/\s/g, "").slice(0, 4);
}

async function start() {
  try {
    await loadConfig();
    await restoreConversation();
  } catch (e) {
    if (!(e instanceof KeyRequired)) throw e;
    $("model").textContent = e.message;
    $("error").textContent = "error: " + e.message;
  }
}

$("send").addEventListener("click", send);
$("use-key").addEventListener("click", useKey);
$("api-key").addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); useKey(); } });
$("stop").addEventListener("click", () => controller && controller.abort());
$("new-chat").addEventListener("click", newChat);
$("memory").addEventListener("change", () => { showSession(); restoreConversation(); });
$("prompt").addEventListener("keydown", (e) => {
  if ((e.metaKey || e.ctrlKey) && e.key === "Enter") { e.preventDefault(); send(); }
});
showSession();
start();
pollMetrics();
setInterval(pollMetrics, 500);
