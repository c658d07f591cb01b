"""rkv's chat-template rendering against Jinja2 itself on random conversations: every template of
../shared/golden/chat_templates (templates/ and templates_extra/) rendered with conversations
made by mutating the corpus' ten (a message dropped, a turn added, contents changed, None or
split into parts, tool-call arguments as a JSON string or nested values of every JSON type, a
system or developer message inserted, reasoning content added, tools dropped or added, names
added, long texts) under random switches (add_generation_prompt, enable_thinking, thinking,
reasoning_effort, builtin_tools, tools_in_user_message). The oracle is Debian's python3-jinja2 in
the environment the corpus' README describes for transformers' apply_chat_template (an immutable
sandbox, trim_blocks, lstrip_blocks, loop controls, {% generation %} rendering its body, tojson as
json.dumps, raise_exception, strftime_now at 2026-01-15 12:00:00). Each render must give the same
text through `rkv chat-template`, or fail in both.

Usage: chat_template_diff_check.py --rkv RKV [--shared DIR] [--per-template N] [--seed S]
Exits 77 (a skip for ctest) when ../shared is absent, 1 on any difference.
"""
import argparse
import copy
import glob
import json
import os
import random
import subprocess
import sys
import tempfile
from datetime import datetime

from shared_dir import shared_dir

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError as e:  # python3-jinja2: scripts/setup.sh installs it
    sys.exit(f"chat_template_diff_check: {e} (Debian's python3-jinja2; scripts/setup.sh installs it)")


class Generation(Extension):
    """{% generation %}...{% endgeneration %} renders its body unchanged."""
    tags = {"generation"}

    def parse(self, parser):
        next(parser.stream)
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.Scope(body)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime(2026, 1, 15, 12, 0, 0).strftime(fmt)
    return env


TEXTS = ["Hi", "", " ", "line1\nline2", "Ünïcødé ✓ 中文", "<think>x</think>", '{"a": 1}', "it's",
         "a  b\t c", "\n", "Answer: 42.", "<|im_end|>"]
SWITCHES = [{}, {"enable_thinking": False}, {"enable_thinking": True},
            {"reasoning_effort": "high"}, {"builtin_tools": ["browser", "python"]},
            {"thinking": True}, {"tools_in_user_message": False}]


