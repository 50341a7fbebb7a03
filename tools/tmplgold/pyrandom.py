"""pyrandom.py writes internal/chattemplate/testdata/qwen3_random_golden.json:
randomly generated conversations (seeded, so the file is reproducible)
rendered with the Qwen3 chat template by Python's Jinja2, configured as
transformers' apply_chat_template configures it (see pycheck.py). Python is
the engine transformers and vLLM run, so this corpus checks the Go renderer
against the true reference on many more shapes than the hand-written cases.
Run by hand, not in CI:

    python3 tools/tmplgold/pyrandom.py
"""
import json
import os
import random

import jinja2
import jinja2.ext
import jinja2.sandbox

from pycheck import CONFIG, ROOT, continue_final, raise_exception, token, tojson  # noqa: F401

OUT = os.path.join(ROOT, "internal/chattemplate/testdata/qwen3_random_golden.json")
N = 200
SEED = 20261130

PIECES = ["hello", "world", " ", "  ", "\n", "\n\n", "\t", "é", "東京", "😀", "<think>", "</think>",
          "<tool_response>", "</tool_response>", "\u2028", '"', "\\", "{", "}", "{{ x }}", "%",
          "<|im_end|>", "a.b", "-", "0.5", "Σ", "\r\n"]
FLOATS = [0.5, 2.0, 1e16, 1234567.5, -0.0, 1e-07, 0.1, 123456789.25]


def text(r, lo=0, hi=8):
    return "".join(r.choice(PIECES) for _ in range(r.randint(lo, hi)))


def key(r):
    return r.choice(["type", "name", "zeta", "alpha", "b", "a", "é", "東", "value", "x_y", "Z"]) + r.choice(["", "1", "_k"])


def value(r, depth=0):
    kind = r.choice("sifbn" + ("lo" if depth < 3 else ""))
    if kind == "s":
        return text(r, 0, 4)
    if kind == "i":
        return r.randint(-10**12, 10**12)
    if kind == "f":
        return r.choice(FLOATS)
    if kind == "b":
        return r.random() < 0.5
    if kind == "n":
        return None
    if kind == "l":
        return [value(r, depth + 1) for _ in range(r.randint(0, 3))]
    return {key(r): value(r, depth + 1) for _ in range(r.randint(0, 4))}


def tool(r):
    props = {key(r): {"type": r.choice(["string", "number", "object"]), "description": text(r, 0, 3),
                      "default": value(r, 2)} for _ in range(r.randint(0, 4))}
    fn = {"name": r.choice(["get_weather", "search", "naïve_tool"]), "description": text(r, 0, 5),
          "parameters": {"type": "object", "properties": props, "required": list(props)[:1]}}
    items = [("type", "function"), ("function", fn)]
    r.shuffle(items)
    return dict(items)


def tool_call(r):
    args = {key(r): value(r, 1) for _ in range(r.randint(0, 3))}
    if r.random() < 0.3:
        args = json.dumps(args, ensure_ascii=False, separators=r.choice([(",", ":"), (", ", ": ")]))
    call = {"name": r.choice(["get_weather", "search"]), "arguments": args}
    if r.random() < 0.8:
        return {"id": "call_%d" % r.randint(0, 99), "type": "function", "function": call}
    return call  # the template also accepts a bare {name, arguments}


def assistant(r):
    m = {"role": "assistant"}
    c = text(r)
    if r.random() < 0.4:
        c = r.choice(["", "\n", "\n\n"]) + "<think>" + text(r, 0, 4) + "</think>" + r.choice(["", "\n", "\n\n"]) + c
    m["content"] = c
    if r.random() < 0.2:
        m["reasoning_content"] = text(r, 0, 4)
    if r.random() < 0.35:
        m["tool_calls"] = [tool_call(r) for _ in range(r.randint(1, 3))]
    return m


def conversation(r):
    msgs = []
    if r.random() < 0.5:
        msgs.append({"role": "system", "content": text(r, 1, 6)})
    for _ in range(r.randint(1, 7)):
        kind = r.random()
        if kind < 0.4:
            c = text(r, 1, 8)
            if r.random() < 0.15:
                c = "<tool_response>" + c + "</tool_response>"
            msgs.append({"role": "user", "content": c})
        elif kind < 0.75:
            msgs.append(assistant(r))
        elif kind < 0.92:
            for _ in range(r.randint(1, 3)):
                msgs.append({"role": "tool", "content": text(r, 0, 5)})
        else:
            msgs.append({"role": "system", "content": text(r, 0, 4)})
    if msgs[0]["role"] not in ("system", "user"):
        msgs.insert(0, {"role": "user", "content": text(r, 1, 4)})
    return msgs


def main():
    config = json.load(open(CONFIG))
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(config["chat_template"])
    specials = {k: token(config[k]) for k in ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                                              "cls_token", "mask_token"] if config.get(k) is not None}
    specials["additional_special_tokens"] = [token(t) for t in config.get("additional_special_tokens", [])]

    r = random.Random(SEED)
    cases = []
    for i in range(N):
        msgs = conversation(r)
        tools = [tool(r) for _ in range(r.randint(1, 3))] if r.random() < 0.4 else None
        agp = r.random() < 0.7
        thinking = r.choice([None, True, False])
        case = {"name": "random_%03d" % i,
                "messages": json.dumps(msgs, ensure_ascii=False),
                "add_generation_prompt": agp}
        if tools is not None:
            case["tools"] = json.dumps(tools, ensure_ascii=r.random() < 0.2)
        kwargs = dict(specials)
        if thinking is not None:
            case["enable_thinking"] = thinking
            kwargs["enable_thinking"] = thinking
        try:
            # Render from the JSON text, exactly what the Go test decodes.
            case["expected"] = template.render(messages=json.loads(case["messages"]),
                                               tools=json.loads(case["tools"]) if tools is not None else None,
                                               documents=None, add_generation_prompt=agp, **kwargs)
        except Exception as e:  # noqa: BLE001
            case["error"] = f"{type(e).__name__}: {e}"
        cases.append(case)
    doc = {"provenance": f"Generated by tools/tmplgold/pyrandom.py (seed {SEED}) with Python Jinja2 "
                         f"{jinja2.__version__} configured as transformers' apply_chat_template, from "
                         "internal/modelfiles/qwen3/tokenizer_config.json (Qwen3 chat template, Apache-2.0). "
                         "Do not edit by hand.",
           "cases": cases}
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    errors = sum(1 for c in cases if "error" in c)
    print(f"wrote {len(cases)} cases ({errors} where Python fails) to {os.path.relpath(OUT, ROOT)}")


if __name__ == "__main__":
    main()
