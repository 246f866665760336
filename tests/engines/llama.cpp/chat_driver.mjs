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
//                   [--recompute | --state-files DIR [--slots N]] [--sequences N]
//
// --prompt-tokens is the first turn's prompt, --next-prompt-tokens each later
// turn's (default: the same). --recompute makes every later turn drop its
// session's KV and evaluate the whole history again with the new prompt, as
// an engine that evicted the session must: its TTFT is the recompute cost
// that a KV cache kept (in memory or on SSD) saves.
//
// --state-files DIR keeps only --slots sessions' KV in the context (N
// sequences, default 1), as llama-server --slot-save-path or LMCache's disk
// backend do: a session takes a free slot, else the least recently used one;
// after each turn (after its tokens, outside its TTFT) its state is written
// to DIR/session-S.state (sequence.saveStateToFile); a session that comes
// back to a slot another session used meanwhile clears that slot and loads
// its state from its file (sequence.loadStateFromFile) inside its TTFT, then
// evaluates its new prompt as usual. Each turn's stderr line then adds
// "load X ms (B bytes)" when it loaded and "save X ms (B bytes)", and a
// "state files:" line follows the summary.
//
// --sequences N sizes the context for N sequences (default: one per session,
// or --slots), of which the sessions use the first ones, as a server sizes
// its KV buffer for every slot it may serve.
//
// Each turn's stderr line gives its TTFT and its decode time a token (from
// the first token to the last); the summary gives their means.
//
// Turns go round robin (session 0's first turn, session 1's first, ...), as
// a server's users take turns, so each session's KV sits idle while the
// others run. Exit status: 0, or 2 on a bad argument, 1 on an engine error.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import fs from "node:fs";
import path from "node:path";

import { parseCommandLine } from "./cli.mjs";

