"""The code Ansible runs on the Macs keeps to what their Python runs: a Mac's Ansible
interpreter is the Command Line Tools' /usr/bin/python3, Python 3.9 (macOS 12 to 15), and
ansible-core still supports it as a target. Checked by vermin (syntax, library modules,
functions and keywords by version), not by the simulated Macs, whose Python is newer."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAC_PYTHON = "3.9"
# what runs on a Mac under Ansible's interpreter: the modules and what they import
MAC_SIDE = ["library", "plugins/module_utils"]


def vermin():
    return shutil.which("vermin", path=str(Path(sys.executable).parent)) or shutil.which("vermin")


def test_the_modules_and_their_imports_run_on_the_command_line_tools_python():
    exe = vermin()
    assert exe, "vermin is a dev dependency (pyproject.toml): run scripts/bootstrap.sh"
    res = subprocess.run(
        [exe, f"-t={MAC_PYTHON}-", "--violations", "--eval-annotations", "--no-tips", *MAC_SIDE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_check_catches_newer_code(tmp_path):
    """The check can fail: a module using 3.10's `match` and zip(strict=) is refused."""
    (tmp_path / "newer.py").write_text(
        "def f(x, a, b):\n    match x:\n        case 1:\n            return list(zip(a, b, strict=True))\n"
    )
    res = subprocess.run(
        [vermin(), f"-t={MAC_PYTHON}-", "--violations", "--no-tips", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode != 0 and "3.10" in res.stdout, res.stdout
