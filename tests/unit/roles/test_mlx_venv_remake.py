"""roles/python_env/files/mlx_venv_remake.py, run as the env stage runs it (a script under the
base Python, the venv's path as its argument), for a venv whose own Python no longer starts:
made again, emptied first, only when it is a venv holding nothing but a venv's own entries;
--dry (check mode) changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "roles" / "python_env" / "files" / "mlx_venv_remake.py"


def remake(path, *args):
    res = subprocess.run([sys.executable, str(SCRIPT), str(path), *args], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def broken_venv(path):
    """A venv's layout whose bin/python leads to a Python that is gone."""
    (path / "bin").mkdir(parents=True)
    (path / "lib" / "python3.0" / "site-packages").mkdir(parents=True)
    (path / "pyvenv.cfg").write_text("home = /opt/homebrew/Cellar/python@3.0/3.0.1/bin\n")
    os.symlink("/opt/homebrew/Cellar/python@3.0/3.0.1/bin/python3.0", path / "bin" / "python")
    (path / "lib" / "python3.0" / "site-packages" / "old.py").write_text("")


def test_a_broken_venv_is_made_again_from_this_python(tmp_path):
    venv = tmp_path / "venv"
    broken_venv(venv)
    assert remake(venv, "--dry") == {"remade": True, "why": ""}
    assert os.readlink(venv / "bin" / "python").endswith("python3.0")  # the dry run changed nothing
    assert remake(venv) == {"remade": True, "why": ""}
    assert not (venv / "lib" / "python3.0").exists()  # emptied first
    ran = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; print(sys.prefix)"], capture_output=True)
    assert ran.returncode == 0 and ran.stdout.decode().strip() == str(venv)
    assert "home" in (venv / "pyvenv.cfg").read_text()


def test_a_directory_holding_more_than_a_venv_is_left_as_it_is(tmp_path):
    venv = tmp_path / "cluster"
    broken_venv(venv)
    (venv / "models").mkdir()
    (venv / "models" / "weights.safetensors").write_bytes(b"\0" * 16)
    (venv / "hostfile.json").write_text("{}")
    for args in ((), ("--dry",)):
        said = remake(venv, *args)
        assert said["remade"] is False
        assert said["why"] == f"{venv} holds more than a venv (hostfile.json, models): it is not emptied"
    assert (venv / "models" / "weights.safetensors").exists() and (venv / "lib" / "python3.0").exists()


def test_a_directory_that_is_no_venv_or_a_link_is_left_as_it_is(tmp_path):
    plain = tmp_path / "plain"
    (plain / "bin").mkdir(parents=True)
    assert remake(plain) == {"remade": False, "why": f"{plain} is not a venv (no pyvenv.cfg in it): left as it is"}
    real = tmp_path / "real"
    broken_venv(real)
    link = tmp_path / "link"
    link.symlink_to(real)
    assert remake(link)["remade"] is False and (real / "lib" / "python3.0").exists()
    assert remake(tmp_path / "absent")["remade"] is False
