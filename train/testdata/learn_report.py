#!/usr/bin/python3
"""`make learn-report`: what the default curriculum teaches, on the held-out
split. For each seed in SEEDS (default "1 2") it runs

    swetui run --headless run.seed=S run.max_steps=STEPS watchdog.stall_s=0 OVERRIDES

from the warm start shipped for the embedded suite (every seed from the
same one, through model.init_ckpt, so that the seeds differ in data order
and sampling only; a seed other than the shipped recipe's would otherwise
train its own), then

    swetui eval --ckpt <final checkpoint> --mode MODE --samples SAMPLES

on the 29 held-out tasks, and writes OUT/report.md: the table of the issue
(well-formed replies over all samples; predictions syntax-valid, applied and
resolved; and applied and resolved over every reply), the warm start first, plus what the training metrics say (when
each phase began, barren groups, apply rate at the start and the end of
apply-only). Measures; asserts nothing. Run it from the repository root.

Environment: STEPS (1000; 0 = no limit), MINUTES (run.max_minutes: each
run's wall-time budget; default none), SEEDS ("1 2"), SAMPLES (8), MODE (docker),
OUT (runs/learn-report), OVERRIDES (extra key=value, space-separated),
PHASE (curriculum.phase to start in; default the config's), NAME (a label),
PARALLEL=1 (run the seeds at the same time, each on a share of the cores;
the minutes are then each run's wall time under that load), WARM (a warm
start checkpoint, e.g. one `swetui sft --export` wrote, to start from
instead of the shipped one), ROLLOUT (single, or agent: rollout.mode=agent for
the runs and the evals, from agent mode's shipped warm start; its well-formed
column is then the share of trajectories that submitted).
"""
import datetime
import glob
import json
import os
import re
import subprocess
import sys
import time

STEPS = int(os.environ.get("STEPS", "1000"))
MINUTES = os.environ.get("MINUTES", "")
SEEDS = os.environ.get("SEEDS", "1 2").split()
SAMPLES = int(os.environ.get("SAMPLES", "8"))
MODE = os.environ.get("MODE", "docker")
OUT = os.path.abspath(os.environ.get("OUT", "runs/learn-report"))
OVERRIDES = os.environ.get("OVERRIDES", "").split()
PHASE = os.environ.get("PHASE", "")
NAME = os.environ.get("NAME", "")
PARALLEL = os.environ.get("PARALLEL", "") not in ("", "0")
WARM = os.path.abspath(os.environ["WARM"]) if os.environ.get("WARM") else ""
ROLLOUT = os.environ.get("ROLLOUT", "single")
GO = os.environ.get("GO", "go")
BIN = os.path.join(OUT, "swetui")


def sh(cmd, log):
    """Runs cmd with its output appended to log; returns (stdout, seconds)."""
    begin = time.time()
    with open(log, "a") as f:
        f.write("$ %s\n" % " ".join(cmd))
        f.flush()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, text=True)
        f.write(p.stdout)
    if p.returncode != 0:
        sys.exit("%s failed (exit %d); see %s" % (" ".join(cmd), p.returncode, log))
    return p.stdout, time.time() - begin


def evaluate(ckpt, tag, out_dir, log):
    preds = os.path.join(OUT, tag + ".preds.jsonl")
    stdout, secs = sh([BIN, "eval", "--ckpt", ckpt, "--mode", MODE, "--samples", str(SAMPLES), "--score-samples",
                       "--out", preds, "run.out_dir=" + out_dir, "rollout.mode=" + ROLLOUT], log)
    if ROLLOUT == "agent":
        m = re.search(r"eval: (\d+) tasks x (\d+) trajectories in agent mode \(([^)]*)\)", stdout)
        tasks, samples = int(m.group(1)), int(m.group(2))
        ends = dict((e.split()[0], int(e.split()[1])) for e in m.group(3).split(", ") if e)
        wellformed = ends.get("submitted", 0)
    else:
        m = re.search(r"eval: (\d+) tasks x (\d+) samples, (\d+) replies with a well-formed diff", stdout)
        tasks, samples, wellformed = (int(x) for x in m.groups())
    with open(preds[: -len(".jsonl")] + ".report.json") as f:
        s = json.load(f)["summary"]
    with open(preds[: -len(".jsonl")] + ".samples.report.json") as f:
        a = json.load(f)["summary"]
    n = a["total"]
    return {"tasks": tasks, "wellformed": wellformed / (tasks * samples), "syntax": s["syntax_valid"] / tasks,
            "applied": s["applied"] / tasks, "resolved": s["resolved"] / tasks,
            "counts": (s["syntax_valid"], s["applied"], s["resolved"], tasks),
            "all_applied": a["applied"] / n, "all_resolved": a["resolved"] / n, "all_counts": (a["applied"], a["resolved"], n),
            "eval_s": secs}


def training_summary(run_dir):
    rows = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            rows.append(json.loads(line))
    def when(r):  # seconds since the epoch of a row's RFC 3339 time, nanoseconds cut to micro
        t = re.sub(r"(\.\d{6})\d*", r"\1", r["time"]).replace("Z", "+00:00")
        return datetime.datetime.fromisoformat(t).timestamp()

    starts, last = {}, None
    t0 = when(rows[0]) if rows else 0
    for r in rows:
        if r["phase"] != last:
            starts[r["phase"]] = "%d (%.1f min)" % (r["step"], (when(r) - t0) / 60)
            last = r["phase"]
    apply_rows = [r for r in rows if r["phase"] == "apply-only"]

    def mean(rs, key):
        vals = [r.get(key, 0) for r in rs]
        return sum(vals) / len(vals) if vals else float("nan")

    return {"steps": len(rows), "starts": starts, "minutes": (when(rows[-1]) - t0) / 60 if rows else 0,
            "zero_std_apply": mean(apply_rows, "grpo/frac_reward_zero_std"),
            "apply_first": mean(apply_rows[:20], "reward/apply_rate"),
            "apply_last": mean(apply_rows[-20:], "reward/apply_rate"),
            "extra_samples": sum(r.get("grpo/extra_samples", 0) for r in rows),
            "sampled": sum(r.get("grpo/groups", 0) for r in rows)}


