# -*- coding: utf-8 -*-
"""Pure helpers for running a job with `mlx.launch` and reading what it said.

`launch_argv()` builds the launcher command; `read_result()` finds the job's one JSON line
and maps `mlx.launch`'s "Node with rank N ..." lines to inventory hosts, so a failure names
the Mac, not a rank number; `run_processes()` finds leftover processes of one run by its
unique run id in `ps` output (never by a process name).
"""

from __future__ import annotations

import json
import re

RANK_LINE = re.compile(r"Node with rank (\d+) (exited with code (-?\d+)|was killed)")


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
        failed.append({"rank": rank, "host": hosts[rank] if rank < len(hosts) else None,
                       "code": int(m.group(3)) if m.group(3) is not None else None,
                       "killed": m.group(3) is None})
    return {"result": result, "failed": failed}


def run_processes(ps_text, run_id, own_pid=None):
    """PIDs (with their command) from `ps -ax -o pid=,args=` that carry `run_id` as an argument."""
    found = []
    for line in (ps_text or "").splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) != 2 or not parts[0].isdigit():
            continue
        pid, args = int(parts[0]), parts[1]
        if pid == own_pid:
            continue
        if run_id in args.split():
            found.append({"pid": pid, "args": args})
    return found
