#!/usr/bin/env python3
"""Client for `swetui serve`: swetui's reward engine over HTTP. Standard library only.

    from swetui_client import Client

    client = Client("http://127.0.0.1:8765")  # token: token=... or $SWETUI_SERVE_TOKEN
    verdicts = client.score(["diff --git a/x.py b/x.py\n..."], instance_id="mini__juniper-0000")
    rewards = [v["reward"] for v in verdicts]

Each verdict is the JSON of swetui's rollouts.jsonl verdicts: reward, resolved, applied,
f2p_passed/f2p_total, p2p_*, hacks, infra_failure (an evaluation that failed for reasons that
are not the patch's: mask it, do not score it 0), ...

Answers 429 (queue full) and 503 (server stopping or restarting) are retried after the
server's Retry-After, and connection errors with a backoff, until max_wait seconds have passed.
Scoring is idempotent, so a retried request is never counted twice.

With `swetui serve --verifier DIR`, client.verify(patches, instance_id=...) is the learned
verifier's probability that each patch resolves the task, none of them run.

Agent sessions: a confined sandbox of a task where your agent runs commands, then a verdict
of its diff (graded as score() grades a patch, in a fresh sandbox):

    with client.session("mini__juniper-0000") as s:
        print(s.problem_statement)
        out = s.exec("grep -rn count_late .")       # exit_code, output, timed_out, ...
        verdict = s.submit()                        # ends the session

As a command:

    python3 swetui_client.py predictions preds.jsonl --phase docker --concurrency 16 --out results.jsonl
    python3 swetui_client.py predictions gold          # every task's gold patch
    python3 swetui_client.py verify preds.jsonl        # the server's verifier's scores, none run
    python3 swetui_client.py tasks --split test
    python3 swetui_client.py health
"""

import argparse
import json
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

DEFAULT_URL = "http://127.0.0.1:8765"
PHASES = ("syntax", "apply-only", "docker")


class ServeError(Exception):
    """An answer that is not a 200 and not retried (or retried until max_wait)."""

    def __init__(self, status, message):
        super().__init__(f"swetui serve: {status}: {message}")
        self.status = status
        self.message = message


