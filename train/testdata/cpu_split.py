#!/usr/bin/python3
"""Where a busy box's CPU goes while swetui trains: run it beside a run,

    python3 train/testdata/cpu_split.py 90

and it prints, for that many seconds, the CPU seconds the whole machine
spent busy, those of the processes in Docker's containers (the cgroup v1
cpuacct of "docker", which keeps the time of containers already removed),
and those of each command name, a process's children included once they are
reaped (so Docker's short-lived helpers, runc, the shims and
fuse-overlayfs, show under whoever reaped them: PID 1 here). Linux with
cgroup v1 only. Measures; asserts nothing.
"""
import os
import sys
import time

DOCKER = "/sys/fs/cgroup/cpuacct/docker/cpuacct.usage"


def procs():
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                s = f.read()
        except OSError:
            continue
        comm = s[s.index("(") + 1 : s.rindex(")")]
        f = s[s.rindex(")") + 2 :].split()
        out[int(p)] = (comm, int(f[11]) + int(f[12]) + int(f[13]) + int(f[14]))  # own and reaped children's
    return out


def busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)


def docker():
    try:
        with open(DOCKER) as f:
            return int(f.read()) / 1e9
    except OSError:
        return float("nan")


def main():
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 60
    hz = os.sysconf("SC_CLK_TCK")
    p0, b0, d0 = procs(), busy(), docker()
    time.sleep(secs)
    p1, b1, d1 = procs(), busy(), docker()
    by = {}
    for pid, (comm, t) in p1.items():
        before = p0[pid][1] if pid in p0 and p0[pid][0] == comm else 0
        by[comm] = by.get(comm, 0) + t - before
    print("%.0f s: busy %.1f CPU-s of %.1f" % (secs, (b1[0] - b0[0]) / hz, (b1[1] - b0[1]) / hz))
    print("in Docker's containers: %.1f CPU-s" % (d1 - d0))
    for comm, t in sorted(by.items(), key=lambda x: -x[1])[:12]:
        print("%-24s %.1f CPU-s" % (comm, t / hz))


if __name__ == "__main__":
    main()
