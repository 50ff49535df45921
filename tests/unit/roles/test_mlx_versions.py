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


def read_with_mlx(tmp_path, core):
    """The script's output with `core` as the source of mlx.core (a stand-in package put
    first on the path): what a Mac's MLX would answer."""
    (tmp_path / "mlx").mkdir()
    (tmp_path / "mlx" / "__init__.py").write_text("")
    (tmp_path / "mlx" / "core.py").write_text(core)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    res = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_the_gpu_limit_as_a_macs_mlx_reports_it(tmp_path):
    # an M3 with 16 GB on macOS 26 (AlexsJones/llmfit PR #754): 11.84 GB
    info = {"memory_size": 17179869184, "max_recommended_working_set_size": 12713115648}
    core = f"def device_info():\n    return {info!r}\n"
    assert read_with_mlx(tmp_path, core)["gpu_working_set_bytes"] == 12713115648


@pytest.mark.parametrize(
    "core",
    [
        pytest.param("def device_info():\n    return {'architecture': 'x86_64'}\n", id="no-metal-device"),
        pytest.param("def device_info():\n    raise RuntimeError('no GPU')\n", id="mlx-cannot-start"),
        pytest.param("raise ImportError('broken wheel')\n", id="mlx-cannot-import"),
        pytest.param("def device_info():\n    return {'max_recommended_working_set_size': True}\n", id="not-a-number"),
        pytest.param("def device_info():\n    return {'max_recommended_working_set_size': 0}\n", id="zero"),
    ],
)
def test_no_gpu_limit_when_mlx_cannot_say(tmp_path, core):
    out = read_with_mlx(tmp_path, core)
    assert out["gpu_working_set_bytes"] is None and out["mlx"] == metadata.version("mlx")