def latest_checkpoint(run_dir):
    ckpts = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "step-*")))
    if not ckpts:
        sys.exit("no checkpoint in %s" % run_dir)
    return ckpts[-1]


def pct(x):
    return "%.1f%%" % (100 * x)


def main():
    os.makedirs(OUT, exist_ok=True)
    log = os.path.join(OUT, "report.log")
    sh([GO, "build", "-o", BIN, "."], log)
    # A one-step default run writes the shipped warm start to its sft folder;
    # every seed starts from that one.
    warm_dir = os.path.join(OUT, "warmstart")
    if WARM:
        warm = WARM
        os.makedirs(warm_dir, exist_ok=True)
    else:
        sh([BIN, "run", "--headless", "run.out_dir=" + warm_dir, "run.resume=never", "run.max_steps=1", "rollout.mode=" + ROLLOUT], log)
        warm = os.path.join(warm_dir, "sft")
    if not os.path.exists(os.path.join(warm, "tokenizer.json")):
        sys.exit("%s holds no warm start: this build ships none that fits the config" % warm)
    before = evaluate(warm, "warmstart", warm_dir, log)
    def run_args(seed):
        args = [BIN, "run", "--headless", "run.seed=" + seed, "run.out_dir=" + os.path.join(OUT, "seed" + seed),
                "run.resume=never", "run.max_steps=%d" % STEPS, "watchdog.stall_s=0",
                "model.init_ckpt=" + warm, "model.tokenizer=" + os.path.join(warm, "tokenizer.json"), "rollout.mode=" + ROLLOUT]
        if MINUTES:
            args.append("run.max_minutes=" + MINUTES)
        if PHASE:
            args.append("curriculum.phase=" + PHASE)
        return args + OVERRIDES

    secs = {}
    if PARALLEL:  # all seeds at once: each run has a share of the cores
        begin, procs = time.time(), {}
        for seed in SEEDS:
            procs[seed] = subprocess.Popen(run_args(seed), stdout=open(os.path.join(OUT, "seed%s.log" % seed), "w"),
                                           stderr=subprocess.STDOUT)
        for seed, p in procs.items():
            if p.wait() != 0:
                sys.exit("seed %s failed (exit %d); see %s" % (seed, p.returncode, os.path.join(OUT, "seed%s.log" % seed)))
            secs[seed] = time.time() - begin
    results = []
    for seed in SEEDS:
        run_dir = os.path.join(OUT, "seed" + seed)
        if not PARALLEL:
            _, secs[seed] = sh(run_args(seed), log)
        after = evaluate(latest_checkpoint(run_dir), "seed" + seed, run_dir, log)
        results.append((seed, secs[seed], after, training_summary(run_dir)))

    lines = ["# Learning report%s" % (": " + NAME if NAME else ""), "",
             "`%s%s%sSTEPS=%d SEEDS=\"%s\" SAMPLES=%d MODE=%s PHASE=%s PARALLEL=%d OVERRIDES=\"%s\" make learn-report`, %s." % (
                 "ROLLOUT=agent " if ROLLOUT == "agent" else "",
                 "WARM=%s " % os.environ["WARM"] if WARM else "", "MINUTES=%s " % MINUTES if MINUTES else "", STEPS, " ".join(SEEDS), SAMPLES, MODE, PHASE or "(config)", PARALLEL, " ".join(OVERRIDES),
                 time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())),
             "Held-out split, %d tasks; well-formed over %d replies a task, the rest over the first reply "
             "(the prediction), scored in mode %s." % (before["tasks"], SAMPLES, MODE), "",
             "| | run | well-formed replies | predictions syntax-valid | applied | resolved | every reply: applied | every reply: resolved |",
             "|---|---|---|---|---|---|---|---|"]

    def row(label, secs, r):
        return "| %s | %s | %s | %s | %s (%d) | %s (%d) | %s | %s |" % (
            label, "%.1f min" % (secs / 60) if secs else "", pct(r["wellformed"]), pct(r["syntax"]),
            pct(r["applied"]), r["counts"][1], pct(r["resolved"]), r["counts"][2], pct(r["all_applied"]),
            pct(r["all_resolved"]))

    lines.append(row("warm start", 0, before))
    for seed, secs, r, t in results:
        lines.append(row("seed %s, %d steps" % (seed, t["steps"]), secs, r))
    lines += ["", "| seed | phase starts (step) | barren groups in apply-only | apply rate, first/last 20 apply-only steps | groups drawn | extra samples |",
              "|---|---|---|---|---|---|"]
    for seed, _, _, t in results:
        starts = ", ".join("%s %s" % kv for kv in t["starts"].items())
        lines.append("| %s | %s | %s | %.2f / %.2f | %d | %d |" % (seed, starts, pct(t["zero_std_apply"]),
                                                             t["apply_first"], t["apply_last"], t["sampled"],
                                                             t["extra_samples"]))
    report = "\n".join(lines) + "\n"
    with open(os.path.join(OUT, "report.md"), "w") as f:
        f.write(report)
    with open(os.path.join(OUT, "report.json"), "w") as f:
        json.dump({"before": before, "after": [{"seed": s, "run_s": secs, "eval": r, "training": t}
                                               for s, secs, r, t in results]}, f, indent=1)
    print(report)


if __name__ == "__main__":
    main()
