#!/usr/bin/env node
// A multi-session chat on llama.cpp (node-llama-cpp's prebuilt CPU build):
// several sessions, several turns each, every session keeping its KV cache
// between turns (one context sequence per session), greedy decoding. Prints
// each turn's tokens and time to first token, and a summary; the token lines
// are what a run with and a run without kvtier must share byte for byte.
//
//   chat_driver.mjs --model M.gguf [--sessions 4] [--turns 3] [--ctx 2048]
//                   [--prompt-tokens 200] [--next-prompt-tokens N]
//                   [--answer-tokens 16] [--threads 2] [--no-mmap] [--seed 1]
//                   [--recompute]
//
// --prompt-tokens is the first turn's prompt, --next-prompt-tokens each later
// turn's (default: the same). --recompute makes every later turn drop its
// session's KV and evaluate the whole history again with the new prompt, as
// an engine that evicted the session must: its TTFT is the recompute cost
// that a KV cache kept (in memory or on SSD) saves.
//
// Turns go round robin (session 0's first turn, session 1's first, ...), as
// a server's users take turns, so each session's KV sits idle while the
// others run. Exit status: 0, or 2 on a bad argument, 1 on an engine error.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { parseArgs } from "node:util";

function usage(message) {
  process.stderr.write(`chat_driver: ${message}\n`);
  process.exit(2);
}

let args;
try {
  args = parseArgs({
    options: {
      model: { type: "string" },
      sessions: { type: "string", default: "4" },
      turns: { type: "string", default: "3" },
      ctx: { type: "string", default: "2048" },
      "prompt-tokens": { type: "string", default: "200" },
      "next-prompt-tokens": { type: "string" },
      recompute: { type: "boolean", default: false },
      "answer-tokens": { type: "string", default: "16" },
      threads: { type: "string", default: "2" },
      seed: { type: "string", default: "1" },
      "no-mmap": { type: "boolean", default: false },
    },
    strict: true,
  }).values;
} catch (e) {
  usage(e.message);
}
if (!args.model) usage("--model is required (a GGUF file; random_gguf.py writes one)");
const number = (name, min) => {
  const v = Number(args[name]);
  if (!Number.isInteger(v) || v < min) usage(`--${name}=${args[name]}: expected a whole number >= ${min}`);
  return v;
};
const sessions = number("sessions", 1);
const turns = number("turns", 1);
const ctx = number("ctx", 64);
const promptTokens = number("prompt-tokens", 1);
if (args["next-prompt-tokens"] === undefined) args["next-prompt-tokens"] = args["prompt-tokens"];
const nextPromptTokens = number("next-prompt-tokens", 1);
const answerTokens = number("answer-tokens", 1);
const threads = number("threads", 1);
const seed = number("seed", 0);
const history = promptTokens + (turns - 1) * nextPromptTokens + turns * answerTokens;
if (history > ctx) {
  usage(`--prompt-tokens + (--turns - 1) x --next-prompt-tokens + --turns x --answer-tokens = ` +
        `${history} tokens do not fit --ctx ${ctx}`);
}

// A deterministic prompt of about `count` tokens for (session, turn).
function promptText(session, turn, count) {
  let state = (seed * 1000003 + session * 7919 + turn * 104729) >>> 0;
  const next = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state;
  };
  const letters = "abcdefghijklmnopqrstuvwxyz";
  const words = [];
  for (let i = 0; i < count; ++i) {
    const len = 2 + (next() % 5);
    let w = "";
    for (let j = 0; j < len; ++j) w += letters[next() % 26];
    words.push(w);
  }
  return words.join(" ");
}

async function main() {
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath: args.model, useMmap: !args["no-mmap"] });
  const context = await model.createContext({
    contextSize: ctx,
    sequences: sessions,
    threads,
    batchSize: Math.min(512, ctx),
  });
  const seqs = [];
  for (let s = 0; s < sessions; ++s) seqs.push(context.getSequence());

  const ttfts = [];
  let generated = 0;
  const start = performance.now();
  for (let t = 0; t < turns; ++t) {
    for (let s = 0; s < sessions; ++s) {
      const count = t === 0 ? promptTokens : nextPromptTokens;
      let prompt = model.tokenize(promptText(s, t, count));
      prompt = prompt.slice(0, count);
      const begin = performance.now();
      if (t > 0 && args.recompute) {
        const kept = seqs[s].contextTokens.slice();
        await seqs[s].clearHistory();
        prompt = kept.concat(prompt);
      }
      let first = 0;
      const out = [];
      for await (const token of seqs[s].evaluate(prompt, { temperature: 0 })) {
        if (out.length === 0) first = performance.now() - begin;
        out.push(token);
        if (out.length >= answerTokens) break;
      }
      ttfts.push(first);
      generated += out.length;
      process.stdout.write(`session ${s} turn ${t}: ${out.join(" ")}\n`);
      process.stderr.write(`session ${s} turn ${t}: ttft ${first.toFixed(1)} ms, ` +
                           `context ${seqs[s].contextTokens.length} tokens\n`);
    }
  }
  const seconds = (performance.now() - start) / 1000;
  const mean = ttfts.reduce((a, b) => a + b, 0) / ttfts.length;
  process.stderr.write(`summary: ${sessions} sessions x ${turns} turns, ${generated} tokens in ` +
                       `${seconds.toFixed(2)} s (${(generated / seconds).toFixed(1)} tokens/s), ` +
                       `mean ttft ${mean.toFixed(1)} ms, KV context ${context.contextSize} tokens x ` +
                       `${sessions} sequences\n`);
  await context.dispose();
  await model.dispose();
  await llama.dispose();
}

main().catch((e) => {
  process.stderr.write(`chat_driver: ${e?.stack ?? e}\n`);
  process.exit(1);
});
