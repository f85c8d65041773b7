#!/usr/bin/env python3
"""A small agent loop over swetui serve's sessions (standard library only).

The "policy" here is a list of scripted replies; put your model's generate() in its place.
Each reply holds one ```bash block (or SUBMIT): the command runs in the task's sandbox and its
output is the next turn's message, as swetui's own agent mode does.

    python3 agent_loop.py --url http://127.0.0.1:8765 --instance mini__juniper-0000 --gold
"""

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from swetui_client import Client  # noqa: E402

BASH = re.compile(r"```(?:bash|sh|shell)?[ \t]*\n(.*?)```", re.S)


def run_episode(session, policy, max_turns=30):
    """Plays policy (messages -> reply) in session until it submits or max_turns; returns the
    verdict (None if it never submitted) and the conversation."""
    messages = [{"role": "user", "content": session.problem_statement}]
    for _ in range(max_turns):
        reply = policy(messages)
        messages.append({"role": "assistant", "content": reply})
        blocks = BASH.findall(reply)
        if not blocks and reply.strip().endswith("SUBMIT"):
            return session.submit(), messages
        if len(blocks) != 1:
            messages.append({"role": "user", "content": "Reply with exactly one ```bash block, or SUBMIT."})
            continue
        out = session.exec(blocks[0].strip(), timeout_s=60)
        messages.append({"role": "tool", "content": f"exit code {out['exit_code']}\n{out['output']}"})
    return None, messages


def scripted(replies):
    it = iter(replies)
    return lambda messages: next(it)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default=None)
    ap.add_argument("--instance", required=True)
    ap.add_argument("--gold", action="store_true", help="play the task's gold patch (it must resolve)")
    args = ap.parse_args()
    client = Client(args.url)
    replies = ["```bash\nls\n```", "SUBMIT"]
    if args.gold:
        task = next(t for t in client.tasks(full=True) if t["instance_id"] == args.instance)
        replies = ["Let me look.\n```bash\ngit status --short\n```",
                   "```bash\ncat > /tmp/fix.patch <<'EOF'\n" + task["patch"] + "EOF\ngit apply /tmp/fix.patch && echo applied\n```",
                   "SUBMIT"]
    with client.session(args.instance) as s:
        verdict, messages = run_episode(s, scripted(replies))
    print(json.dumps({"resolved": verdict["resolved"], "reward": verdict["reward"], "turns": len(messages) // 2,
                      "observations": [m["content"] for m in messages if m["role"] == "tool"]}))


if __name__ == "__main__":
    main()
