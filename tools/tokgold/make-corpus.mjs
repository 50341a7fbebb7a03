// make-corpus.mjs writes corpus.jsonl: one JSON string per line, the texts
// whose reference token ids gen.mjs records. Deterministic: same output on
// every run. Long documents are assembled from kvrouter's own sources and
// docs (paths relative to the repository root).
import { readFileSync, writeFileSync } from "node:fs";

const out = [];
const add = (s) => out.push(s);

// Plain English, contractions, casing.
[
  "Hello world", "Hello  world", "Hello   world", "hello", "Hello", "HELLO WORLD", " Hello", "  Hello",
  "Hello ", "Hello   ", "The quick brown fox jumps over the lazy dog.",
  "I'm sure you'll like it, won't you? We've done it; they'd agree.",
  "I'M SURE YOU'LL LIKE IT, WON'T YOU? WE'VE DONE IT; THEY'D AGREE.",
  "It's John's car's wheel", "'s 't 're 've 'm 'll 'd", "'S 'T 'RE 'VE 'M 'LL 'D", "'Re 'rE 'Ll 'lL",
  "don't", "DON'T", "o'clock", "rock'n'roll", "'sup", "'twas", "y'all'd've", "''s", "' s", "'",
  "\u2019s it\u2019s curly", "'\u017f long s", "'\u212a kelvin",
  "a", "A", ".", " ", "  ", "\t", "\n", "\r\n", "",
].forEach(add);

// Whitespace runs, tabs, CR/LF, trailing spaces.
[
  "a b", "a  b", "a   b", "a    b", "a\tb", "a\t\tb", "a \tb", "a\t b", "a\nb", "a\n\nb", "a\n\n\nb",
  "a\r\nb", "a\r\n\r\nb", "a\rb", "a \nb", "a \n b", "a  \n  b", "a\n  b", "a \n\n b", "line one\nline two\n",
  "trailing space ", "trailing spaces   ", "trailing tab\t", "trailing newline\n", "trailing newlines\n\n\n",
  "   leading spaces", "\n\nleading newlines", "\t\tleading tabs", "   ", "\n\n", "\r\n\r\n", " \n ", "\t \n \t",
  "end with space and newline \n", "mixed \t \r\n \t end", "a\u000bb\u000cc", "x\u0085y", "x\u00a0y", "x \u00a0 y",
  "x\u3000y", "x\u2028y\u2029z", "x\u200by", "x\ufeffy", "x\u2003\u2003y", "x\u1680y", "x\u180ey", "x\u202fy\u205fz",
  "word \u00a0\u00a0word", "  \u3000  x",
].forEach(add);

// Numbers.
[
  "12345", "1234567890", "3.14159", "1,000,000", "-42", "+7", "0x1F", "1e-9", "2025-11-30", "10:45:00",
  "version 1.2.3", "v0.17.4", "$100.00", "50%", "1st 2nd 3rd 4th", "\u0663\u0664\u0665", "\uff11\uff12\uff13",
  "x\u00b2 + y\u00b3", "\u00bd \u00bc \u00be", "\u216b \u2166", "\u2460\u2461\u2462", "\u0968\u0966\u0968\u096b",
  "phone: +1 (555) 010-9999", "IPv4 192.168.0.1", "3 apples and 12 oranges",
].forEach(add);

// Accents, combining marks, normalisation.
[
  "caf\u00e9", "cafe\u0301", "na\u00efve r\u00e9sum\u00e9", "nai\u0308ve re\u0301sume\u0301", "\u00c5ngstr\u00f6m", "\u212bngstr\u00f6m",
  "\u2126 ohm", "\u1100\u1161\u11a8", "\uac00\ub098\ub2e4", "e\u0301\u0301\u0301", "\u0301 leading combining",
  "Stra\u00dfe", "\u0130stanbul", "\u00c0 la carte", "\u1e9e", "\u1ec7 Ti\u1ebfng Vi\u1ec7t", "Ti\u00ea\u0301ng Vi\u00ea\u0323t",
  "\u0041\u030a", "\ufb01nance \ufb02ow", "Zo\u00eb", "\u00f1and\u00fa", "\u0161\u010d\u0159\u017e\u00fd\u00e1\u00ed\u00e9",
  "\u03b1\u03b2\u03b3 \u0391\u0392\u0393", "\u03ac\u03ad\u03ae", "\u0430\u0431\u0432 \u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440",
].forEach(add);

