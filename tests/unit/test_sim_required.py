"""tests/simcluster/pytest_plugin.py: where the simulated cluster cannot run, its tests are
skipped, unless MLXSIM_REQUIRED is set (.ci/run sets it): then the session fails, so CI is never
green on the unit tests alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFTEST = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
pytest_plugins = ["tests.simcluster.pytest_plugin"]
import tests.simcluster.pytest_plugin as plugin
plugin._CHECKED, plugin._REASON = True, "pretend: no network namespaces"
"""


# CI runs under xdist (scripts/test.sh: -n auto): there the workers collect, and a worker's
# usage error alone would only be a crashed test (INTERNALERROR, exit 3, the reason lost).
# The inner pytest loads no plugin but xdist (PYTEST_DISABLE_PLUGIN_AUTOLOAD): hypothesis's and the
# others' start-up was half of each run's CPU, in every worker.
@pytest.mark.parametrize(
    "workers",
    [["-p", "no:xdist"], ["-p", "xdist.plugin", "-n", "2", "--dist", "worksteal"]],
    ids=["no-xdist", "xdist-2"],
)
@pytest.mark.parametrize("required", [False, True], ids=["skipped", "required"])
def test_a_machine_without_the_simulation_skips_or_fails_as_told(tmp_path, required, workers):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_sim.py").write_text("import pytest\n\n\n@pytest.mark.sim\ndef test_a():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k != "MLXSIM_REQUIRED"}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    if required:
        env["MLXSIM_REQUIRED"] = "1"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *workers,
            "-c",
            os.devnull,
            "--rootdir",
            str(tmp_path),
            # its own temporary directory: pytest's default one cleans up earlier sessions' numbered
            # directories when it starts, gigabytes of simulated Macs and venvs, past this timeout
            "--basetemp",
            str(tmp_path / "basetemp"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    if required:
        assert out.returncode == 4, out.stdout + out.stderr  # a usage error: the session fails
        assert "MLXSIM_REQUIRED is set" in out.stdout + out.stderr
    else:
        assert out.returncode == 0 and "1 skipped" in out.stdout, out.stdout + out.stderr


def test_ci_requires_the_simulation():
    assert "export MLXSIM_REQUIRED=1" in (ROOT / ".ci" / "run").read_text()
