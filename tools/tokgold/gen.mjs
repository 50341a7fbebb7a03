// gen.mjs reads corpus.jsonl (one JSON string per line) and writes the
// reference ids of every string, encoded by the pinned
// @huggingface/tokenizers with the Qwen3 tokenizer files, to
// internal/tokenizer/testdata/qwen3_golden.jsonl as {"text":…, "ids":[…]}.
// Encoding uses add_special_tokens: false (Qwen3 adds none either way);
// special tokens written in the text are still recognised.
//
// Usage: node make-corpus.mjs && node gen.mjs [path/to/tokenizer.json]
// Without an argument the repository's embedded gzip copy is used.
import { readFileSync, writeFileSync } from "node:fs";
import { gunzipSync } from "node:zlib";
import { Tokenizer } from "@huggingface/tokenizers";

const root = new URL("../../", import.meta.url);
const tokJSON = process.argv[2]
  ? readFileSync(process.argv[2], "utf8")
  : gunzipSync(readFileSync(new URL("internal/modelfiles/qwen3/tokenizer.json.gz", root))).toString("utf8");
const tokConfig = readFileSync(new URL("internal/modelfiles/qwen3/tokenizer_config.json", root), "utf8");
const tok = new Tokenizer(JSON.parse(tokJSON), JSON.parse(tokConfig));

const lines = readFileSync(new URL("./corpus.jsonl", import.meta.url), "utf8").split("\n").filter((l) => l !== "");
const out = lines.map((l) => {
  const text = JSON.parse(l);
  const ids = tok.encode(text, { add_special_tokens: false }).ids;
  return JSON.stringify({ text, ids });
});
writeFileSync(new URL("internal/tokenizer/testdata/qwen3_golden.jsonl", root), out.join("\n") + "\n");
console.log(`wrote ${out.length} goldens`);
