#!/usr/bin/env node
// An OpenAI-compatible server on llama.cpp (node-llama-cpp's prebuilt CPU
// build) that keeps KV in slots and reuses prompt prefixes as llama-server
// does: the client of `kvtier-bench multiround --endpoint` runs against it
// here, and against vLLM, SGLang or llama-server on a GPU machine unchanged.
//
//   openai_server.mjs --model M.gguf [--port 8080] [--host 127.0.0.1]
//                     [--policy keep|recompute|state-files] [--slots 4]
//                     [--ctx 8192] [--threads 2] [--state-dir DIR]
//                     [--name NAME] [--no-mmap] [--max-body BYTES]
//
// Endpoints: POST /v1/chat/completions and /v1/completions (streamed as
// server-sent events when "stream" is true, with a usage chunk when
// "stream_options": {"include_usage": true}), GET /v1/models, GET /health.
// Decoding is greedy (temperature 0 whatever the request says): one prompt
// gives the same tokens every time, under every policy that keeps or
// restores its KV. A chat prompt is its messages as "<role>\ncontent\n"
// each, then "<assistant>\n".
//
// Slots (context sequences, --ctx tokens each) hold KV between requests. A
// request takes the slot whose tokens share the longest prefix with its
// prompt when that prefix is over half the prompt (llama-server's
// --slot-prompt-similarity 0.5): the slot's tokens past the shared prefix
// are dropped and only the rest of the prompt is evaluated. Any other
// request takes the least recently used slot, emptied, and evaluates its
// whole prompt, as in a fresh slot: a prompt is then evaluated in the same
// batches under every policy, so a kept, swapped or restored KV gives the
// same answer as memory does (a shorter shared prefix, such as the system
// prompt alone, is not reused). usage.prompt_tokens_details.cached_tokens says how
// many prompt tokens were not evaluated. The policies are the systems
// compared on a real engine:
//   keep         one slot per user (--slots at least the users): every
//                user's KV stays in the engine's KV buffer, wherever that
//                buffer lives (memory, kvtier, the kernel's swap);
//   recompute    as many slots as the memory budget holds: a user whose slot
//                went to another evaluates its whole prompt again;
//   state-files  as recompute, but each slot's state is written to
//                --state-dir after each request (after its response, as
//                llama-server --slot-save-path and LMCache's disk backend
//                do), and a request that shares over half its prompt with a
//                saved state, and more than with any slot, loads it first.
// Requests run one at a time, in arrival order. On SIGTERM or SIGINT the
// server prints one "server:" line of counters to stderr and exits 0.
// Exit status: 2 on a bad argument, 1 on an engine error.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";

import { parseCommandLine } from "./cli.mjs";

const { args, number, usage } = parseCommandLine("openai_server", {
  model: { type: "string" },
  port: { type: "string", default: "8080" },
  host: { type: "string", default: "127.0.0.1" },
  policy: { type: "string", default: "keep" },
  slots: { type: "string", default: "4" },
  ctx: { type: "string", default: "8192" },
  threads: { type: "string", default: "2" },
  "state-dir": { type: "string" },
  name: { type: "string" },
  "no-mmap": { type: "boolean", default: false },
  "max-body": { type: "string", default: "16777216" },
});
const port = number("port", 0);
const slotCount = number("slots", 1);
const ctx = number("ctx", 64);
const threads = number("threads", 1);
const maxBody = number("max-body", 1024);
const policy = args.policy;
if (!["keep", "recompute", "state-files"].includes(policy)) {
  usage(`--policy ${policy}: use keep, recompute or state-files`);
}
if ((policy === "state-files") !== (args["state-dir"] !== undefined)) {
  usage("--state-dir goes with --policy state-files, and only with it");
}
const modelName = args.name ?? path.basename(args.model).replace(/\.gguf$/, "");
const stateDir = args["state-dir"];

// An error the client caused: its HTTP status and OpenAI's error object.
class RequestError extends Error {
  constructor(status, message, type = "invalid_request_error") {
    super(message);
    this.status = status;
    this.type = type;
  }
}

function commonPrefix(a, b) {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) ++i;
  return i;
}

