// gen.mjs renders chat-template golden cases with @huggingface/jinja (the
// Jinja engine behind transformers.js, pinned in package.json) and writes
// internal/chattemplate/testdata/qwen3_golden.json. Run by hand, not in CI:
//
//   cd tools/tmplgold && npm install && node gen.mjs && python3 pycheck.py --write
//
// pycheck.py then renders the same cases with Python's Jinja2 configured as
// transformers does and records its verdict in each case's "python" field.
//
// Inputs are kept as raw JSON text so the Go test sees the exact bytes (and
// key order) the reference saw. Avoid integer-like object keys ("1"):
// JavaScript objects reorder them, Python and the Go renderer do not.
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const configPath = path.join(root, "internal/modelfiles/qwen3/tokenizer_config.json");
const outPath = path.join(root, "internal/chattemplate/testdata/qwen3_golden.json");

const config = JSON.parse(fs.readFileSync(configPath, "utf8"));
const template = new Template(config.chat_template);

// special_tokens_map as transformers passes it: only tokens that are set.
function tokenContent(t) {
  return t && typeof t === "object" ? t.content : t;
}
const specials = {};
for (const k of ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]) {
  const v = tokenContent(config[k]);
  if (v !== null && v !== undefined) specials[k] = v;
}
if (Array.isArray(config.additional_special_tokens)) {
  specials.additional_special_tokens = config.additional_special_tokens.map(tokenContent);
}

// vllmPreprocess mirrors vLLM's message rebuilding (vllm/entrypoints/chat_utils.py,
// "string" content format, which is what the Qwen3 template gets).
function vllmPreprocess(messages) {
  return messages.map((m) => {
    let content = m.content;
    if (content === null || content === undefined) content = [];
    else if (typeof content === "string") content = [{ type: "text", text: content }];
    const texts = [];
    for (const p of content) {
      if (typeof p === "string") { texts.push(p); continue; }
      const field = { text: "text", input_text: "text", output_text: "text", refusal: "refusal", thinking: "thinking" }[p.type];
      if (!field) throw new Error(`unsupported part type ${p.type}`);
      if (p[field] === null || p[field] === undefined) continue;
      texts.push(p[field]);
    }
    const out = { role: m.role, content: texts.join("\n") };
    if (m.role === "assistant") {
      if (m.tool_calls !== undefined && m.tool_calls !== null) {
        for (const tc of m.tool_calls) {
          const a = tc.function.arguments;
          if (typeof a === "string") {
            try { tc.function.arguments = JSON.parse(a); } catch { tc.function.arguments = {}; }
          } else if (a === null || typeof a !== "object") {
            tc.function.arguments = {};
          }
        }
        if (m.tool_calls.length > 0) out.tool_calls = m.tool_calls;
      }
      if (m.reasoning !== undefined && m.reasoning !== null) {
        out.reasoning = m.reasoning;
        out.reasoning_content = m.reasoning;
      }
    } else if (m.role === "tool" && "tool_call_id" in m) {
      out.tool_call_id = m.tool_call_id;
    }
    for (const k of ["name", "task"]) if (typeof m[k] === "string") out[k] = m[k];
    return out;
  });
}

const weatherTool = `{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather <b>now</b> & later — für Städte 東京",
  "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "City, e.g. \\"Paris\\""},
  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7},
  "options": {"type": "object", "properties": {"zeta": {"type": "boolean"}, "alpha": {"type": "number", "default": 0.5}}, "required": ["zeta"]}},
  "required": ["location"], "additionalProperties": false}}}`;
const searchTool = `{"type": "function", "function": {"name": "search", "parameters": {"type": "object", "required": ["q"], "properties": {"q": {"type": "string"}, "top_k": {"type": "integer", "default": 3}, "filters": {"type": "array", "items": {"type": "object", "properties": {"field": {"type": "string"}, "value": {}}}}}}}}`;

