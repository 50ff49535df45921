"""What the benchmark scripts share: min/median/max, the machine they ran on, closing the
SSH master connections a playbook run left."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
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
    info = {"cpus": os.cpu_count(), "cpu_model": model, "python": platform.python_version(),
            "kernel": platform.release(), "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "loadavg_start": round(os.getloadavg()[0], 2)}
    for dist in dists:
        try:
            info[dist.replace("-", "_")] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            info[dist.replace("-", "_")] = "not installed"
    return info


def close_masters(cp_dir):
    """End the SSH master connections a run left (ControlPersist) without waiting for them."""
    for sock in Path(cp_dir).glob("*"):
        subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "x"],
                       capture_output=True, timeout=10, check=False)


def playbook_env(cluster, base, bin_dir):
    """The environment of one `ansible-playbook` run against a simulated cluster: the project's
    ansible.cfg, a fresh Ansible home, temp and SSH control directory under `base` (no master
    connection from an earlier run), the venv's `bin_dir` first on PATH."""
    env = cluster.env()
    env.update({
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_HOME": str(base / "home"),
        "ANSIBLE_LOCAL_TEMP": str(base / "tmp"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(base / "cp"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": os.pathsep.join([str(bin_dir), env["PATH"]]),
    })
    return env
