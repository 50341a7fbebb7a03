// families.mjs writes the golden ids of the other model families' tokenizers
// (internal/modelfiles/testdata/<family>/tokenizer.json.gz) to
// internal/tokenizer/testdata/<family>_golden.jsonl, encoded by the pinned
// @huggingface/tokenizers. The corpus is corpus.jsonl (274 strings: mixed
// scripts, code, emoji, whitespace runs, numbers) plus each family's own
// lines below (its special tokens in context, byte-fallback characters).
// Each line is {"text", "ids", "decoded"} with add_special_tokens false;
// lines with "special": true were encoded with add_special_tokens true.
// Every line is also encoded by HuggingFace's Rust tokenizers (the npm
// package "tokenizers", a native binding, not pinned in package.json), which
// must agree; "decoded" is its decode(ids, skip_special_tokens=false), the
// tokenizers library's own (transformers' clean-up of spaces is not part
// of it).
//
//   npm install && npm install --no-save tokenizers@0.23.2
//   node families.mjs [family...]   (default: all)
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { gunzipSync } from "node:zlib";
import { createRequire } from "node:module";
import { Tokenizer } from "@huggingface/tokenizers";

const root = new URL("../../", import.meta.url);
const read = (rel) => {
  const u = new URL(rel, root);
  if (existsSync(u)) return readFileSync(u, "utf8");
  return gunzipSync(readFileSync(new URL(rel + ".gz", root))).toString("utf8");
};

const shared = ["Hello world", " Hello world", "", "  two leading spaces", "ends with space ", "a\nb", "1234567"];
const extras = {
  "llama3.1": [
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 12345 * 678?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "<|reserved_special_token_5|>x<|finetune_right_pad_id|> <|python_tag|>import os",
    "<|eot_id |> <|eot_id| <eot_id|> not tokens",
    "digits 1 12 123 1234 12345 123456 1234567",
  ],
  "deepseek-v3": [
    "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi there<｜Assistant｜>Hello!<｜end▁of▁sentence｜>",
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{\"temp\": 21}<｜tool▁output▁end｜><｜tool▁outputs▁end｜>",
    "中文English混合123456日本語ひらがなカタカナ한국어",
    "<think>\nLet me think.\n</think>\n\nAnswer: 42",
    "x.Method(arg) a+b=c ,hello ;world !wow ?q #tag @user $var %mod ^xor &and *ptr",
    "e\u0301 a\u0300\u0301 \u0915\u094d\u0937 combining marks",
  ],
  "gemma3": [
    "<bos><start_of_turn>user\nHi there!<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n",
    "<start_of_image><image_soft_token><end_of_image> <unused5> <pad>",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \u0000 \uE000 \uFFFF 🫠🪿 byte fallback",
    "    indented\tcode\n\n\n\n      more",
    "<start_of_turn> <end_of_turn > not tokens",
  ],
  "gpt-oss": [
    "<|startoftext|>HelloWorld XMLHttpRequest iPhone McDonald's DON'T we'll y'all'd",
    "ab'ſ AB'K ǅungla ʰa ªb e\u0301 \u0903a path/to/file/ x\n/\n",
    "<|endoftext|><|reserved_200005|><|endofprompt|>",
    "digits 1 12 123 1234 12345 123456 1234567",
  ],
  "llama2": [
    "<s>[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Again [/INST]",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \u0000 \uE000 🫠🪿 byte fallback",
    "<unk> <s> </s>",
  ],
};

const args = process.argv.slice(2);
const families = args.filter((a) => !a.startsWith("--"));
const corpus = readFileSync(new URL("./corpus.jsonl", import.meta.url), "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));

for (const fam of families.length ? families : Object.keys(extras)) {
  const dir = `internal/modelfiles/testdata/${fam}/`;
  const tokJSON = JSON.parse(read(dir + "tokenizer.json"));
  const tokConfig = JSON.parse(read(dir + "tokenizer_config.json"));
  const tok = new Tokenizer(tokJSON, tokConfig);
  const lines = [];
  for (const text of [...corpus, ...extras[fam]]) lines.push({ text, ids: tok.encode(text, { add_special_tokens: false }).ids });
  for (const text of [...shared, ...extras[fam]]) lines.push({ text, special: true, ids: tok.encode(text, { add_special_tokens: true }).ids });
  const require = createRequire(import.meta.url);
  const rust = require("tokenizers").Tokenizer.fromString(JSON.stringify(tokJSON));
  let bad = 0;
  for (const l of lines) {
    const ids = (await rust.encode(l.text, null, { addSpecialTokens: !!l.special })).getIds();
    if (JSON.stringify(Array.from(ids)) !== JSON.stringify(l.ids)) {
      bad++;
      console.log(`${fam}: rust differs on ${JSON.stringify(l.text).slice(0, 80)}`);
    }
    l.decoded = await rust.decode(l.ids, false);
  }
  console.log(`${fam}: rust tokenizers agree on ${lines.length - bad}/${lines.length}`);
  if (bad) process.exit(1);
  const out = lines.map((l) => JSON.stringify(l.special ? { text: l.text, special: true, ids: l.ids, decoded: l.decoded } : { text: l.text, ids: l.ids, decoded: l.decoded }));
  writeFileSync(new URL(`internal/tokenizer/testdata/${fam}_golden.jsonl`, root), out.join("\n") + "\n");
  console.log(`${fam}: wrote ${out.length} goldens`);
}
