// Command lines of the engine tests' programs (chat_driver.mjs,
// openai_server.mjs): node:util's parseArgs with every option a string or a
// switch, one line on stderr and exit status 2 for a bad one.
import fs from "node:fs";
import { parseArgs } from "node:util";

// Parses process.argv for `program` with `options` (parseArgs's form);
// requires --model, an existing file. Returns the values, number(name,
// min), which reads a whole-number option or exits, and usage(message).
export function parseCommandLine(program, options) {
  const usage = (message) => {
    process.stderr.write(`${program}: ${message}\n`);
    process.exit(2);
  };
  let args;
  try {
    args = parseArgs({ options, strict: true }).values;
  } catch (e) {
    usage(e.message);
  }
  const number = (name, min) => {
    const v = Number(args[name]);
    if (!Number.isInteger(v) || v < min) usage(`--${name}=${args[name]}: expected a whole number >= ${min}`);
    return v;
  };
  if (!args.model) usage("--model is required (a GGUF file; random_gguf.py writes one)");
  if (!fs.existsSync(args.model)) usage(`--model ${args.model}: no such file`);
  return { args, number, usage };
}
