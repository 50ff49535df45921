"""What the benchmark scripts share: min/median/max, the machine they ran on, closing the
SSH master connections a playbook run left, running the measurement in a state directory and
printing its outcome."""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def stats(values):
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def fmt(st, digits=2):
    return f"{st['median']:.{digits}f} ({st['min']:.{digits}f}–{st['max']:.{digits}f})"


def machine(dists=("ansible-core", "mlx")):
    """CPU count and model, kernel, Python, the versions of `dists` (keys with _ for -), date,
    load average at the start."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "loadavg_start": round(os.getloadavg()[0], 2),
    }
    for dist in dists:
        try:
            info[dist.replace("-", "_")] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            info[dist.replace("-", "_")] = "not installed"
    return info


def machine_lines(info, dists=("ansible-core", "mlx"), load_note="the benchmark's own simulated Macs count in it"):
    """The Markdown lines (without the command) that say what machine() found, `dists` as
    machine() was asked for them."""
    versions = ", ".join(f"{d} {info[d.replace('-', '_')]}" for d in dists)
    return [
        f"- CPUs: {info['cpus']} ({info['cpu_model']}), kernel {info['kernel']}",
        f"- Python {info['python']}, {versions}",
        f"- date: {info['date']}; load average (1 min) at start {info['loadavg_start']}, "
        f"at end {info['loadavg_end']} ({load_note})",
    ]


def read_section(path, heading):
    """The lines of `path`'s section `heading` (up to the next `## ` heading), [] if none."""
    lines = path.read_text().splitlines() if path.exists() else []
    if heading not in lines:
        return []
    start = lines.index(heading)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def write_section(path, heading, section):
    """Replace the section `heading` of the Markdown file `path` (up to the next `## ` heading)
    with `section`, or append it: each benchmark rewrites its own section only."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = text.splitlines()
    if heading in lines:
        start = lines.index(heading)
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        lines[start:end] = section.rstrip("\n").splitlines() + ([""] if end < len(lines) else [])
    else:
        lines += [""] + section.rstrip("\n").splitlines()
    path.write_text("\n".join(lines).rstrip("\n") + "\n")


def close_masters(cp_dir):
    """End the SSH master connections a run left (ControlPersist) without waiting for them."""
    for sock in Path(cp_dir).glob("*"):
        subprocess.run(
            ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "x"], capture_output=True, timeout=10, check=False
        )


def playbook_env(cluster, base, bin_dir):
    """The environment of one `ansible-playbook` run against a simulated cluster: the project's
    ansible.cfg, a fresh Ansible home, temp and SSH control directory under `base` (no master
    connection from an earlier run), the venv's `bin_dir` first on PATH."""
    env = cluster.env()
    env.update(
        {
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_HOME": str(base / "home"),
            "ANSIBLE_LOCAL_TEMP": str(base / "tmp"),
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(base / "cp"),
            "ANSIBLE_NOCOLOR": "1",
            "PATH": os.pathsep.join([str(bin_dir), env["PATH"]]),
        }
    )
    return env


class BenchError(RuntimeError):
    """A run that did not reach the state it measures: its time would mean nothing."""


def log(msg):
    """Progress, on stderr (stdout carries the table or the JSON)."""
    print(msg, file=sys.stderr, flush=True)


def measure(work, info, prefix, state_root=None):
    """`work(state_root)` with the simulated clusters' state under `state_root` (default: a
    new directory under /tmp named `prefix`..., removed at the end); `info` (machine()) gets
    the load average at the end. Returns (result, None), or (None, exit status): 2 when the
    simulated cluster cannot run here, 1 when a run failed (both said on stderr)."""
    from tests.simcluster.cluster import unavailable_reason

    reason = unavailable_reason()
    if reason:
        print(f"cannot run the simulated cluster here: {reason}", file=sys.stderr)
        return None, 2
    root = Path(state_root or tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        result = work(root)
    except BenchError as exc:
        print(f"benchmark run failed: {exc}", file=sys.stderr)
        return None, 1
    finally:
        if not state_root:
            shutil.rmtree(root, ignore_errors=True)
    info["loadavg_end"] = round(os.getloadavg()[0], 2)
    return result, None


def emit(doc, json_arg, table):
    """--json: `doc` printed alone (`-`), or written to the file and `table` printed; else `table`."""
    text = json.dumps(doc, indent=2)
    if json_arg and json_arg != "-":
        Path(json_arg).write_text(text + "\n")
    print(text if json_arg == "-" else table)
