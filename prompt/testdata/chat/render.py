#!/usr/bin/env python3
"""Renders each model folder's chat template as transformers does, into
<folder>/rendered.json: the expected output of train.ChatFormat's Go
rendering (chat_test.go).

transformers (tokenization_utils_base / utils/chat_template_utils) compiles
the template in an ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True) with the loopcontrols extension, a tojson filter that
keeps non-ASCII text, and raise_exception and strftime_now globals; it
renders with messages, tools=None, documents=None, add_generation_prompt and
the tokenizer's special tokens (bos_token, eos_token, unk_token, pad_token,
additional_special_tokens, those that are set).

Run from the repository root with Debian's python3-jinja2:

    python3 prompt/testdata/chat/render.py
"""

import json
import os
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))

SYSTEM = "You fix bugs. Reply with a unified diff in a ```diff block."
# Leading and trailing blanks (Llama trims content), braces that look like
# Jinja, a tab and non-ASCII text: the content is data, never template.
USER = (
    "  add() subtracts\n\nadd(2, 1) returns 1.\n\n[calc/ops.py]\n"
    "def add(a, b):\n\treturn a - b  # {{ not a tag }} {% raw %} ünïcode ✓\n  "
)
REPLY = (
    "```diff\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n"
    "-\treturn a - b  # {{ not a tag }} {% raw %} ünïcode ✓\n+\treturn a + b  # {{ not a tag }} {% raw %} ünïcode ✓\n```"
)

CASES = [
    {"name": "prompt", "add_generation_prompt": True,
     "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]},
    {"name": "reply", "add_generation_prompt": False,
     "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER},
                  {"role": "assistant", "content": REPLY}]},
    {"name": "no-system", "add_generation_prompt": True,
     "messages": [{"role": "user", "content": USER}]},
]

SPECIALS = ("bos_token", "eos_token", "unk_token", "pad_token")

# Whitespace control beside other tags, raw blocks, comments, signs and a
# trailing newline: how Jinja2 trims text, which compileTemplate settles
# itself (the jinja package trims the nearest text even past another tag).
WHITESPACE = [
    "{% for m in messages %}{{ m.content }}\n### end\n{% endfor %}",
    "A  {{ 'x' }}{{- 'y' }}  B",
    "A{{ 'x' -}}{{ 'y' }}\n  B",
    "{% if true %}\n    {% if true %}\n  x\n    {% endif %}\n{% endif %}\n",
    "  {% if true %}a{% endif %}\n  {{ 'b' }}\n",
    "a {% if true %}b{% endif %} c\n\n",
    "{# note #}\n  {#- other -#}  x  {#+ keep +#}\ny",
    "x\n  {%+ if true %}y{% endif +%}\nz",
    "{% raw %}\n  {{ not }} {% raw %}\n  {%- endraw %}\n! {%- raw -%} \n r \n{%+ endraw -%}  q",
    "a\r\n  {% if true %}\r\nb\r\n  {% endif %}\r\nc",
    "{{ '%}' }}{% set s = \"}}\\\"\" %}{{ s }}\n{{ messages[0]['content'] }}\n",
]


def compile_template(source):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def template_of(config):
    t = config["chat_template"]
    if isinstance(t, list):
        t = {x["name"]: x["template"] for x in t}["default"]
    return t


def specials_of(config):
    out = {}
    for key in SPECIALS:
        v = config.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if v:
            out[key] = v
    if config.get("additional_special_tokens"):
        out["additional_special_tokens"] = config["additional_special_tokens"]
    return out


def main():
    for name in sorted(os.listdir(HERE)):
        path = os.path.join(HERE, name, "tokenizer_config.json")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        tmpl = compile_template(template_of(config))
        out = []
        for case in CASES:
            text = tmpl.render(messages=case["messages"], tools=None, documents=None,
                               add_generation_prompt=case["add_generation_prompt"], **specials_of(config))
            out.append(dict(case, want=text))
        with open(os.path.join(HERE, name, "rendered.json"), "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2, ensure_ascii=False)
            f.write("\n")
    out = []
    for source in WHITESPACE:
        out.append({"template": source, "want": compile_template(source).render(messages=[{"role": "user", "content": " X "}])})
    with open(os.path.join(HERE, "whitespace.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=2, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
