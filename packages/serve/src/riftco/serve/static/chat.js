// The chat page: keeps the conversation, streams replies from
// /v1/chat/completions (server-sent events) and renders them as text only.
"use strict";

const $ = (id) => document.getElementById(id);
const history = [];
let modelId = null;
let controller = null;

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "message " + role;
  const label = document.createElement("span");
  label.className = "role";
  label.textContent = role;
  const body = document.createElement("span");
  body.textContent = text;
  div.append(label, body);
  $("log").append(div);
  div.scrollIntoView({ block: "end" });
  return body;
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

async function loadModel() {
  try {
    const r = await fetch("/v1/models", { headers: headers() });
    const body = await r.json();
    if (!r.ok) throw new Error(body.error ? body.error.message : r.statusText);
    if (!body.data.length) throw new Error("the model is still loading");
    modelId = body.data[0].id;
    $("model").textContent = modelId;
    $("status").textContent = "";
  } catch (e) {
    $("model").textContent = "unavailable";
    $("status").textContent = "Cannot list models: " + e.message + " (retrying)";
    setTimeout(loadModel, 2000);
  }
}

// Reads "data: ..." events from a streamed response body.
async function* events(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of block.split("\n")) {
        if (line.startsWith("data: ")) yield line.slice(6);
      }
    }
  }
}

function requestBody() {
  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  messages.push(...history);
  return {
    model: modelId,
    messages,
    stream: true,
    temperature: Number($("temperature").value),
    top_p: Number($("top-p").value),
    max_tokens: Number($("max-tokens").value),
    // The oldest turns are left out once the chat outgrows the model's context.
    truncation: "auto",
  };
}

async function send(text) {
  history.push({ role: "user", content: text });
  addMessage("user", text);
  const target = addMessage("assistant", "");
  let reply = "";
  controller = new AbortController();
  setBusy(true);
  $("status").textContent = "generating…";
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: headers(),
      body: JSON.stringify(requestBody()),
      signal: controller.signal,
    });
    if (!r.ok) {
      const body = await r.json().catch(() => ({}));
      throw new Error(body.error ? body.error.message : r.status + " " + r.statusText);
    }
    const dropped = Number(r.headers.get("X-Riftco-Dropped-Messages") || 0);
    const note = dropped
      ? "The " + dropped + " oldest message" + (dropped === 1 ? " was" : "s were") +
        " left out to fit the model's context. "
      : "";
    let finish = null;
    for await (const data of events(r)) {
      if (data === "[DONE]") break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message);
      const choice = chunk.choices[0];
      if (!choice) continue;
      if (choice.delta && choice.delta.content) {
        reply += choice.delta.content;
        target.textContent = reply;
        target.parentElement.scrollIntoView({ block: "end" });
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    }
    $("status").textContent = note + (finish === "length" ? "stopped at max tokens" : "");
  } catch (e) {
    if (e.name === "AbortError") {
      $("status").textContent = "stopped";
    } else {
      target.parentElement.classList.add("error");
      $("status").textContent = "Error: " + e.message;
    }
  } finally {
    history.push({ role: "assistant", content: reply });
    controller = null;
    setBusy(false);
  }
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("prompt").value;
  if (!text.trim() || controller) return;
  $("prompt").value = "";
  send(text);
});
$("prompt").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});
$("stop").addEventListener("click", () => controller && controller.abort());
$("clear").addEventListener("click", () => {
  if (controller) controller.abort();
  history.length = 0;
  $("log").replaceChildren();
  $("status").textContent = "";
});
$("api-key").addEventListener("change", loadModel);
loadModel();
