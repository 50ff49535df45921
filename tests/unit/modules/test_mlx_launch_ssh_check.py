"""library/mlx_launch.py's SSH check: before anything starts, every host of the hostfile must
answer `ssh HOST true`; a failure names each rank that does not (by its inventory name and the
destination ssh was given), why and the fix, and nothing is launched. `ssh` is a stand-in, first
on PATH, that refuses m2 (by name or address)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.unit.conftest import run_module

SSH = """#!{python}
import sys
if any(a in ("m2", "10.0.0.2") for a in sys.argv[1:]):
    print("ssh: connect to host m2 port 22: Connection refused", file=sys.stderr)
    sys.exit(255)
"""

LAUNCHER = """#!/bin/sh
touch {launched}
"""

HOSTFILE = {
    "backend": "ring",
    "envs": [],
    "hosts": [{"ssh": "m1", "ips": ["10.208.0.1"], "rdma": []}, {"ssh": "m2", "ips": ["10.208.0.2"], "rdma": []}],
}
TARGETS = {
    "m1": {"host": "10.0.0.1", "user": "admin", "options": ["-l", "admin"]},
    "m2": {"host": "10.0.0.2", "user": "admin", "options": ["-l", "admin"]},
}


@pytest.mark.parametrize(
    "targets, login",
    [pytest.param({}, "m2", id="names-as-they-are"), pytest.param(TARGETS, "admin@10.0.0.2", id="inventory")],
)
def test_a_mac_that_does_not_answer_ssh_is_named_and_nothing_starts(capsys, tmp_path, targets, login):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ssh").write_text(SSH.format(python=sys.executable))
    (bindir / "ssh").chmod(0o700)
    launcher = tmp_path / "mlx.launch"
    launcher.write_text(LAUNCHER.format(launched=tmp_path / "launched"))
    launcher.chmod(0o700)
    hostfile = tmp_path / "hostfile.json"
    hostfile.write_text(json.dumps(HOSTFILE))
    args = dict(
        hostfile=str(hostfile),
        python="/usr/bin/python3",
        script="/srv/bench/mlx_cluster_bench.py",
        launcher=str(launcher),
        ssh_check_timeout=5,
        ssh_targets=targets,
    )
    run = run_module(
        capsys,
        "mlx_launch",
        args,
        bins={"ssh": str(bindir / "ssh")},
        env={"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"},
    )
    assert run.failed
    assert run.result["msg"].startswith(
        f"not started: rank 1: ssh from the controller to m2 ({login}) failed: "
        "ssh: connect to host m2 port 22: Connection refused."
    ), run.result["msg"]
    assert "rank 0" not in run.result["msg"]
    assert run.result["failed_ranks"] == [{"rank": 1, "host": "m2", "code": None, "killed": False}]
    assert (run.result["fallback"], run.result["elapsed"]) == (None, 0.0)
    assert not (tmp_path / "launched").exists()