function messageText(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((part) => {
      if (part?.type === "text" && typeof part.text === "string") return part.text;
      throw new RequestError(400, "a message's content parts must be {\"type\": \"text\", \"text\": ...}");
    }).join("");
  }
  throw new RequestError(400, "a message's content must be a string or a list of text parts");
}

// The prompt text of a request body, by endpoint.
function promptOf(kind, body) {
  if (kind === "chat") {
    if (!Array.isArray(body.messages) || body.messages.length === 0) {
      throw new RequestError(400, "\"messages\" must be a non-empty list");
    }
    let text = "";
    for (const m of body.messages) {
      if (typeof m?.role !== "string") throw new RequestError(400, "every message needs a \"role\" string");
      text += `<${m.role}>\n${messageText(m.content)}\n`;
    }
    return text + "<assistant>\n";
  }
  if (typeof body.prompt !== "string") throw new RequestError(400, "\"prompt\" must be a string");
  return body.prompt;
}

async function main() {
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath: args.model, useMmap: !args["no-mmap"] });
  const context = await model.createContext({
    contextSize: ctx, sequences: slotCount, threads, batchSize: Math.min(512, ctx),
  });
  if (stateDir !== undefined) fs.mkdirSync(stateDir, { recursive: true });
  // A slot: its sequence, when it last served, and which saved state (if
  // any) its tokens continue.
  const slots = [];
  for (let i = 0; i < slotCount; ++i) slots.push({ seq: context.getSequence(), used: 0, state: -1 });
  // Saved states (state-files): file path and the tokens it holds.
  const states = [];
  const counters = { requests: 0, failed: 0, prompt: 0, cached: 0, loads: 0, loadBytes: 0, loadMs: 0,
                     saves: 0, saveBytes: 0, saveMs: 0, saveErrors: 0 };
  let clock = 0;

  // Picks a slot for `prompt` and brings its KV to the longest prefix it can
  // have: the slot's own, or a saved state's. Returns the slot and the
  // number of prompt tokens already in it.
  async function takeSlot(prompt) {
    const similar = (shared) => shared * 2 > prompt.length;
    let best = null, bestShared = 0;
    for (const s of slots) {
      const shared = commonPrefix(s.seq.contextTokens, prompt);
      if (shared > bestShared) { best = s; bestShared = shared; }
    }
    if (best === null || !similar(bestShared)) {
      // Another conversation: the least recently used slot, emptied, so the
      // prompt is evaluated whole as it would be in a fresh slot (the same
      // batches under every policy, hence the same answer).
      best = slots.reduce((a, b) => (b.used < a.used ? b : a));
      bestShared = 0;
      best.state = -1;
    }
    best.used = ++clock;
    if (policy === "state-files") {
      let file = -1, fileShared = bestShared;
      states.forEach((st, i) => {
        const shared = commonPrefix(st.tokens, prompt);
        if (similar(shared) && shared > fileShared) { file = i; fileShared = shared; }
      });
      if (file >= 0) {
        const begin = performance.now();
        await best.seq.clearHistory();
        await best.seq.loadStateFromFile(states[file].path, { acceptRisk: true });
        counters.loads += 1;
        counters.loadBytes += fs.statSync(states[file].path).size;
        counters.loadMs += performance.now() - begin;
        best.state = file;
        bestShared = commonPrefix(best.seq.contextTokens, prompt);
      }
    }
    // At least one token is evaluated: its logits give the first answer token.
    const keep = Math.min(bestShared, prompt.length - 1);
    // A prompt that continues under half of the slot's saved conversation is
    // another conversation: it gets a file of its own, not that one.
    if (best.state >= 0 && keep * 2 <= states[best.state].tokens.length) best.state = -1;
    const held = best.seq.contextTokens.length;
    if (keep === 0 && held > 0) {
      await best.seq.clearHistory();
    } else if (keep < held) {
      await best.seq.eraseContextTokenRanges([{ start: keep, end: held }]);
    }
    return { slot: best, cached: keep };
  }

  async function saveSlot(slot) {
    if (slot.state < 0) {
      slot.state = states.length;
      states.push({ path: path.join(stateDir, `state-${slot.state}.bin`), tokens: [] });
    }
    const st = states[slot.state];
    const begin = performance.now();
    const { fileSize } = await slot.seq.saveStateToFile(st.path);
    st.tokens = slot.seq.contextTokens.slice();
    counters.saves += 1;
    counters.saveBytes += fileSize;
    counters.saveMs += performance.now() - begin;
  }

  // Serves one completion request; `send` gets each piece of answer text as
  // it is generated (streaming) and the response is finished by the caller.
  async function complete(kind, body, send) {
    if (body.model !== undefined && body.model !== modelName) {
      throw new RequestError(404, `the model '${body.model}' does not exist; this server has '${modelName}'`,
                             "model_not_found");
    }
    const maxTokens = body.max_tokens ?? body.max_completion_tokens ?? 16;
    if (!Number.isInteger(maxTokens) || maxTokens < 1) {
      throw new RequestError(400, "\"max_tokens\" must be a whole number >= 1");
    }
    const prompt = model.tokenize(promptOf(kind, body));
    if (prompt.length === 0) throw new RequestError(400, "the prompt is empty");
    const room = slots[0].seq.contextSize;
    if (prompt.length + maxTokens > room) {
      throw new RequestError(400, `the prompt's ${prompt.length} tokens and max_tokens ${maxTokens} ` +
                                  `exceed a slot's context of ${room} tokens`);
    }
    const { slot, cached } = await takeSlot(prompt);
    const out = [];
    let text = "";  // what was sent
    let finish = "length";
    // Sends the decoded answer's new text; a trailing U+FFFD (a character
    // whose bytes have not all come yet) is held back until it resolves, so
    // what is sent only ever grows.
    const flush = (last) => {
      let all = model.detokenize(out);
      if (!last) all = all.replace(/\uFFFD+$/, "");
      if (all.length <= text.length || !all.startsWith(text)) return true;
      const ok = send(all.slice(text.length));
      text = all;
      return ok;
    };
    for await (const token of slot.seq.evaluate(prompt.slice(cached), { temperature: 0 })) {
      if (model.isEogToken(token)) { finish = "stop"; break; }
      out.push(token);
      if (!flush(false)) { finish = "abort"; break; }
      if (out.length >= maxTokens) break;
    }
    if (finish !== "abort" && !flush(true)) finish = "abort";
    counters.requests += 1;
    counters.prompt += prompt.length;
    counters.cached += cached;
    return { slot, text, finish, usage: {
      prompt_tokens: prompt.length, completion_tokens: out.length,
      total_tokens: prompt.length + out.length, prompt_tokens_details: { cached_tokens: cached },
    } };
  }

  let queue = Promise.resolve();
  let serial = 0;

  async function handleCompletion(kind, req, res, raw) {
    let body;
    try {
      body = JSON.parse(raw);
    } catch (e) {
      throw new RequestError(400, `the body is not JSON: ${e.message}`);
    }
    if (body === null || typeof body !== "object" || Array.isArray(body)) {
      throw new RequestError(400, "the body must be a JSON object");
    }
    const id = `${kind === "chat" ? "chatcmpl" : "cmpl"}-${++serial}`;
    const created = Math.floor(Date.now() / 1000);
    const object = kind === "chat" ? "chat.completion" : "text_completion";
    const choice = (piece, finish) => (kind === "chat"
      ? { index: 0, delta: piece === null ? {} : { content: piece }, finish_reason: finish }
      : { index: 0, text: piece ?? "", finish_reason: finish });
    const stream = body.stream === true;
    const withUsage = body.stream_options?.include_usage === true;
    const closed = () => res.gone || res.destroyed;
    if (closed()) return;  // the client left while the request waited its turn
    const event = (data) => res.write(`data: ${JSON.stringify(data)}\n\n`);
    const chunk = (choices, extra = {}) =>
      event({ id, object: kind === "chat" ? "chat.completion.chunk" : "text_completion", created,
              model: modelName, choices, ...extra });
    const send = (piece) => {
      if (closed()) return false;
      if (stream) {
        if (!res.headersSent) {
          res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
        }
        chunk([choice(piece, null)]);
      }
      return true;
    };
    const result = await complete(kind, body, send);
    if (!closed()) {
      if (stream) {
        if (!res.headersSent) res.writeHead(200, { "Content-Type": "text/event-stream" });
        chunk([choice(null, result.finish)]);
        if (withUsage) chunk([], { usage: result.usage });
        res.end("data: [DONE]\n\n");
      } else {
        const message = kind === "chat" ? { message: { role: "assistant", content: result.text } }
                                        : { text: result.text };
        reply(res, 200, { id, object, created, model: modelName,
                          choices: [{ index: 0, ...message, finish_reason: result.finish }],
                          usage: result.usage });
      }
    }
    if (policy === "state-files") {
      // After the response: a failed save is this server's problem, not the
      // request's (the state is simply not there to load next time).
      try {
        await saveSlot(result.slot);
      } catch (e) {
        counters.saveErrors += 1;
        process.stderr.write(`openai_server: saving a slot's state: ${e?.message ?? e}\n`);
      }
    }
  }

  function reply(res, status, data) {
    const text = JSON.stringify(data);
    res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(text) });
    res.end(text);
  }

  function fail(res, e) {
    const status = e instanceof RequestError ? e.status : 500;
    process.stderr.write(`openai_server: ${res.req.method} ${res.req.url}: ` +
                         `${e instanceof RequestError ? `${status} ${e.message}` : e?.stack ?? e}\n`);
    counters.failed += 1;
    if (res.headersSent) {
      // Mid-stream: an error event, then the end; the client sees no [DONE].
      res.end(`data: ${JSON.stringify({ error: { message: e.message, type: e.type ?? "server_error" } })}\n\n`);
      return;
    }
    reply(res, status, { error: { message: e.message, type: e.type ?? "server_error", code: status } });
  }

  const server = http.createServer((req, res) => {
    res.on("close", () => { res.gone = !res.writableFinished; });
    const url = new URL(req.url, "http://server");
    const route = `${req.method} ${url.pathname.replace(/\/+$/, "")}`;
    if (route === "GET /health") return reply(res, 200, { status: "ok" });
    if (route === "GET /v1/models") {
      return reply(res, 200, { object: "list", data: [{ id: modelName, object: "model", created: 0,
                                                        owned_by: "llama.cpp" }] });
    }
    const kind = { "POST /v1/chat/completions": "chat", "POST /v1/completions": "text" }[route];
    if (kind === undefined) {
      return fail(res, new RequestError(404, `no route ${req.method} ${url.pathname}`, "not_found"));
    }
    const parts = [];
    let size = 0;
    req.on("data", (part) => {
      size += part.length;
      if (size <= maxBody) parts.push(part);
    });
    req.on("end", () => {
      if (size > maxBody) {
        return fail(res, new RequestError(413, `the body's ${size} bytes exceed --max-body ${maxBody}`));
      }
      const raw = Buffer.concat(parts).toString("utf8");
      queue = queue.then(() => handleCompletion(kind, req, res, raw)).catch((e) => fail(res, e));
    });
  });
  const stop = () => {
    process.stderr.write(
      `server: policy ${policy}, ${slotCount} slots of ${slots[0].seq.contextSize} tokens; ` +
      `${counters.requests} requests (${counters.failed} failed), ${counters.prompt} prompt tokens, ` +
      `${counters.cached} reused; ${counters.loads} state loads (${counters.loadBytes} bytes, ` +
      `${counters.loadMs.toFixed(1)} ms), ${counters.saves} saves (${counters.saveBytes} bytes, ` +
      `${counters.saveMs.toFixed(1)} ms, ${counters.saveErrors} failed)\n`);
    server.close();
    queue.finally(async () => {
      await context.dispose();
      await model.dispose();
      await llama.dispose();
      process.exit(0);
    });
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  server.listen(port, args.host, () => {
    process.stderr.write(`openai_server: serving ${modelName} on http://${args.host}:${server.address().port}/v1 ` +
                         `(policy ${policy}, ${slotCount} slots)\n`);
  });
}

main().catch((e) => {
  process.stderr.write(`openai_server: ${e?.message ?? e}\n`);
  process.exit(1);
});
