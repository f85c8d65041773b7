#!/usr/bin/python3
"""`make bench`: the default model's speed, pure Go, OpenBLAS and PyTorch side
by side. Runs ROUNDS (default 3) interleaved rounds of

    go test ./model -run '^$' -bench . -benchtime 5x
    CGO_ENABLED=1 go test -tags blas ./model -run '^$' -bench . -benchtime 5x
    /usr/bin/python3 model/testdata/torch_bench.py 5 THREADS
    /usr/bin/python3 model/testdata/torch_decode.py 2 THREADS

(PyTorch with 2 threads, as the issue measured it, and with 1 thread: its
thread pool loses more than it gains on a busy 2-core box, and one thread
is the stronger baseline) and prints min..max of each figure over the
rounds. Run it from the repository
root. Benchmarks measure; nothing here asserts.
"""
import os
import re
import subprocess
import sys

ROUNDS = int(os.environ.get("ROUNDS", "3"))
GO = os.environ.get("GO", "go")
HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = [
    ("training step, 4x256 tokens", "BenchmarkTrainStep", "train"),
    ("forward only", "BenchmarkLogprobs", "forward"),
    ("sampling G=4, prompt 256, 128 new", "BenchmarkSample/prompt=256", "sample256"),
    ("sampling G=4, prompt 768, 128 new", "BenchmarkSample/prompt=768", "sample768"),
]


def run(cmd, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(cmd, capture_output=True, text=True, env=e)
    if p.returncode != 0:
        sys.stderr.write("%s failed:\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
        return ""
    return p.stdout


def gobench(tags):
    cmd = [GO, "test"] + (["-tags", tags] if tags else []) + ["./model", "-run", "^$", "-bench", ".", "-benchtime", "5x"]
    out = run(cmd, {"CGO_ENABLED": "1"} if tags else None)
    res = {}
    for line in out.splitlines():
        f = line.split()
        if not f or not f[0].startswith("Benchmark"):
            continue
        name = re.sub(r"-\d+$", "", f[0])
        res[name] = {f[i + 1]: float(f[i]) for i in range(2, len(f) - 1) if re.match(r"^[\d.]+$", f[i])}
    return res


def torch(threads):
    res = {}
    out = run(["/usr/bin/python3", os.path.join(HERE, "torch_bench.py"), "5", str(threads)])
    m = re.search(r"train step [\d.]+ s, (\d+) tokens/s; forward [\d.]+ s, (\d+) tokens/s", out)
    if m:
        res["train"], res["forward"] = float(m.group(1)), float(m.group(2))
    out = run(["/usr/bin/python3", os.path.join(HERE, "torch_decode.py"), "2", str(threads)])
    for p, tps in re.findall(r"prompt=(\d+) new=\d+: (\d+) tokens/s", out):
        res["sample" + p] = float(tps)
    return res


def have_torch():
    return subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode == 0


def span(vals, fmt="%.0f"):
    if not vals:
        return "n/a"
    lo, hi = min(vals), max(vals)
    return (fmt % lo) if fmt % lo == fmt % hi else "%s-%s" % (fmt % lo, fmt % hi)


def main():
    goc = {"": [], "blas": []}
    tch = []
    peak = []
    with_torch = have_torch()
    if not with_torch:
        sys.stderr.write("PyTorch missing (apt-get install python3-torch): its column is n/a\n")
    for r in range(ROUNDS):
        sys.stderr.write("round %d/%d\n" % (r + 1, ROUNDS))
        for tags in ("", "blas"):
            res = gobench(tags)
            goc[tags].append(res)
            if "BenchmarkFMAPeak" in res:
                peak.append(res["BenchmarkFMAPeak"].get("peak-GFLOP/s", 0))
        if with_torch:
            tch.append({th: torch(th) for th in (2, 1)})

    # One peak for the whole table: the best round's, as a busy box only
    # ever lowers a measurement.
    top = max(peak) if peak else 0

    def cell(runs, bench):
        tps = [x[bench]["tokens/s"] for x in runs if bench in x]
        g = [x[bench]["GFLOP/s"] for x in runs if bench in x]
        if not tps:
            return "n/a"
        share = " %s%%" % span([100 * v / top for v in g]) if top else ""
        return "%s tok/s (%s GFLOP/s,%s)" % (span(tps), span(g), share)

    print()
    print("Default model, %d interleaved rounds; measured fp32 FMA peak %s GFLOP/s (one core's best x cores)"
          % (ROUNDS, span(peak)))
    print("GFLOP/s counts useful work (matmuls, causal attention); %% is its share of the best peak, %.0f GFLOP/s."
          % top)
    print()
    def tvals(key, th):
        return [x[th][key] for x in tch if key in x[th]]

    print("| | pure Go | OpenBLAS | PyTorch 1.13, 2 threads | PyTorch 1.13, 1 thread |")
    print("|---|---|---|---|---|")
    for label, bench, key in ROWS:
        t2, t1 = tvals(key, 2), tvals(key, 1)
        print("| %s | %s | %s | %s | %s |" % (label, cell(goc[""], bench), cell(goc["blas"], bench),
                                              span(t2) + " tok/s" if t2 else "n/a", span(t1) + " tok/s" if t1 else "n/a"))
    print()
    print("Ratios to PyTorch (worst round over its worst, best over its best):")
    for label, bench, key in ROWS:
        parts = []
        for th in (2, 1):
            tv = tvals(key, th)
            if not tv:
                continue
            for name, runs in (("pure Go", goc[""]), ("OpenBLAS", goc["blas"])):
                gv = [x[bench]["tokens/s"] for x in runs if bench in x]
                if gv:
                    parts.append("%s %.1f-%.1fx" % (name, min(gv) / min(tv), max(gv) / max(tv)))
            parts[-2] = "vs %d thread%s: " % (th, "s" if th > 1 else "") + parts[-2]
        if parts:
            print("  %s: %s" % (label, ", ".join(parts)))


if __name__ == "__main__":
    main()