const cases = [
  { name: "plain", messages: `[{"role": "user", "content": "Hello!"}]`, add_generation_prompt: true },
  { name: "plain_no_generation_prompt", messages: `[{"role": "user", "content": "Hello!"}]`, add_generation_prompt: false },
  { name: "system_multi_turn", messages: `[{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}]`, add_generation_prompt: true },
  { name: "enable_thinking_false", messages: `[{"role": "user", "content": "Quick answer please."}]`, add_generation_prompt: true, enable_thinking: false },
  { name: "enable_thinking_true", messages: `[{"role": "user", "content": "Think hard."}]`, add_generation_prompt: true, enable_thinking: true },
  { name: "enable_thinking_false_no_generation_prompt", messages: `[{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]`, add_generation_prompt: false, enable_thinking: false },
  { name: "kwargs_enable_thinking", messages: `[{"role": "user", "content": "Via kwargs."}]`, add_generation_prompt: true, kwargs: `{"enable_thinking": false, "unused": {"b": 1, "a": [2, 3]}}` },
  { name: "tools_with_system", messages: `[{"role": "system", "content": "You can call tools."}, {"role": "user", "content": "Weather in Paris?"}]`, tools: `[${weatherTool}, ${searchTool}]`, add_generation_prompt: true },
  { name: "tools_without_system", messages: `[{"role": "user", "content": "Search for kv caches"}]`, tools: `[${searchTool}]`, add_generation_prompt: true },
  { name: "tools_empty_list", messages: `[{"role": "user", "content": "No tools really"}]`, tools: `[]`, add_generation_prompt: true },
  { name: "tool_calls_object_arguments", messages: `[{"role": "user", "content": "Weather in Paris and Tokyo?"},
      {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius", "options": {"zeta": true, "alpha": 0.25}}}},
        {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": {"unit": "fahrenheit", "location": "東京"}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\\"temp\\": 21}"},
      {"role": "tool", "tool_call_id": "call_2", "content": "{\\"temp\\": 70}"}]`, tools: `[${weatherTool}]`, add_generation_prompt: true },
  { name: "tool_calls_string_arguments", messages: `[{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "Let me check.", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{\\"location\\":\\"Paris\\",\\"unit\\":\\"celsius\\"}"}}]},
      {"role": "tool", "tool_call_id": "c", "content": "sunny"},
      {"role": "assistant", "content": "It is sunny."},
      {"role": "user", "content": "Thanks"}]`, tools: `[${weatherTool}]`, add_generation_prompt: true },
  { name: "multi_step_tools_reasoning_content", messages: `[{"role": "user", "content": "Find docs then summarise"},
      {"role": "assistant", "content": "", "reasoning_content": "I should search first.", "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"q": "kv cache", "top_k": 2}}}]},
      {"role": "tool", "content": "doc1, doc2"},
      {"role": "assistant", "content": "<think>\\nNow fetch more.\\n</think>\\n\\nOne more search.", "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"q": "prefix"}}}]},
      {"role": "tool", "content": "doc3"}]`, tools: `[${searchTool}]`, add_generation_prompt: true },
  { name: "think_in_history", messages: `[{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "<think>\\nThe user greets me.\\n</think>\\n\\nHello! How can I help?"},
      {"role": "user", "content": "Tell me a joke"}]`, add_generation_prompt: true },
  { name: "think_in_last_assistant", messages: `[{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "<think>\\nGreeting.\\n</think>\\n\\nHello!"}]`, add_generation_prompt: false },
  { name: "tool_response_lookalike_user", messages: `[{"role": "user", "content": "Real question"},
      {"role": "assistant", "content": "<think>reasoning here</think>Calling.", "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"q": "x"}}}]},
      {"role": "user", "content": "<tool_response>\\nresult\\n</tool_response>"}]`, tools: `[${searchTool}]`, add_generation_prompt: true },
  { name: "unicode", messages: `[{"role": "system", "content": "Réponds en français 🇫🇷"}, {"role": "user", "content": "日本語と中文と한국어, emoji 👩‍👩‍👧‍👦, combining é, RTL שלום, line sep \\u2028 and para \\u2029, tab\\t, nul-ish \\u0001"}]`, add_generation_prompt: true },
  { name: "unicode_in_tool_schema", messages: `[{"role": "user", "content": "go"}]`, tools: `[{"type": "function", "function": {"name": "naïve", "description": "Ünïcödé ✓ \\u2028 \\"quoted\\" back\\\\slash / slash \\u0007 bell", "parameters": {"type": "object", "properties": {}}}}]`, add_generation_prompt: true },
  { name: "content_parts_passthrough_errors", messages: `[{"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]}]`, add_generation_prompt: true },
  { name: "content_parts_vllm", preprocess: "vllm", messages: `[{"role": "system", "content": [{"type": "text", "text": "Sys A"}, {"type": "text", "text": "Sys B"}]}, {"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]}]`, add_generation_prompt: true },
  { name: "vllm_null_content_string_arguments", preprocess: "vllm", messages: `[{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{\\"location\\":\\"Paris\\",\\"days\\":2}"}}, {"id": "d", "type": "function", "function": {"name": "get_weather", "arguments": "not json"}}]},
      {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "sunny"}, {"type": "text", "text": "warm"}]}]`, tools: `[${weatherTool}]`, add_generation_prompt: true },
  { name: "vllm_reasoning_field", preprocess: "vllm", messages: `[{"role": "user", "content": "Q"},
      {"role": "assistant", "content": "A", "reasoning": "thought about it"}]`, add_generation_prompt: false },
  { name: "continue_final_message", messages: `[{"role": "user", "content": "Write a poem"}, {"role": "assistant", "content": "Roses are red,"}]`, add_generation_prompt: false, continue_final_message: true },
  { name: "continue_final_message_trailing_space", messages: `[{"role": "user", "content": "Story?"}, {"role": "assistant", "content": "Once upon a time "}]`, add_generation_prompt: false, continue_final_message: true },
  { name: "continue_final_message_leading_newline", messages: `[{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}, {"role": "assistant", "content": "\\nA1"}, {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "\\n\\nPartial answer\\n"}]`, add_generation_prompt: false, continue_final_message: true },
  { name: "assistant_null_content_tool_calls", messages: `[{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"location": "Paris"}}}]},
      {"role": "tool", "content": "rain"}]`, tools: `[${weatherTool}]`, add_generation_prompt: true },
  { name: "assistant_missing_content_tool_calls", messages: `[{"role": "user", "content": "Weather?"},
      {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"location": "Paris"}}}]},
      {"role": "tool", "content": "rain"}]`, tools: `[${weatherTool}]`, add_generation_prompt: true },
  { name: "vllm_assistant_null_content_tool_calls", preprocess: "vllm", messages: `[{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"location": "Paris"}}}]},
      {"role": "tool", "content": "rain"}]`, tools: `[${weatherTool}]`, add_generation_prompt: true },
  { name: "numbers_in_tool_schema", messages: `[{"role": "user", "content": "n"}]`, tools: `[{"type": "function", "function": {"name": "n", "parameters": {"type": "object", "properties": {"x": {"type": "number", "minimum": -0.5, "maximum": 1234567.5, "multipleOf": 0.001, "default": 3}}}}}]`, add_generation_prompt: true },
  { name: "unknown_role_ignored", messages: `[{"role": "user", "content": "Hi"}, {"role": "narrator", "content": "ignored by Qwen3"}]`, add_generation_prompt: true },
  { name: "empty_messages", messages: `[]`, add_generation_prompt: true },
];

