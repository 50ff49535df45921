# -*- coding: utf-8 -*-
"""Pure helpers for running a job with `mlx.launch` and reading what it said.

`launch_argv()` builds the launcher command; `read_result()` finds the job's one JSON line
and maps `mlx.launch`'s "Node with rank N ..." lines to inventory hosts, so a failure names
the Mac, not a rank number; `describe_failed()` and `failure_lines()` word the failure
message; `rdma_failure()` recognises a launch whose RDMA could not be brought up (a rank exited
with RDMA_EXIT) and names the Macs and cables to replug. (Leftover processes of one run are
found by its run id with mlx_run's `processes_with()`.)
"""

from __future__ import annotations

import json
import re

# MLX's distributed backends the toolkit plans and launches, best first. The one list: the
# planner (controller) and the server's spec (on a Mac) import it; the YAML that must name
# them (roles/mlx_cluster/meta/argument_specs.yml, validate.yml) is checked against it by
# tests/unit/plugin_utils/test_plan_step.py.
BACKENDS = ("jaccl", "jaccl-ring", "ring")

# mlx.launch's --starting-port default (mlx/_distributed_utils/launch.py): the ring backend's
# first port (one more per rank and address), the JACCL coordinator's port. The toolkit's
# benchmark and collective check launch with it; the port check probes exactly these ports.
STARTING_PORT = 32323