const { args, number, usage } = parseCommandLine("chat_driver", {
  model: { type: "string" },
  sessions: { type: "string", default: "4" },
  turns: { type: "string", default: "3" },
  ctx: { type: "string", default: "2048" },
  "prompt-tokens": { type: "string", default: "200" },
  "next-prompt-tokens": { type: "string" },
  recompute: { type: "boolean", default: false },
  "state-files": { type: "string" },
  slots: { type: "string", default: "1" },
  sequences: { type: "string" },
  "answer-tokens": { type: "string", default: "16" },
  threads: { type: "string", default: "2" },
  seed: { type: "string", default: "1" },
  "no-mmap": { type: "boolean", default: false },
});
const sessions = number("sessions", 1);
const turns = number("turns", 1);
const ctx = number("ctx", 64);
const promptTokens = number("prompt-tokens", 1);
if (args["next-prompt-tokens"] === undefined) args["next-prompt-tokens"] = args["prompt-tokens"];
const nextPromptTokens = number("next-prompt-tokens", 1);
const answerTokens = number("answer-tokens", 1);
const threads = number("threads", 1);
const seed = number("seed", 0);
const stateDir = args["state-files"];
const slots = Math.min(number("slots", 1), sessions);
const used = stateDir === undefined ? sessions : slots;
const sequences = args.sequences === undefined ? used : number("sequences", used);
if (stateDir !== undefined && args.recompute) usage("--state-files and --recompute exclude each other");
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
    sequences,
    threads,
    batchSize: Math.min(512, ctx),
  });
  const seqs = [];
  for (let s = 0; s < used; ++s) seqs.push(context.getSequence());
  // --state-files: which session each slot (sequence) holds, when it last
  // ran, and where each session's KV is (a slot, or only its file).
  if (stateDir !== undefined) fs.mkdirSync(stateDir, { recursive: true });
  const slotOwner = seqs.map(() => -1);
  const slotUsed = seqs.map(() => 0);
  const sessionSlot = new Array(sessions).fill(-1);
  const statePath = (s) => path.join(stateDir, `session-${s}.state`);
  const files = { saves: 0, saveBytes: 0, saveMs: 0, loads: 0, loadBytes: 0, loadMs: 0 };
  let clock = 0;

  const ttfts = [];
  const decodes = [];  // ms a token after the first, per turn that made two or more
  let generated = 0;
  const start = performance.now();
  for (let t = 0; t < turns; ++t) {
    for (let s = 0; s < sessions; ++s) {
      const count = t === 0 ? promptTokens : nextPromptTokens;
      let prompt = model.tokenize(promptText(s, t, count));
      prompt = prompt.slice(0, count);
      const begin = performance.now();
      let seq = seqs[s];
      let note = "";
      if (stateDir !== undefined) {
        let slot = sessionSlot[s];
        if (slot < 0) {
          // A free slot, else the least recently used one (its session's
          // state is in its file already: every turn ends with a save).
          slot = slotOwner.indexOf(-1);
          if (slot < 0) slot = slotUsed.indexOf(Math.min(...slotUsed));
          const previous = slotOwner[slot];
          if (previous >= 0) sessionSlot[previous] = -1;
          slotOwner[slot] = s;
          sessionSlot[s] = slot;
          seq = seqs[slot];
          if (previous >= 0) await seq.clearHistory();
          if (t > 0) {
            const loadBegin = performance.now();
            await seq.loadStateFromFile(statePath(s), { acceptRisk: true });
            const ms = performance.now() - loadBegin;
            const bytes = fs.statSync(statePath(s)).size;
            files.loads += 1;
            files.loadBytes += bytes;
            files.loadMs += ms;
            note += `, load ${ms.toFixed(1)} ms (${bytes} bytes)`;
          }
        }
        slotUsed[slot] = ++clock;
        seq = seqs[slot];
      }
      if (t > 0 && args.recompute) {
        const kept = seq.contextTokens.slice();
        await seq.clearHistory();
        prompt = kept.concat(prompt);
      }
      let first = 0;
      let last = 0;
      const out = [];
      for await (const token of seq.evaluate(prompt, { temperature: 0 })) {
        last = performance.now() - begin;
        if (out.length === 0) first = last;
        out.push(token);
        if (out.length >= answerTokens) break;
      }
      ttfts.push(first);
      if (out.length > 1) {
        const decode = (last - first) / (out.length - 1);
        decodes.push(decode);
        note += `, decode ${decode.toFixed(2)} ms a token`;
      }
      generated += out.length;
      if (stateDir !== undefined) {
        // Off the timed path: after the turn's tokens, as a server saves a
        // slot after its response (counted in the whole run's time).
        const saveBegin = performance.now();
        const { fileSize } = await seq.saveStateToFile(statePath(s));
        const ms = performance.now() - saveBegin;
        files.saves += 1;
        files.saveBytes += fileSize;
        files.saveMs += ms;
        note += `, save ${ms.toFixed(1)} ms (${fileSize} bytes)`;
      }
      process.stdout.write(`session ${s} turn ${t}: ${out.join(" ")}\n`);
      process.stderr.write(`session ${s} turn ${t}: ttft ${first.toFixed(1)} ms, ` +
                           `context ${seq.contextTokens.length} tokens${note}\n`);
    }
  }
  const seconds = (performance.now() - start) / 1000;
  const meanOf = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const mean = meanOf(ttfts);
  const decodeNote = decodes.length > 0 ? `, mean decode ${meanOf(decodes).toFixed(2)} ms a token` : "";
  process.stderr.write(`summary: ${sessions} sessions x ${turns} turns, ${generated} tokens in ` +
                       `${seconds.toFixed(2)} s (${(generated / seconds).toFixed(1)} tokens/s), ` +
                       `mean ttft ${mean.toFixed(1)} ms${decodeNote}, KV context ` +
                       `${context.contextSize} tokens x ${sequences} sequences\n`);
  if (stateDir !== undefined) {
    process.stderr.write(`state files: ${slots} slots for ${sessions} sessions; ${files.saves} saves ` +
                         `(${files.saveBytes} bytes, ${files.saveMs.toFixed(1)} ms), ${files.loads} loads ` +
                         `(${files.loadBytes} bytes, ${files.loadMs.toFixed(1)} ms)\n`);
  }
  await context.dispose();
  await model.dispose();
  await llama.dispose();
}

main().catch((e) => {
  process.stderr.write(`chat_driver: ${e?.stack ?? e}\n`);
  process.exit(1);
});
