"""The mlx_launch action plugin with `progress_interval`, through the ansible command on this
machine: a stand-in `mlx.launch` (option `launcher`) prints what the benchmark's ranks log
("[rank R/N host] warm-up/trial i/N: ...", "\\r\\n" as from their ptys) over a few seconds; the
ranks' latest step is printed while the job runs, before the result, which keeps the keys of
a plain run. A job that does not end within `timeout` still fails as before, with the ranks'
last lines, and its launcher's group is ended."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

FAKE_LAUNCHER = """#!{python}
import sys, time
steps = ["warm-up 1/1: 16 tokens from a 8-token prompt"] + [
    f"trial {{i}}/3: prompt_tps=100.000, generation_tps=50.000, total_time=0.500" for i in (1, 2, 3)]
for step in steps:
    for rank, host in ((0, "m1"), (1, "m2")):
        sys.stdout.write(f"[rank {{rank}}/2 {{host}}] {{step}}\\r\\n")
    sys.stdout.flush()
    time.sleep({pause})
print('{{"world_size": 2, "generation_tps": 50.0}}', flush=True)
"""
HANGING_LAUNCHER = """#!{python}
import sys, time
sys.stdout.write("[rank 0/2 m1] warm-up 1/1: 16 tokens from a 8-token prompt\\r\\n")
sys.stdout.flush()
time.sleep(300)
"""


@pytest.fixture
def launch(tmp_path):
    """launch(script_text, **args) -> (returncode, result, what was printed before it)."""
    ansible = Path(sys.executable).parent / "ansible"
    if not ansible.exists():
        pytest.skip("no ansible command beside this Python")
    hostfile = tmp_path / "hostfile.json"
    hostfile.write_text(json.dumps({"backend": "ring", "hosts": [{"ssh": "m1", "ips": []}, {"ssh": "m2", "ips": []}]}))
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_STDOUT_CALLBACK="minimal",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        HOME=str(tmp_path),
        NO_COLOR="1",
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-rtmp"),
    )

    def _launch(text, **extra):
        launcher = tmp_path / "mlx.launch"
        launcher.write_text(text.format(python=sys.executable, pause=extra.pop("pause", 1.0)))
        launcher.chmod(0o755)
        args = dict(
            {
                "hostfile": str(hostfile),
                "python": "/usr/bin/python3",
                "script": "/x/mlx_cluster_bench.py",
                "launcher": str(launcher),
                "ssh_check_timeout": 0,
                "timeout": 60,
            },
            **extra,
        )
        proc = subprocess.run(
            [
                str(ansible),
                "localhost",
                "-i",
                "localhost,",
                "-c",
                "local",
                "-e",
                f"ansible_python_interpreter={sys.executable}",
                "-m",
                "mlx.cluster.mlx_launch",
                "-a",
                json.dumps(args),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        before, _, body = proc.stdout.rpartition("localhost | ")
        head, _, body = body.partition(" => ")
        assert head in ("SUCCESS", "CHANGED", "FAILED!"), proc.stdout + proc.stderr
        return proc.returncode, json.loads(body), before

    return _launch


def test_the_trial_in_progress_is_shown_while_the_job_runs(launch):
    rc, result, shown = launch(FAKE_LAUNCHER, progress_interval=1)
    assert rc == 0, result
    assert result["result"] == {"world_size": 2, "generation_tps": 50.0} and result["failed_ranks"] == []
    lines = [ln for ln in shown.splitlines() if ln.startswith("[localhost] ")]
    assert lines, shown
    assert all(ln.startswith("[localhost] [rank 0/2 m1] ") for ln in lines), lines
    assert any("trial " in ln for ln in lines), lines
    rc, plain, shown = launch(FAKE_LAUNCHER, progress_interval=0, pause=0.1)
    assert rc == 0 and "[rank" not in shown
    assert sorted(plain) == sorted(result)


def test_a_job_that_does_not_end_still_times_out_with_the_ranks_last_lines(launch):
    start = time.monotonic()
    rc, result, _ = launch(HANGING_LAUNCHER, progress_interval=1, timeout=3)
    assert rc != 0, result
    assert result["msg"].startswith("mlx_cluster_bench.py timed out after 3s")
    assert "[rank 0/2 m1] warm-up 1/1" in result["stdout_tail"]
    assert time.monotonic() - start < 60
    assert not set(result) & {"ansible_job_id", "started", "finished", "results_file"}
