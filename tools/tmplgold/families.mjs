// families.mjs renders chat-template golden cases for the other model
// families (Llama 3.1, DeepSeek V3, Gemma 3) with @huggingface/jinja (pinned
// in package.json) from their tokenizer_config.json in
// internal/modelfiles/testdata/<family>/, and writes
// internal/chattemplate/testdata/<family>_golden.json in the format of
// qwen3_golden.json. Run by hand, not in CI:
//
//   cd tools/tmplgold && npm install && node families.mjs && python3 pycheck.py --write --family all
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");

function readConfig(family) {
  const p = path.join(root, "internal/modelfiles/testdata", family, "tokenizer_config.json");
  if (fs.existsSync(p)) return JSON.parse(fs.readFileSync(p, "utf8"));
  return JSON.parse(zlib.gunzipSync(fs.readFileSync(p + ".gz")).toString("utf8"));
}

const tokenContent = (t) => (t && typeof t === "object" ? t.content : t);

const unicode = `"日本語と中文と한국어, emoji 👩‍👩‍👧‍👦, combining é, RTL שלום, tab\\t, line sep \\u2028"`;
const common = [
  { name: "plain", messages: `[{"role": "user", "content": "Hello!"}]`, add_generation_prompt: true },
  { name: "plain_no_generation_prompt", messages: `[{"role": "user", "content": "Hello!"}]`, add_generation_prompt: false },
  { name: "system_multi_turn", messages: `[{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}]`, add_generation_prompt: true },
  { name: "whitespace_to_trim", messages: `[{"role": "user", "content": "  \\n padded question \\t\\n "}, {"role": "assistant", "content": "\\n\\nanswer\\n\\n"}, {"role": "user", "content": "next"}]`, add_generation_prompt: true },
  { name: "unicode", messages: `[{"role": "user", "content": ${unicode}}]`, add_generation_prompt: true },
  { name: "special_tokens_in_content", messages: `[{"role": "user", "content": "<|eot_id|><start_of_turn><｜User｜><bos> literal"}]`, add_generation_prompt: true },
  { name: "empty_messages", messages: `[]`, add_generation_prompt: true },
];
const cases = {
  "llama3.1": [...common],
  "deepseek-v3": [
    ...common,
    { name: "two_system_messages", messages: `[{"role": "system", "content": "First rule."}, {"role": "system", "content": "Second rule."}, {"role": "user", "content": "Go"}]`, add_generation_prompt: true },
    { name: "tool_calls_and_outputs", messages: `[{"role": "user", "content": "Weather in Paris and Tokyo?"},
        {"role": "assistant", "content": null, "tool_calls": [
          {"type": "function", "function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}},
          {"type": "function", "function": {"name": "get_weather", "arguments": "{\\"city\\": \\"東京\\"}"}}]},
        {"role": "tool", "content": "{\\"temp\\": 21}"},
        {"role": "tool", "content": "{\\"temp\\": 30}"},
        {"role": "assistant", "content": "Paris 21, Tokyo 30."},
        {"role": "user", "content": "Thanks"}]`, add_generation_prompt: true },
    { name: "tool_output_last", messages: `[{"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "content": "rain"}]`, add_generation_prompt: true },
  ],
  "gemma3": [
    ...common.filter((c) => c.name !== "system_multi_turn" && c.name !== "whitespace_to_trim"),
    { name: "system_multi_turn", messages: `[{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}]`, add_generation_prompt: true },
    { name: "whitespace_to_trim", messages: `[{"role": "user", "content": "  \\n padded question \\t\\n "}, {"role": "assistant", "content": "\\n\\nanswer\\n\\n"}, {"role": "user", "content": "next"}]`, add_generation_prompt: true },
    { name: "system_as_parts", messages: `[{"role": "system", "content": [{"type": "text", "text": "Sys from parts"}]}, {"role": "user", "content": "Hi"}]`, add_generation_prompt: true },
    { name: "content_parts_with_image", messages: `[{"role": "user", "content": [{"type": "text", "text": " Look: "}, {"type": "image"}, {"type": "text", "text": "what is it? "}]}]`, add_generation_prompt: true },
    { name: "roles_not_alternating", messages: `[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]`, add_generation_prompt: true },
    { name: "assistant_first", messages: `[{"role": "assistant", "content": "hello"}]`, add_generation_prompt: false },
  ],
};

for (const [family, list] of Object.entries(cases)) {
  const config = readConfig(family);
  const template = new Template(config.chat_template);
  const specials = {};
  for (const k of ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]) {
    const v = tokenContent(config[k]);
    if (v !== null && v !== undefined) specials[k] = v;
  }
  if (Array.isArray(config.additional_special_tokens)) specials.additional_special_tokens = config.additional_special_tokens.map(tokenContent);
  const out = [];
  for (const c of list) {
    const rec = { name: c.name, messages: c.messages, add_generation_prompt: c.add_generation_prompt, preprocess: "none" };
    try {
      rec.expected = template.render({ ...specials, messages: JSON.parse(c.messages), tools: null, add_generation_prompt: c.add_generation_prompt });
    } catch (e) {
      rec.error = String(e.message);
    }
    out.push(rec);
  }
  const outPath = path.join(root, "internal/chattemplate/testdata", `${family}_golden.json`);
  const doc = {
    provenance: `Generated by tools/tmplgold/families.mjs with @huggingface/jinja@0.5.11 from internal/modelfiles/testdata/${family}/tokenizer_config.json. Do not edit by hand.`,
    cases: out,
  };
  fs.writeFileSync(outPath, JSON.stringify(doc, null, 1) + "\n");
  console.log(`${family}: wrote ${out.length} cases`);
  for (const r of out) if (r.error) console.log(`  ${r.name}: error: ${r.error}`);
}