class Client:
    """A client of one server. Thread-safe: share one between threads."""

    def __init__(self, url=None, token=None, timeout=1900.0, max_wait=900.0):
        self.url = (url or os.environ.get("SWETUI_SERVE_URL") or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else os.environ.get("SWETUI_SERVE_TOKEN", "")
        self.timeout = timeout  # one HTTP exchange (above serve.request_timeout_s)
        self.max_wait = max_wait  # retrying 429, 503 and connection errors, in all
        self._lock = threading.Lock()
        self.retries = 0  # requests sent again, summed over threads
        self.refused = {}  # status -> how many answers were retried

    def _count(self, status):
        with self._lock:
            self.retries += 1
            self.refused[status] = self.refused.get(status, 0) + 1

    def request(self, method, path, body=None, retry=True):
        """Send one API request and return its decoded JSON answer (None for 204), retrying as
        above; with retry=False (a command, which must not run twice) only the answer is waited for."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        deadline = time.monotonic() + self.max_wait
        attempt = 0
        while True:
            attempt += 1
            req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    raw = resp.read()
                    return json.loads(raw) if raw else None
            except urllib.error.HTTPError as e:
                raw = e.read()
                try:
                    answer = json.loads(raw)
                except ValueError:
                    answer = {"error": raw.decode(errors="replace")}
                if e.code not in (429, 503) or not retry:
                    raise ServeError(e.code, answer.get("error", "")) from None
                delay = answer.get("retry_after_s") or _seconds(e.headers.get("Retry-After")) or 1.0
                status = e.code
            except (urllib.error.URLError, ConnectionError) as e:
                # Not up yet, restarting, or the connection was cut.
                delay, status = min(0.25 * 2 ** min(attempt, 5), 5.0), "connection"
                if not retry or time.monotonic() + delay > deadline:
                    raise ServeError("connection", str(e)) from None
            # Jitter spreads the retries of many threads refused at once; a
            # request refused again and again backs off up to 3x the hint.
            delay *= random.uniform(1.0, 1.5) * min(1 + 0.25 * (attempt - 1), 3.0)
            if time.monotonic() + delay > deadline:
                raise ServeError(status, f"still refused after {self.max_wait:.0f}s of retries")
            self._count(status)
            time.sleep(delay)

    def score(self, patches, instance_id=None, instance=None, phase="docker", no_cache=False):
        """Score patches (a list of diffs) of one task: an instance_id of the server's dataset, or
        a whole SWE-bench instance (a dict). One verdict per patch, in order."""
        if phase not in PHASES:
            raise ValueError(f"phase {phase!r}: want one of {', '.join(PHASES)}")
        body = {"patches": list(patches), "phase": phase}
        if instance is not None:
            body["instance"] = instance
        else:
            body["instance_id"] = instance_id
        if no_cache:
            body["no_cache"] = True
        return self.request("POST", "/v1/score", body)["verdicts"]

    def verify(self, patches, instance_id=None, instance=None):
        """The server's learned verifier (`swetui serve --verifier DIR`): for each patch, the
        probability that it resolves the task, none of them run. A server without a verifier
        answers 404 (ServeError)."""
        body = {"patches": list(patches)}
        if instance is not None:
            body["instance"] = instance
        else:
            body["instance_id"] = instance_id
        return self.request("POST", "/v1/verify", body)["scores"]

    def rewards(self, patches, instance_id=None, instance=None, phase="docker"):
        """The rewards of score(), None where the evaluation failed for infrastructure reasons (not
        the patch's fault: mask it if the trainer can; TRL takes None as "no reward from this function")."""
        verdicts = self.score(patches, instance_id=instance_id, instance=instance, phase=phase)
        return [None if v.get("infra_failure") else v["reward"] for v in verdicts]

    def tasks(self, split=None, full=False):
        """The server's tasks (instance_id, repo, split, problem_statement, ...); full=True gives
        whole instances, gold patches included."""
        query = []
        if split:
            query.append("split=" + split)
        if full:
            query.append("full=1")
        return self.request("GET", "/v1/tasks" + ("?" + "&".join(query) if query else ""))["tasks"]

    def health(self):
        return self.request("GET", "/healthz")

    def session(self, instance_id):
        """Open an agent session on a task of the server's dataset (see Session)."""
        return Session(self, instance_id)


class Session:
    """An agent session: a confined sandbox of one task (no network, the repository at its base
    commit, the tests' new files absent) where commands run one at a time. submit() grades the
    work tree's diff, as swetui computes it, and ends the session; used as a context manager it
    is deleted on exit if not submitted. Sessions unused for serve.session_idle_s are reaped."""

    def __init__(self, client, instance_id):
        self.client = client
        answer = client.request("POST", "/v1/sessions", {"instance_id": instance_id})
        self.id = answer["session_id"]
        self.instance_id = answer["instance_id"]
        self.problem_statement = answer["problem_statement"]
        self.workdir = answer["workdir"]
        self.done = False

    def exec(self, command, timeout_s=None):
        """Run a shell command line in the work tree: {exit_code, output (head and tail),
        output_bytes, output_cut, timed_out, duration_s}. A command past its timeout (at most
        serve.exec_timeout_s) is killed with everything it started. Never retried."""
        body = {"command": command}
        if timeout_s:
            body["timeout_s"] = timeout_s
        return self.client.request("POST", f"/v1/sessions/{self.id}/exec", body, retry=False)

    def submit(self, phase="docker"):
        """Grade the session's diff in a fresh sandbox and end the session: the verdict, as
        score() returns one."""
        if phase not in PHASES:
            raise ValueError(f"phase {phase!r}: want one of {', '.join(PHASES)}")
        self.done = True
        return self.client.request("POST", f"/v1/sessions/{self.id}/submit", {"phase": phase}, retry=False)["verdicts"][0]

    def close(self):
        """End the session without grading it (nothing to do once submitted)."""
        if self.done:
            return
        self.done = True
        try:
            self.client.request("DELETE", f"/v1/sessions/{self.id}", retry=False)
        except ServeError as e:
            if e.status != 404:  # reaped already
                raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _seconds(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _read_predictions(client, path):
    if path in ("gold", "empty"):
        return [{"instance_id": t["instance_id"], "model_name_or_path": path,
                 "model_patch": t["patch"] if path == "gold" else ""} for t in client.tasks(full=True)]
    with open(path, encoding="utf-8-sig") as f:
        text = f.read()
    if path.endswith(".json") and text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _each_prediction(client, args, key, ask):
    """Ask the server about each prediction of args.predictions, args.concurrency at once, and
    write a result a line to args.out: the prediction's ids and ask's answer under key, or the
    error. Returns the predictions, the results and when it started."""
    preds = _read_predictions(client, args.predictions)
    start = time.monotonic()

    def one(p):
        ids = {"instance_id": p["instance_id"], "model_name_or_path": p.get("model_name_or_path", "")}
        try:
            return {**ids, key: ask(p.get("model_patch") or "", p["instance_id"])}
        except ServeError as e:
            return {**ids, "error": str(e), "status": e.status}

    with ThreadPoolExecutor(max_workers=max(args.concurrency, 1)) as pool:
        results = list(pool.map(one, preds))
    out = open(args.out, "w") if args.out != "-" else sys.stdout
    for r in results:
        out.write(json.dumps(r) + "\n")
    if out is not sys.stdout:
        out.close()
    return preds, results, start


def _predictions(client, args):
    preds, results, start = _each_prediction(
        client, args, "verdict", lambda patch, iid: client.score([patch], instance_id=iid, phase=args.phase)[0])
    verdicts = [r["verdict"] for r in results if "verdict" in r]
    scored = [v for v in verdicts if not v.get("infra_failure")]
    mean = sum(v["reward"] for v in scored) / len(scored) if scored else float("nan")
    print(f"scored {len(verdicts)} of {len(preds)} predictions in phase {args.phase}: "
          f"resolved {sum(v['resolved'] for v in verdicts)}, applied {sum(v['applied'] for v in verdicts)}, "
          f"infra {len(verdicts) - len(scored)}, errors {len(results) - len(verdicts)}, mean reward {mean:.4f}; "
          f"retried {client.retries} times {json.dumps(client.refused)}, {time.monotonic() - start:.1f}s",
          file=sys.stderr)
    return 0 if len(verdicts) == len(preds) else 1


def _verify(client, args):
    preds, results, start = _each_prediction(
        client, args, "score", lambda patch, iid: client.verify([patch], instance_id=iid)[0])
    scores = [r["score"] for r in results if "score" in r]
    mean = sum(scores) / len(scores) if scores else float("nan")
    print(f"verified {len(scores)} of {len(preds)} predictions: mean score {mean:.4f}, "
          f"errors {len(results) - len(scores)}; {time.monotonic() - start:.1f}s", file=sys.stderr)
    return 0 if len(scores) == len(preds) else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description="Client of swetui serve.")
    ap.add_argument("--url", default=None, help=f"server (default $SWETUI_SERVE_URL or {DEFAULT_URL})")
    ap.add_argument("--max-wait", type=float, default=900.0, help="seconds of retrying 429/503/connection errors")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("predictions", help="score a SWE-bench predictions file (or gold, empty), one request each")
    p.add_argument("predictions")
    p.add_argument("--phase", default="docker", choices=PHASES)
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight at once")
    p.add_argument("--out", default="-", help="results, one JSON line per prediction (- for stdout)")
    v = sub.add_parser("verify", help="the server's verifier's score of each prediction (or gold, empty), none run")
    v.add_argument("predictions")
    v.add_argument("--concurrency", type=int, default=8, help="requests in flight at once")
    v.add_argument("--out", default="-", help="results, one JSON line per prediction (- for stdout)")
    t = sub.add_parser("tasks", help="list the server's tasks")
    t.add_argument("--split", default=None)
    sub.add_parser("health", help="the server's /healthz")
    args = ap.parse_args(argv)
    client = Client(args.url, max_wait=args.max_wait)
    if args.cmd == "predictions":
        return _predictions(client, args)
    if args.cmd == "verify":
        return _verify(client, args)
    if args.cmd == "tasks":
        for task in client.tasks(split=args.split):
            print(json.dumps(task))
        return 0
    print(json.dumps(client.health(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