// CJK and other scripts.
[
  "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8\u3002", "\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u6563\u6b65\u5427\u3002",
  "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002", "\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a", "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4",
  "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645", "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
  "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e", "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0", "\u0532\u0561\u0580\u0565\u0582",
  "\u4e2d\u6587English\u6df7\u5408123\u6587\u672c", "\u300c\u5f15\u7528\u300d\u3010\u62ec\u53f7\u3011", "\u3000\u5168\u89d2\u7a7a\u683c",
  "\uff28\uff45\uff4c\uff4c\uff4f\u3000\uff37\uff4f\uff52\uff4c\uff44\uff01", "\uff21\uff22\uff23\uff44\uff45\uff46", "\uff08\u62ec\u5f27\uff09\uff1a\uff1b",
  "\ud842\udfb7\u91ce\u5bb6", "\ud840\udc0b", "\u1780\u17d2\u1798\u17c2\u179a",
].forEach(add);

// Emoji: ZWJ sequences, skin tones, flags, keycaps, variation selectors.
[
  "\ud83d\ude00", "\ud83d\ude00\ud83d\ude01\ud83d\ude02", "I \u2764\ufe0f Go", "\ud83d\udc4d\ud83c\udffd", "\ud83d\udc4b\ud83c\udffb\ud83d\udc4b\ud83c\udfff",
  "\ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67\u200d\ud83d\udc66", "\ud83e\uddd1\ud83c\udffd\u200d\ud83d\udcbb coding", "\ud83c\udff3\ufe0f\u200d\ud83c\udf08",
  "\ud83c\uddeb\ud83c\uddf7\ud83c\uddef\ud83c\uddf5", "1\ufe0f\u20e3 #\ufe0f\u20e3", "\u2615\ufe0e \u2615\ufe0f", "done \u2705 failed \u274c",
  "\ud83d\ude80\ud83d\ude80\ud83d\ude80 launch!!!", "emoji\ud83d\ude00inside\ud83d\ude00words", " \ud83d\ude00 ", "\ud83e\udd16: beep",
].forEach(add);

// Punctuation, symbols, markup.
[
  "Hello, world!", "Wait... what?!", "--- *** ___", "!!!???", "(parenthesised)", "[brackets] {braces}",
  "\"double\" 'single' `back`", "\u201ccurly\u201d \u2018quotes\u2019", "\u00abguillemets\u00bb", "a/b\\c|d",
  "\u2014em dash\u2013en dash", "\u2026 ellipsis", "\u00a9 \u00ae \u2122", "\u20ac \u00a3 \u00a5 \u20b9", "\u2192 \u2190 \u21d2", "\u2200x \u2203y: x \u2264 y",
  "#hashtag @mention", "user@example.com", "https://example.com/path?q=1&r=two#frag", "http://127.0.0.1:8000/v1/chat/completions",
  "file:///tmp/a%20b.txt", "C:\\Users\\me\\file.txt", "/usr/local/bin/kvrouter", "~/.config/kvrouter.yaml",
  "<div class=\"x\">Hi</div>", "<br/>", "**bold** _it_ `code`", "# Heading\n\n- item one\n- item two\n",
  "| a | b |\n|---|---|\n| 1 | 2 |", "> quoted\n>> nested", "a.b.c", "a..b", "end.", ".start", "x;\n", "x,\r\n",
].forEach(add);