def mutate(rng, conv, tool_schemas):
    msgs = copy.deepcopy(conv["messages"])
    tools = copy.deepcopy(conv.get("tools"))
    docs = copy.deepcopy(conv.get("documents"))
    op = rng.randrange(14)
    strings = [m for m in msgs if isinstance(m.get("content"), str)]
    if op == 0 and len(msgs) > 1:
        del msgs[rng.randrange(len(msgs))]
    elif op == 1 and strings:
        rng.choice(strings)["content"] = rng.choice(TEXTS)
    elif op == 2:
        msgs.append({"role": "user", "content": rng.choice(TEXTS)})
    elif op == 3:
        msgs.append({"role": "assistant", "content": rng.choice(TEXTS)})
    elif op == 4:
        for m in msgs:
            for call in m.get("tool_calls") or []:
                f = call.get("function", {})
                if isinstance(f.get("arguments"), dict):
                    f["arguments"] = json.dumps(f["arguments"])
    elif op == 5 and msgs and msgs[0].get("role") != "system":
        msgs.insert(0, {"role": "system", "content": rng.choice(TEXTS)})
    elif op == 6:
        for m in reversed(msgs):
            if m.get("role") == "assistant":
                m["reasoning_content"] = rng.choice(TEXTS)
                break
    elif op == 7:
        tools = None if tools else tool_schemas
    elif op == 8:
        rng.choice(msgs)["content"] = None
    elif op == 9 and strings:
        m = rng.choice(strings)
        m["content"] = [{"type": "text", "text": m["content"]},
                        {"type": "text", "text": rng.choice(TEXTS)}]
    elif op == 10:
        for m in msgs:
            for call in m.get("tool_calls") or []:
                call.setdefault("function", {})["arguments"] = {
                    "s": 'é"\\\n', "n": 1.5, "i": -3, "b": True, "z": None,
                    "l": [1, "two", {"x": []}], "d": {}}
    elif op == 11:
        msgs.insert(rng.randrange(len(msgs) + 1), {"role": "developer", "content": rng.choice(TEXTS)})
    elif op == 12 and strings:
        rng.choice(strings)["content"] = "word " * 300 + "\n" * 3
    elif op == 13:
        for m in msgs:
            m["name"] = "n" + str(rng.randrange(3))
    return msgs, tools, docs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rkv", required=True)
    ap.add_argument("--shared", default=shared_dir())
    ap.add_argument("--per-template", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    corpus = os.path.join(a.shared, "golden", "chat_templates")
    if not os.path.isdir(corpus):
        print(f"SKIP: {corpus} is absent (../shared is not beside the repository)")
        sys.exit(77)
    env = make_env()
    tokens = {}
    with open(os.path.join(corpus, "cases.jsonl"), encoding="utf-8") as f:
        for line in f:
            c = json.loads(line)
            tokens[c["template"]] = (c["bos_token"], c["eos_token"])
    convs = []
    for path in sorted(glob.glob(os.path.join(corpus, "conversations", "*.json"))):
        with open(path, encoding="utf-8") as f:
            convs.append(json.load(f))
    tool_schemas = next(c["tools"] for c in convs if c.get("tools"))
    templates = (sorted(glob.glob(os.path.join(corpus, "templates", "*.jinja"))) +
                 sorted(glob.glob(os.path.join(corpus, "templates_extra", "*.jinja"))))
    rng = random.Random(a.seed)
    same = both_fail = 0
    differ = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in templates:
            with open(path, encoding="utf-8") as f:
                source = f.read()
            name = os.path.basename(path)
            bos, eos = tokens.get(name, ("<s>", "</s>"))
            for _ in range(a.per_template):
                msgs, tools, docs = mutate(rng, rng.choice(convs), tool_schemas)
                agp = rng.random() < 0.5
                extra = rng.choice(SWITCHES)
                bind = dict(messages=msgs, tools=tools, documents=docs, add_generation_prompt=agp)
                if bos is not None:
                    bind["bos_token"] = bos
                if eos is not None:
                    bind["eos_token"] = eos
                bind.update(extra)
                try:
                    want = env.from_string(source).render(**bind)
                except Exception:  # any failure of the template counts as one
                    want = None
                cmd = [a.rkv, "chat-template", "--template", path, "--date", "2026-01-15"]
                for flag, value in (("--messages", msgs), ("--tools", tools),
                                    ("--documents", docs)):
                    if value is None and flag != "--messages":
                        continue
                    file = os.path.join(tmp, flag.strip("-") + ".json")
                    with open(file, "w", encoding="utf-8") as f:
                        json.dump(value, f)
                    cmd += [flag, file]
                if agp:
                    cmd.append("--add-generation-prompt")
                if extra:
                    cmd += ["--kwargs", json.dumps(extra)]
                if bos is not None:
                    cmd += ["--bos-token", bos]
                if eos is not None:
                    cmd += ["--eos-token", eos]
                r = subprocess.run(cmd, capture_output=True)
                got = r.stdout.decode("utf-8") if r.returncode == 0 else None
                if want is None and got is None:
                    both_fail += 1
                elif want is not None and got == want:
                    same += 1
                else:
                    differ.append((name, msgs, agp, extra, want, got, r.stderr.decode()[-300:]))
    for name, msgs, agp, extra, want, got, err in differ[:5]:
        print(f"DIFFERS: {name} add_generation_prompt={agp} {extra}\n  messages {json.dumps(msgs)[:400]}"
              f"\n  Jinja2: {want!r:.300}\n  rkv:    {got!r:.300} {err}")
    print(f"{len(templates)} templates, {same + both_fail + len(differ)} renders: {same} equal, "
          f"{both_fail} failing in both, {len(differ)} different")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
