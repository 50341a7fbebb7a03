"""pycheck.py renders the golden cases of internal/chattemplate with Python's
Jinja2, configured the way transformers' apply_chat_template configures it
(sandboxed environment, trim_blocks, lstrip_blocks, loopcontrols, its own
tojson and raise_exception), and reports where Python differs from the
@huggingface/jinja output recorded by gen.mjs. Run by hand, not in CI:

    python3 tools/tmplgold/pycheck.py           report only
    python3 tools/tmplgold/pycheck.py --write   also record the result in
                                                each case's "python" field
    ... --family NAME|all                       the other families' goldens
                                                (families.mjs) instead of Qwen3's

Needs jinja2 >= 3.1 (Debian: python3-jinja2). The Go test requires a render
error wherever Python fails, even if the JavaScript reference renders.
"""
import gzip
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONFIG = os.path.join(ROOT, "internal/modelfiles/qwen3/tokenizer_config.json")
GOLDEN = os.path.join(ROOT, "internal/chattemplate/testdata/qwen3_golden.json")


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def token(t):
    return t["content"] if isinstance(t, dict) else t


def continue_final(rendered, messages):
    final = messages[-1]["content"]
    if isinstance(final, (list, tuple)):
        for block in reversed(final):
            if "text" in block:
                final = block["text"]
                break
        else:
            raise ValueError("no text to continue")
    if final.strip() not in rendered:
        raise ValueError("final message not in rendered chat")
    loc = rendered.rindex(final.strip())
    if rendered[loc : loc + len(final.lstrip())] == final:
        return rendered[: loc + len(final.lstrip())]
    return rendered[: loc + len(final.strip())]


FAMILIES = ["llama3.1", "deepseek-v3", "gemma3"]


def load_config(path):
    if os.path.exists(path):
        return json.load(open(path, encoding="utf-8"))
    with gzip.open(path + ".gz", "rt", encoding="utf-8") as f:
        return json.load(f)


def main():
    if "--family" in sys.argv:
        name = sys.argv[sys.argv.index("--family") + 1]
        rc = 0
        for fam in FAMILIES if name == "all" else [name]:
            print(f"== {fam}")
            rc |= check(os.path.join(ROOT, "internal/modelfiles/testdata", fam, "tokenizer_config.json"),
                        os.path.join(ROOT, "internal/chattemplate/testdata", f"{fam}_golden.json"))
        return rc
    return check(CONFIG, GOLDEN)


def check(CONFIG, GOLDEN):
    config = load_config(CONFIG)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(config["chat_template"])
    specials = {}
    for k in ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]:
        if config.get(k) is not None:
            specials[k] = token(config[k])
    if config.get("additional_special_tokens"):
        specials["additional_special_tokens"] = [token(t) for t in config["additional_special_tokens"]]

    golden = json.load(open(GOLDEN))
    differ = 0
    for case in golden["cases"]:
        messages = json.loads(case.get("template_messages") or case["messages"])
        kwargs = dict(specials)
        if case.get("kwargs"):
            kwargs.update(json.loads(case["kwargs"]))
        if "enable_thinking" in case:
            kwargs["enable_thinking"] = case["enable_thinking"]
        tools = json.loads(case["tools"]) if case.get("tools") else None
        try:
            out = template.render(messages=messages, tools=tools, documents=None,
                                  add_generation_prompt=case["add_generation_prompt"], **kwargs)
            if case.get("continue_final_message"):
                out = continue_final(out, messages)
            got, err = out, None
        except Exception as e:  # noqa: BLE001 - report any failure
            got, err = None, f"{type(e).__name__}: {e}"
        want = case.get("expected")
        if got == want:
            status = "same" if err is None else f"both fail (python: {err})"
        else:
            differ += 1
            status = f"DIFFERS python={got!r} error={err}"
        print(f"{case['name']}: {status}")
        case["python"] = {"agrees": got == want}
        if err is not None:
            case["python"]["error"] = err
    print(f"{differ} case(s) differ between Python Jinja2 {jinja2.__version__} and @huggingface/jinja")
    if "--write" in sys.argv:
        golden["python_check"] = f"python field: tools/tmplgold/pycheck.py with Jinja2 {jinja2.__version__}, configured as transformers does"
        with open(GOLDEN, "w", encoding="utf-8") as f:
            f.write(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
