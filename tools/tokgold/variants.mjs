// variants.mjs writes internal/tokenizer/testdata/variants_golden.jsonl: the
// ids and decodes, by HuggingFace's Rust tokenizers (npm "tokenizers", a
// native binding), of the Llama 2 tokenizer.json with its sections replaced
// as internal/tokenizer/testdata/variants.json says, over the first 150
// lines of corpus.jsonl plus a few lines for the features the variants
// exercise. @huggingface/tokenizers (JavaScript) is reported beside it for
// information only: it does not implement Metaspace's split or Digits
// beyond ASCII, so where it differs Rust (what engines run) is the golden.
//
//   npm install && npm install --no-save tokenizers@0.23.2 && node variants.mjs
import { readFileSync, writeFileSync } from "node:fs";
import { gunzipSync } from "node:zlib";
import { createRequire } from "node:module";
import { Tokenizer } from "@huggingface/tokenizers";

const root = new URL("../../", import.meta.url);
const require = createRequire(import.meta.url);
const { Tokenizer: RustTokenizer } = require("tokenizers");
const base = JSON.parse(gunzipSync(readFileSync(new URL("internal/modelfiles/testdata/llama2/tokenizer.json.gz", root))).toString("utf8"));
const { variants } = JSON.parse(readFileSync(new URL("internal/tokenizer/testdata/variants.json", root), "utf8"));
const corpus = readFileSync(new URL("./corpus.jsonl", import.meta.url), "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l)).slice(0, 150);
const extras = [
  "a,b;c.d.e\n\n\nf!g?h!!",
  "<s>after a special token</s> and before",
  "  leading spaces, 12345 and 1234567 and ١٢٣ and ²³",
  "▁already▁marked ▁x",
  "x\u00a0y\uff21\ufb01 fullwidth and ligature",
];
const out = [];
for (const [name, v] of Object.entries(variants)) {
  const json = { ...base, ...v };
  const rust = RustTokenizer.fromString(JSON.stringify(json));
  const js = new Tokenizer(json, {});
  let jsSame = 0;
  const texts = [...corpus, ...extras];
  for (const text of texts) {
    const ids = Array.from((await rust.encode(text, null, { addSpecialTokens: false })).getIds());
    const decoded = await rust.decode(ids, false);
    try {
      if (JSON.stringify(js.encode(text, { add_special_tokens: false }).ids) === JSON.stringify(ids)) jsSame++;
    } catch {}
    out.push(JSON.stringify({ variant: name, text, ids, decoded }));
  }
  console.log(`${name}: ${texts.length} lines; @huggingface/tokenizers agrees on ${jsSame}`);
}
writeFileSync(new URL("internal/tokenizer/testdata/variants_golden.jsonl", root), out.join("\n") + "\n");
