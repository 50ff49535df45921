"""library/mlx_launch.py when RDMA cannot be brought up: the RDMA launch is never retried; the
failure names the Mac, its cables and the fix; with fallback_hostfile the job runs once more on
the ring hostfile and says so. The launcher is a stand-in (`launcher` option) that answers as
mlx.launch does for a jaccl job whose rank 1 exited with the RDMA exit code, and runs a ring
job (or fails it: ring_fails); every run is logged.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_launch import RDMA_EXIT
from tests.unit.conftest import run_module

FAKE_LAUNCHER = """#!{python}
import json, sys
argv = sys.argv[1:]
hostfile = argv[argv.index("--hostfile") + 1]
with open({log!r}, "a") as f:
    f.write(hostfile + "\\n")
backend = json.load(open(hostfile))["backend"]
if backend == "jaccl":
    print("rank 1 on studio-2: RDMA could not be brought up (backend jaccl): [jaccl] Changing queue pair "
          "to RTR failed with errno 110. RDMA device(s) concerned: rdma_en2 (to rank 0). Not retried", flush=True)
    print("\\x1b[33m[WARN] Node with rank 1 exited with code {code}\\x1b[0m", file=sys.stderr)
    print("\\x1b[33m[WARN] Node with rank 0 was killed\\x1b[0m", file=sys.stderr)
    sys.exit({exit})
if {ring_fails}:
    print("[rank 0/2 m1] Traceback: the ring broke too", flush=True)
    print("\\x1b[33m[WARN] Node with rank 0 exited with code 1\\x1b[0m", file=sys.stderr)
    sys.exit(1)
print(json.dumps({{"backend": "ring", "world_size": 2, "mode": "tensor"}}))
"""

JACCL = {
    "backend": "jaccl",
    "envs": [],
    "hosts": [
        {"ssh": "m1", "ips": ["10.99.0.2"], "rdma": [None, "rdma_en2"]},
        {"ssh": "m2", "ips": ["10.99.0.3"], "rdma": ["rdma_en2", None]},
    ],
}
RING = {
    "backend": "ring",
    "envs": [],
    "hosts": [{"ssh": "m1", "ips": ["10.208.0.1"], "rdma": []}, {"ssh": "m2", "ips": ["10.208.0.2"], "rdma": []}],
}


@pytest.fixture
def files(tmp_path):
    log = tmp_path / "launches.log"
    launcher = tmp_path / "mlx.launch"
    launcher.write_text(
        FAKE_LAUNCHER.format(python=sys.executable, log=str(log), code=RDMA_EXIT, exit=1, ring_fails=False)
    )
    launcher.chmod(0o700)
    jaccl = tmp_path / "hostfile.json"
    jaccl.write_text(json.dumps(JACCL))
    return {"log": log, "launcher": str(launcher), "jaccl": str(jaccl)}


def _launch(capsys, files, **extra):
    args = dict(
        hostfile=files["jaccl"],
        python="/usr/bin/python3",
        script="/srv/bench/mlx_cluster_bench.py",
        launcher=files["launcher"],
        ssh_check_timeout=0,
        timeout=60,
        **extra,
    )
    return run_module(capsys, "mlx_launch", args)


def test_without_a_fallback_rdma_fails_at_once_naming_the_cable_and_the_fix(capsys, files):
    run = _launch(capsys, files)
    assert run.failed
    assert files["log"].read_text().splitlines() == [files["jaccl"]]  # launched once: no retry
    msg = run.result["msg"]
    assert msg.startswith(
        "mlx_cluster_bench.py: RDMA could not be brought up (backend jaccl) on m2 (rank 1): cable(s) m2:en2 <-> m1:en2."
    )
    for words in (
        "Not retried",
        "replug",
        "reboot",
        "rdma_ctl status",
        "mlx_cluster_fallback_backend: ring",
        "Changing queue pair to RTR failed",
    ):
        assert words in msg
    assert run.result["rdma_failure"]["hosts"] == ["m2"]
    assert run.result["fallback"] is None


def test_with_the_fallback_the_job_runs_once_on_the_ring_and_says_so(capsys, files):
    run = _launch(capsys, files, fallback_hostfile=RING)
    assert not run.failed, run.result
    first, second = files["log"].read_text().splitlines()
    assert first == files["jaccl"] and second != first and not Path(second).exists()  # a private file, removed
    result = run.result["result"]
    assert (result["backend"], result["fallback_from"]) == ("ring", "jaccl")
    assert "m2:en2 <-> m1:en2" in result["fallback_reason"]
    assert run.result["fallback"]["to"] == "ring" and run.result["fallback"]["hosts"] == ["m1", "m2"]
    assert any("Falling back to the ring backend" in w and "m2 (rank 1)" in w for w in run.warnings)


def test_a_failure_that_is_not_rdma_does_not_fall_back(capsys, files, tmp_path):
    launcher = tmp_path / "other.launch"
    launcher.write_text(
        FAKE_LAUNCHER.format(python=sys.executable, log=str(files["log"]), code=3, exit=1, ring_fails=False)
    )
    launcher.chmod(0o700)
    run = _launch(capsys, dict(files, launcher=str(launcher)), fallback_hostfile=RING)
    assert run.failed and "RDMA" not in run.result["msg"].split(":")[0]
    assert files["log"].read_text().splitlines() == [files["jaccl"]]
    assert run.result["fallback"] is None


@pytest.mark.parametrize("other", [dict(RING, hosts=RING["hosts"][:1]), dict(JACCL), {"backend": "ring"}])
def test_a_fallback_hostfile_that_is_not_a_ring_of_the_same_macs_is_refused(capsys, files, other):
    run = _launch(capsys, files, fallback_hostfile=other)
    assert run.failed and "not a ring hostfile of the same Macs" in run.result["msg"]
    assert not files["log"].exists()


def test_after_an_earlier_rdma_failure_the_job_starts_on_the_ring_at_once(capsys, files):
    run = _launch(capsys, files, fallback_hostfile=RING, fallback_reason="RDMA could not be brought up ... m2")
    assert not run.failed, run.result
    (only,) = files["log"].read_text().splitlines()
    assert only != files["jaccl"]  # RDMA not tried again
    assert (run.result["result"]["backend"], run.result["result"]["fallback_from"]) == ("ring", "jaccl")
    assert run.result["result"]["fallback_reason"].endswith("m2")
    assert any("RDMA is not tried again" in w for w in run.warnings)


def test_an_earlier_rdma_failure_without_a_ring_to_fall_back_on_fails_naming_the_fix(capsys, files):
    """fallback_reason with an empty fallback hostfile: nothing is launched, and the message is
    the RDMA failure's own with the fix (once a KeyError: the earlier failure had no detail)."""
    run = _launch(capsys, files, fallback_hostfile={}, fallback_reason="RDMA could not be brought up ... m2")
    assert run.failed
    assert run.result["msg"].startswith("mlx_cluster_bench.py: RDMA could not be brought up ... m2, or set ")
    assert "mlx_cluster_fallback_backend: ring" in run.result["msg"]
    assert not files["log"].exists()  # not launched