// Code.
[
  "func main() {\n\tfmt.Println(\"hello\")\n}\n",
  "def f(x):\n    return x ** 2\n\nprint(f(3))\n",
  "for (let i = 0; i < n; i++) {\n  sum += a[i];\n}",
  "if err != nil {\n\t\treturn fmt.Errorf(\"decoding event batch: %w\", err)\n\t}",
  "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
  "{\"model\": \"Qwen/Qwen3-0.6B\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"stream\": true}",
  "fn main() -> Result<(), Box<dyn Error>> {\n    let v: Vec<u32> = vec![1, 2, 3];\n    Ok(())\n}",
  "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
  "x := map[string]int{\"a\": 1}\n", "a+=1;b-=2;c*=3;d/=4", "i++ --j", "x!==y&&z===w||!v",
  "    indented with four spaces\n        and eight\n", "\tone tab\n\t\ttwo tabs\n", "  \n  \n  ",
  "<?php echo $x; ?>", "$ echo \"$HOME\" | grep -v '^#' > out.txt 2>&1", "SELECT\r\n  *\r\nFROM t\r\n",
  "// comment\n/* block */\n", "@decorator\nclass A(B):\n    pass\n", "let s = `template ${x}`;",
].forEach(add);

// Special and added tokens.
[
  "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
  "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n4<|im_end|>",
  "<|im_end|><|im_start|>", "<|im_start|><|im_start|>", "text<|im_end|>text", " <|im_end|> ", "  <|im_start|>  ",
  "<|im_start", "<|im_start|", "|im_start|>", "<|im_sta rt|>", "<<|im_start|>>", "<|IM_START|>",
  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
  "<think>reasoning</think>answer", "<|fim_prefix|>def f(<|fim_suffix|>):<|fim_middle|>", "<|vision_start|><|image_pad|><|vision_end|>",
  "<|box_start|>(1,2),(3,4)<|box_end|>", "<|object_ref_start|>cat<|object_ref_end|>", "<|repo_name|>kvrouter<|file_sep|>main.go",
  "<|endoftext|><|endoftext|>", "a<|endoftext|>\u0301", "\u00e9<|im_end|>e\u0301",
].forEach(add);

// Long repetitive inputs.
add("a".repeat(1000));
add(" ".repeat(500));
add("\n".repeat(200));
add("ab ".repeat(300));
add("\u4f60\u597d".repeat(300));
add("\ud83d\ude00".repeat(200));
add("1234567890".repeat(50));
add("=".repeat(120) + "\n" + "-".repeat(120));
add("Lorem ipsum dolor sit amet, consectetur adipiscing elit. ".repeat(40));

// Long documents from the repository's own sources and docs.
const docs = ["internal/kvhash/kvhash.go", "internal/kvhash/doc.go", "internal/kvevent/event.go", "internal/trace/trace.go",
  "docs/architecture.md", "internal/modelfiles/qwen3/PROVENANCE.md"];
for (const p of docs) {
  let text;
  try { text = readFileSync(new URL("../../" + p, import.meta.url), "utf8"); } catch { continue; }
  for (let i = 0; i < text.length; i += 6000) add(text.slice(i, i + 6000));
}

// A multilingual chat-style document of several KB.
const paras = [
  "Routing requests by KV-cache overlap saves prefill time. ",
  "\u8def\u7531\u5668\u6839\u636e\u7f13\u5b58\u547d\u4e2d\u9009\u62e9\u5de5\u4f5c\u8282\u70b9\u3002",
  "Les caches KV \u00e9vitent de recalculer le pr\u00e9fixe. ",
  "\u30ad\u30e3\u30c3\u30b7\u30e5\u304c\u30d2\u30c3\u30c8\u3059\u308b\u3068\u901f\u3044\u3002 ",
  "Tokens: 151644, 872, 198 \u2014 ok \ud83d\udc4d\ud83c\udffe\n\n",
  "\tindent\ttabs\t\r\n",
];
let chat = "";
for (let i = 0; chat.length < 5000; i++) chat += "<|im_start|>" + (i % 2 ? "assistant" : "user") + "\n" + paras[i % paras.length].repeat(1 + (i % 3)) + "<|im_end|>\n";
add(chat);

writeFileSync(new URL("./corpus.jsonl", import.meta.url), out.map((s) => JSON.stringify(s)).join("\n") + "\n");
console.log(`wrote ${out.length} strings`);