// pyStrip* mirror Python's str.strip/lstrip (str.isspace characters).
const PY_WS = "[\\t\\n\\v\\f\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";
const pyLstrip = (s) => s.replace(new RegExp(`^${PY_WS}+`), "");
const pyStrip = (s) => pyLstrip(s).replace(new RegExp(`${PY_WS}+$`), "");

// continueFinal mirrors transformers' continue_final_message handling in
// apply_chat_template (cut the prompt right after the final message).
function continueFinal(rendered, messages) {
  let final = messages[messages.length - 1].content;
  if (Array.isArray(final)) {
    const part = [...final].reverse().find((p) => p && typeof p === "object" && "text" in p);
    if (!part) throw new Error("no text to continue in the final message");
    final = part.text;
  }
  const stripped = pyStrip(final);
  const loc = rendered.lastIndexOf(stripped);
  if (loc < 0) throw new Error("final message does not appear in the rendered chat");
  const lead = pyLstrip(final);
  if (rendered.slice(loc, loc + lead.length) === final) return rendered.slice(0, loc + lead.length);
  return rendered.slice(0, loc + stripped.length);
}

function render(c) {
  let messages = JSON.parse(c.messages);
  if (c.preprocess === "vllm") messages = vllmPreprocess(messages);
  const ctx = {
    ...specials,
    ...(c.kwargs ? JSON.parse(c.kwargs) : {}),
    messages,
    tools: c.tools ? JSON.parse(c.tools) : null,
    add_generation_prompt: c.add_generation_prompt,
  };
  if (c.enable_thinking !== undefined) ctx.enable_thinking = c.enable_thinking;
  const out = template.render(ctx);
  return c.continue_final_message ? continueFinal(out, messages) : out;
}

const out = [];
for (const c of cases) {
  const rec = { name: c.name, messages: c.messages };
  if (c.tools !== undefined) rec.tools = c.tools;
  if (c.kwargs !== undefined) rec.kwargs = c.kwargs;
  rec.add_generation_prompt = c.add_generation_prompt;
  if (c.enable_thinking !== undefined) rec.enable_thinking = c.enable_thinking;
  if (c.continue_final_message) rec.continue_final_message = true;
  rec.preprocess = c.preprocess ?? "none";
  if (c.preprocess === "vllm") {
    // What the template saw, for pycheck.py (which has no vLLM port).
    rec.template_messages = JSON.stringify(vllmPreprocess(JSON.parse(c.messages)));
  }
  try {
    rec.expected = render(c);
  } catch (e) {
    rec.error = String(e.message);
  }
  out.push(rec);
}

const doc = {
  provenance: "Generated by tools/tmplgold/gen.mjs with @huggingface/jinja@0.5.11 from internal/modelfiles/qwen3/tokenizer_config.json (Qwen3 chat template, Apache-2.0). Do not edit by hand.",
  cases: out,
};
fs.writeFileSync(outPath, JSON.stringify(doc, null, 1) + "\n");
console.log(`wrote ${out.length} cases to ${path.relative(root, outPath)}`);
for (const r of out) if (r.error) console.log(`  ${r.name}: error: ${r.error}`);
