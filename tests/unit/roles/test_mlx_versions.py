"""roles/python_env/files/mlx_versions.py, run as the env stage runs it (a script under the
venv's Python, the requirements in its environment): the versions, and `in_place` only when
every requirement is an exact pin installed at that version (the stage then skips pip)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "roles" / "python_env" / "files" / "mlx_versions.py"
YAML = metadata.version("PyYAML")


def read(requirements):
    env = dict(os.environ)
    if requirements is None:
        env.pop("MLX_CLUSTER_REQUIREMENTS", None)
    else:
        env["MLX_CLUSTER_REQUIREMENTS"] = requirements if isinstance(requirements, str) else json.dumps(requirements)
    res = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_the_versions_of_this_interpreter():
    out = read(None)
    assert out["executable"] == sys.executable and out["mlx"] == metadata.version("mlx")
    assert out["mlx_lm"] == metadata.version("mlx-lm") and out["in_place"] is False


@pytest.mark.parametrize(
    "requirements, in_place",
    [
        pytest.param([f"PyYAML=={YAML}", f"mlx=={metadata.version('mlx')}"], True, id="every-pin-installed"),
        pytest.param([f"pyyaml == {YAML}"], True, id="name-case-and-spaces"),
        pytest.param([f"PyYAML=={YAML}", "mlx==0.0.1"], False, id="one-pin-at-another-version"),
        pytest.param([f"PyYAML=={YAML}", "no-such-package-mlxc==1.0"], False, id="one-not-installed"),
        pytest.param([f"PyYAML>={YAML}"], False, id="not-an-exact-pin"),
        pytest.param([f"PyYAML[extra]=={YAML}"], False, id="extras-left-to-pip"),
        pytest.param([f"PyYAML=={YAML}; python_version > '3'"], False, id="markers-left-to-pip"),
        pytest.param([], False, id="nothing-asked"),
        pytest.param("not json", False, id="unreadable"),
    ],
)
def test_in_place_only_for_exact_pins_installed(requirements, in_place):
    assert read(requirements)["in_place"] is in_place