def test_when_the_ring_fails_too_both_runs_are_reported(capsys, files, tmp_path):
    launcher = tmp_path / "ring-fails.launch"
    launcher.write_text(
        FAKE_LAUNCHER.format(python=sys.executable, log=str(files["log"]), code=RDMA_EXIT, exit=1, ring_fails=True)
    )
    launcher.chmod(0o700)
    run = _launch(capsys, dict(files, launcher=str(launcher)), fallback_hostfile=RING)
    assert run.failed and len(files["log"].read_text().splitlines()) == 2
    msg = run.result["msg"]
    assert msg.startswith("mlx_cluster_bench.py: RDMA could not be brought up (backend jaccl) on m2 (rank 1)")
    assert "The fallback to the ring backend over the same cables failed (launcher exit 1): rank 0 (m1)" in msg
    assert "the ring broke too" in msg
    assert run.result["rdma_failure"]["hosts"] == ["m2"] and run.result["fallback"]["to"] == "ring"
    assert run.result["first_run"]["failed_ranks"][0]["host"] == "m2"  # the RDMA run's ranks
    assert run.result["failed_ranks"][0]["host"] == "m1"  # the ring run's


def test_check_mode_runs_nothing_and_a_hostfile_not_written_yet_is_no_failure(capsys, files, tmp_path):
    # a dry run of a cluster configured before: it reads the hostfile and says who would run
    run = _launch(capsys, files, _ansible_check_mode=True)
    assert not run.failed and run.result["skipped"] is True, run.result
    assert "check mode: would run /srv/bench/mlx_cluster_bench.py on" in run.result["msg"]
    # a dry run of a fresh cluster: the hostfile stage showed the hostfile without writing it
    missing = str(tmp_path / "not-yet" / "hostfile.json")
    run = _launch(capsys, {**files, "jaccl": missing}, _ansible_check_mode=True)
    assert not run.failed and run.result["skipped"] is True, run.result
    assert "which the hostfile stage writes first in a real run" in run.result["msg"] and missing in run.result["msg"]
    assert not files["log"].exists()  # nothing launched, either time
    # a real run without the hostfile still fails, naming the stage to run
    run = _launch(capsys, {**files, "jaccl": missing})
    assert run.failed and "run the hostfile stage first" in run.result["msg"], run.result
