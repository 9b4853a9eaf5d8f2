// The apps.serve page: streams POST /chat (Server-Sent Events over fetch), shows the final
// statistics, and polls GET /metrics for each stage's activity. No dependencies.
"use strict";

const $ = (id) => document.getElementById(id);
let controller = null;

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
}

async function generate() {
  const body = {prompt: $("prompt").value, max_tokens: number("max_tokens", parseInt),
                temperature: number("temperature", parseFloat), top_k: number("top_k", parseInt),
                seed: number("seed", parseInt)};
  Object.keys(body).forEach((k) => body[k] === null && delete body[k]);
  $("output").innerHTML = "";
  const prompt = document.createElement("span");
  prompt.className = "prompt";
  prompt.textContent = body.prompt;
  const answer = document.createElement("span");
  answer.id = "answer";
  $("output").append(prompt, answer);
  $("error").textContent = "";
  setStats({status: "waiting"});
  $("send").disabled = true;
  $("stop").disabled = false;
  controller = new AbortController();
  let tokens = 0;
  try {
    const resp = await fetch("/chat", {method: "POST", headers: {"Content-Type": "application/json"},
                                       body: JSON.stringify(body), signal: controller.signal});
    if (!resp.ok) {
      const err = await resp.json().catch(() => ({error: resp.statusText}));
      throw new Error(err.error || resp.statusText);
    }
    const reader = resp.body.getReader();
    const utf8 = new TextDecoder();
    let buffered = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffered += utf8.decode(value, {stream: true});
      let end;
      while ((end = buffered.indexOf("\n\n")) >= 0) {
        const block = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5)).join("\n");
        if (!data) continue;
        const event = JSON.parse(data);
        if (event.error) throw new Error(event.error);
        if (!event.done) {
          answer.textContent += event.token;
          tokens += 1;
          setStats({status: "streaming", num_tokens: tokens});
        } else {
          setStats({status: "done", ...event});
        }
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

let previous = null;
async function pollMetrics() {
  try {
    const m = await (await fetch("/metrics")).json();
    $("server").textContent = `queue ${m.queue_depth}, active ${m.active}/${m.slots}, in flight ` +
      `${m.microbatches_in_flight}, ${m.tokens_per_second.toFixed(1)} tokens/s`;
    const rows = m.stages.map((s, i) => {
      let busy = 0;
      if (previous) busy = (s.busy_s - previous.stages[i].busy_s) / Math.max(1e-3, m.uptime_s - previous.uptime_s);
      const pct = Math.min(100, Math.max(0, busy * 100));
      return `<tr class="stage"><td>${s.stage}</td><td>${s.rank}</td><td>${s.layers[0]}..${s.layers[1] - 1}</td>` +
        `<td>${pct.toFixed(0)}%</td><td><div class="bar"><div style="width:${pct}%"></div></div></td>` +
        `<td>${s.mean_latency_ms.toFixed(2)} ms</td><td>${s.microbatches}</td></tr>`;
    });
    document.querySelector("#stages tbody").innerHTML = rows.join("");
    previous = m;
  } catch (e) { /* the server may be restarting: try again next time */ }
}

async function loadConfig() {
  const c = await (await fetch("/config")).json();
  $("model").textContent = `${c.random_init ? "RANDOMLY INITIALISED GPT (noise)" : c.source}: ` +
    `${c.parameters.toLocaleString()} parameters, ${c.n_layer} blocks in ${c.stages.length} stage(s), ` +
    `context ${c.block_size}`;
  if (c.random_init) $("model").className = "random";
  $("max_tokens").max = c.max_tokens_limit;
}

$("send").addEventListener("click", generate);
$("stop").addEventListener("click", () => controller && controller.abort());
loadConfig();
pollMetrics();
setInterval(pollMetrics, 500);
