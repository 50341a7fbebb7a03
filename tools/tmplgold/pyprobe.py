"""pyprobe.py writes internal/chattemplate/testdata/engine_probe.json: small
templates using the Jinja features chat templates commonly rely on
(filters, tests, string methods, loops, namespaces, macros), rendered by
Python's Jinja2 configured as transformers does. The Go test compares each
one and keeps an explicit list of the known differences of the Go engine,
so that model templates other than Qwen3 can be judged quickly. Run by
hand, not in CI:

    python3 tools/tmplgold/pyprobe.py
"""
import json
import os

import jinja2
import jinja2.ext
import jinja2.sandbox

from pycheck import ROOT, raise_exception, tojson

OUT = os.path.join(ROOT, "internal/chattemplate/testdata/engine_probe.json")

# Context shared by every probe, given to the Go side as chat_template_kwargs
# (plus the messages), so both engines see the same ordered values.
KWARGS = {
    "s": "  Héllo, Wörld 東京 ",
    "d": {"zeta": 1, "alpha": [1, 2.5], "mid": None},
    "l": [3, 1, 2, 3],
    "n": None,
    "f": 2.0,
    "big": 1234567.5,
    "t": True,
    "e": "",
    "toolset": [{"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": {"y": [], "x": {}}}}}],
    "parts": [{"type": "text", "text": " part one "}, {"type": "image"}, {"type": "text", "text": "Part two\n"}],
    "ctl": "\x1c\u3000 x \x1f\t",
    "nested": [{"a": {"b": 1}}, {"a": {}}, {}],
}
MESSAGES = [{"role": "system", "content": "sys"}, {"role": "user", "content": "u1"},
            {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]

PROBES = [
    "{{ s | trim }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}",
    "{{ s.upper() }}|{{ s.lower() }}|{{ s | upper }}|{{ s.title() }}|{{ s | capitalize }}",
    "{{ s.startswith('  H') }}|{{ s.endswith(' ') }}|{{ s.replace('l', 'L') }}|{{ s.split(',') | join('#') }}",
    "{{ s[2:5] }}|{{ s[::-1] }}|{{ s[-3:] }}|{{ s | length }}",
    "{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}:{{ m.role }};{% endfor %}",
    "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}|{{ messages | map(attribute='role') | join('|') }}",
    "{{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='content') | list }}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{{ d.keys() | list }}|{{ d.values() | list }}",
    "{{ d | tojson }}|{{ toolset | tojson }}|{{ d | tojson(indent=2) }}",
    "{{ d.get('zeta') }}|{{ d.get('missing', 'dflt') }}|{{ d['alpha'][1] }}|{{ 'zeta' in d }}",
    "{{ d | dictsort }}",
    "{{ d }}|{{ l }}|{{ d | string }}",
    "{{ n }}|{{ n is none }}|{{ undefined_name is defined }}|{{ undefined_name }}",
    "{{ f }}|{{ big }}|{{ 7 / 2 }}|{{ 7 // 2 }}|{{ 7 % 3 }}|{{ 2 ** 10 }}|{{ 0.1 + 0.2 }}",
    "{{ t }}|{{ not t }}|{{ t and 'x' }}|{{ e or 'empty' }}",
    "{{ l | sort | join(',') }}|{{ l | unique | list }}|{{ l | first }}|{{ l | last }}|{{ l | sum }}|{{ l | max }}|{{ l | min }}",
    "{{ range(3) | list }}|{{ [1, 2] + [3] }}|{{ 'a' ~ 1 ~ none }}",
    "{% set ns = namespace(found=false, count=0) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}{% set ns.count = ns.count + 1 %}{% endif %}{% endfor %}{{ ns.found }}{{ ns.count }}",
    "{% macro fmt(a, b='z') %}<{{ a }}{{ b }}>{% endmacro %}{{ fmt('y') }}{{ fmt('y', b='w') }}",
    "{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}",
    "{{ s is string }}|{{ d is mapping }}|{{ l is sequence }}|{{ f is number }}|{{ l is iterable }}|{{ 3 is odd }}",
    "{{ e | default('d') }}|{{ e | default('d', true) }}|{{ undefined_name | default('u') }}",
    "{{ '<b>&' | e }}|{{ '<b>' | safe }}|{{ 'one two  three' | wordcount }}",
    "{{ 'a\nb' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}",
    "{{ '%s-%d' | format('a', 3) }}",
    "{{ messages[-1]['content'] }}|{{ messages[0].content }}|{{ (messages | last).role }}",
    "{%- if true %}\n  x\n{%- endif %}\n{% if true %}\n  y\n{% endif %}\n  z",
    "{{ raise_exception('boom') if false else 'ok' }}",
    "{% set x = 'outer' %}{% for i in [1] %}{% set x = 'inner' %}{% endfor %}{{ x }}",
    "{{ messages | length > 3 }}|{{ (messages | length) - 1 }}|{{ -1 }}|{{ 1e3 }}",
    "{{ parts | selectattr('type', 'equalto', 'text') | map(attribute='text') | map('trim') | join('\\n') }}|{{ parts | map(attribute='text', default='-') | map('upper') | join('|') }}",
    "[{{ ctl | trim }}]|[{{ s | trim('H ') }}]|[{{ s | trim(none) }}]",
    "{{ nested[:1] | map(attribute='a.b') | list }}|{{ nested | map(attribute='a.b', default=0) | list }}",
    "{{ {'output': s} | tojson }}|{{ 'role' in messages[0] }}|{{ 'tool_calls' in messages[0] }}|{{ parts | map('tojson') | join(' ') }}",
]


def main():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    cases = []
    for i, src in enumerate(PROBES):
        case = {"name": "probe_%02d" % i, "template": src}
        try:
            case["expected"] = env.from_string(src).render(messages=MESSAGES, **KWARGS)
        except Exception as e:  # noqa: BLE001
            case["error"] = f"{type(e).__name__}: {e}"
        cases.append(case)
    doc = {"provenance": f"Generated by tools/tmplgold/pyprobe.py with Python Jinja2 {jinja2.__version__} "
                         "configured as transformers' apply_chat_template. Do not edit by hand.",
           "messages": json.dumps(MESSAGES, ensure_ascii=False),
           "kwargs": json.dumps(KWARGS, ensure_ascii=False),
           "cases": cases}
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(cases)} probes to {os.path.relpath(OUT, ROOT)}")


if __name__ == "__main__":
    main()