RANK_LINE = re.compile(r"Node with rank (\d+) (exited with code (-?\d+)|was killed)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
LAUNCHER_LOG = re.compile(r"\[(INFO|WARN|ERROR)\] ")
# The deployed programs' exit code when RDMA could not be brought up: init is never retried for
# it, and the ring backend over the same cables may still work. Its other copy is EXIT_RDMA in
# roles/mlx_cluster/files/mlx_cluster_startup.py (a deployed program cannot import this room;
# tests/unit/module_utils/test_init_recovery.py holds the two equal).
RDMA_EXIT = 8
RDMA_BACKENDS = ("jaccl", "jaccl-ring")
RDMA_FIX = (
    "replug the Thunderbolt cables named (both ends); if that does not help, reboot the "
    "Mac(s) named; check `rdma_ctl status` (enabled) and `ibv_devinfo` (PORT_ACTIVE) on them"
)
_RDMA_NAME = re.compile(r"\brdma_[A-Za-z0-9]+")

# A progress line of a job the roles launch: `[rank R/N host] warm-up i/N: ...` or
# `[rank R/N host] trial i/N: ...` (roles/benchmark/files/mlx_cluster_bench.py logs one per
# warm-up and per timed trial on each rank's standard error; mlx.launch runs the ranks under
# `ssh -tt`, so they reach the launcher's standard output, ended by "\r\n").
PROGRESS_LINE = re.compile(r"\[rank (\d+)/(\d+) ([^\]\s]*)\] ((warm-up|trial) (\d+)/(\d+)\b.*)$")
# mlx_launch's defaults: seconds the job may take, seconds each host gets to answer the SSH check.
DEFAULT_TIMEOUT = 600
DEFAULT_SSH_CHECK_TIMEOUT = 10
# What `ssh` exits with when the remote command died of a signal (or the connection failed):
# the code `mlx.launch` reports for a rank that was killed on its Mac.
SSH_DIED = 255


def launch_argv(launcher, hostfile, backend, python, script, args=(), env=()):
    argv = [launcher, "--hostfile", hostfile]
    if backend:
        argv += ["--backend", backend]
    if python:
        argv += ["--python", python]
    for e in env:
        argv += ["--env", e]
    return argv + ["--", script, *args]


def hostfile_hosts(hostfile):
    """Rank-ordered ssh names of a parsed MLX hostfile (dict or list form)."""
    hosts = hostfile.get("hosts") if isinstance(hostfile, dict) else hostfile
    if not isinstance(hosts, list) or not hosts:
        raise ValueError("the hostfile lists no hosts")
    names = []
    for i, h in enumerate(hosts):
        if not isinstance(h, dict) or not isinstance(h.get("ssh"), str):
            raise ValueError(f"hostfile entry {i} has no 'ssh' name")
        names.append(h["ssh"])
    return names


def read_result(stdout, stderr, hosts):
    """-> {"result": dict|None, "failed": [{"rank", "host", "code"|None, "killed"}]}"""
    result = None
    for line in (stdout or "").splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                result = json.loads(line)
            except ValueError:
                continue
    failed = []
    for m in RANK_LINE.finditer((stderr or "") + "\n" + (stdout or "")):
        rank = int(m.group(1))
        failed.append(
            {
                "rank": rank,
                "host": hosts[rank] if rank < len(hosts) else None,
                "code": int(m.group(3)) if m.group(3) is not None else None,
                "killed": m.group(3) is None,
            }
        )
    return {"result": result, "failed": failed}


def describe_failed(failed):
    """read_result()'s failed ranks in words: "rank 1 (m2) exited with 3, ..."."""
    words = []
    for f in failed:
        if f["killed"]:
            how = "was killed"
        elif f["code"] == SSH_DIED:
            how = (
                f"exited with {SSH_DIED} (its process was killed on the Mac, or the SSH connection to the Mac was lost)"
            )
        else:
            how = f"exited with {f['code']}"
        words.append(f"rank {f['rank']} ({f['host']}) {how}")
    return ", ".join(words)


def failure_lines(stdout, stderr, n=8):
    """-> (ranks, launcher): the last `n` lines of what the ranks printed and of the launcher's
    own errors, the lines that say why a job failed.

    `mlx.launch` runs every rank under `ssh -tt`, so a rank's standard error arrives on the
    launcher's standard output (the job's JSON line is left out). The launcher's standard error
    is kept without its per-rank summary (the message names the ranks already) and without the
    traceback of a launcher thread: after one rank fails, `mlx.launch` stops the others and its
    clean-up over `ssh -tt` can fail with a traceback naming a healthy Mac, which is not the
    job's error (the ranks still end when their SSH session closes)."""
    ranks = []
    for line in (stdout or "").splitlines():
        line = ANSI.sub("", line).rstrip()
        if line.strip() and not (line.startswith("{") and line.endswith("}")):
            ranks.append(line)
    launcher, skip, header = [], False, False
    for line in (stderr or "").splitlines():
        line = ANSI.sub("", line).rstrip()
        if line.startswith("Exception in thread "):
            skip, header = True, True
            continue
        if skip:  # a thread's traceback: up to the launcher's next log line or traceback
            if header and line.startswith("Traceback "):
                header = False
                continue
            header = False
            if not (LAUNCHER_LOG.match(line) or line.startswith("Traceback ")):
                continue
            skip = False
        if line.strip() and not RANK_LINE.search(line):
            launcher.append(line)
    return ranks[-n:], launcher[-n:]


def _device_list(entry):
    if isinstance(entry, str):
        return [entry]
    if isinstance(entry, list):
        return [e for e in entry if isinstance(e, str)]
    return []


def _port(device):
    return device[len("rdma_") :] if device and device.startswith("rdma_") else device


def rank_cables(hostfile, rank):
    """The RDMA cables of one rank of a jaccl / jaccl-ring hostfile, from both ends' devices:
    [{"device", "host", "port", "peer", "peer_port"}] ("rdma_en2" is port en2, MLX's naming)."""
    hosts = hostfile.get("hosts") if isinstance(hostfile, dict) else hostfile
    me = hosts[rank]
    out = []
    for peer, entry in enumerate(me.get("rdma") or []):
        theirs = (hosts[peer].get("rdma") or []) if peer < len(hosts) else []
        back = _device_list(theirs[rank]) if rank < len(theirs) else []
        for i, device in enumerate(_device_list(entry)):
            out.append(
                {
                    "device": device,
                    "host": me["ssh"],
                    "port": _port(device),
                    "peer": hosts[peer]["ssh"],
                    "peer_port": _port(back[i]) if i < len(back) else None,
                }
            )
    return out


def _cable_text(c):
    return f"{c['host']}:{c['port']} <-> {c['peer']}" + (f":{c['peer_port']}" if c["peer_port"] else "")


def _rank_reason(stdout, rank):
    """The failed rank's own line (its InitError starts with "rank N on <hostname>:")."""
    found = ""
    for line in (stdout or "").splitlines():
        line = ANSI.sub("", line).strip()
        if line.startswith(f"rank {rank} on ") and "RDMA" in line:
            found = line
    return found


def rdma_failure(failed, hostfile, stdout=""):
    """None, or what a launch whose RDMA could not be brought up says: {"backend", "ranks":
    [{"rank", "host", "cables": [...], "reason"}], "cables": [text], "hosts": [name], "msg"}.

    A rank that exited with RDMA_EXIT is one; its cables are those of its devices that its own
    message names (MLX named the device), else all of its RDMA cables."""
    backend = hostfile.get("backend") if isinstance(hostfile, dict) else None
    hosts = hostfile.get("hosts") if isinstance(hostfile, dict) else None
    ranks = sorted({f["rank"] for f in failed if f.get("code") == RDMA_EXIT})
    if backend not in RDMA_BACKENDS or not isinstance(hosts, list) or not ranks:
        return None
    out, cables, names, words = [], [], [], []
    for r in ranks:
        if r >= len(hosts):
            continue
        mine = rank_cables(hostfile, r)
        reason = _rank_reason(stdout, r)
        named = set(_RDMA_NAME.findall(reason.split(":", 1)[-1]))
        suspects = [c for c in mine if c["device"] in named] or mine
        texts = [_cable_text(c) for c in suspects]
        out.append({"rank": r, "host": hosts[r]["ssh"], "cables": texts, "reason": reason})
        names.append(hosts[r]["ssh"])
        cables += [t for t in texts if t not in cables]
        words.append(f"{hosts[r]['ssh']} (rank {r}): cable(s) {', '.join(texts) or 'none listed'}")
    msg = (
        f"RDMA could not be brought up (backend {backend}) on {'; '.join(words)}. Not retried: "
        "a failed RDMA link is not a race, and repeated attempts can wedge it further. "
        f"Fix: {RDMA_FIX}"
    )
    return {"backend": backend, "ranks": out, "cables": cables, "hosts": names, "msg": msg}


class LaunchProgress:
    """The latest progress line of each rank, from the launcher's output fed as it arrives.

    `feed(text, stream)` takes any piece of output (ANSI colours, "\\r\\n" of the ranks' ptys, a
    line cut in two; `stream` names the pipe, so pieces of two pipes never join into one line);
    True when a rank reported a new step. `state(done)` is what mlx_launch writes
    to its progress file: {"ranks": {"0": {"size", "host", "kind": "warm-up"|"trial", "step",
    "of", "line"}}, "seq": how many progress lines so far, "done"}.
    """

    def __init__(self):
        self.ranks = {}
        self.seq = 0
        self._partial = {}

    def feed(self, text, stream="stdout"):
        pieces = re.split(r"[\r\n]", self._partial.get(stream, "") + text)
        self._partial[stream] = pieces.pop()
        moved = False
        for piece in pieces:
            m = PROGRESS_LINE.search(ANSI.sub("", piece).rstrip())
            if not m:
                continue
            rank, size, host, line, kind, step, of = m.groups()
            self.ranks[rank] = {
                "size": int(size),
                "host": host,
                "kind": kind,
                "step": int(step),
                "of": int(of),
                "line": line,
            }
            self.seq += 1
            moved = True
        return moved

    def state(self, done=False):
        return {"ranks": dict(self.ranks), "seq": self.seq, "done": done}
