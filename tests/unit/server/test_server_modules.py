"""library/mlx_server_spec, mlx_server_status and mlx_server_stop, run as Ansible runs them
(module_runner: run_command answered from a table, every argv asserted). Signals go to real
child processes of the test, found only by their PID."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

HOSTFILE = {"backend": "ring", "envs": [],
            "hosts": [{"ssh": "m1", "ips": ["10.208.0.1"], "rdma": []},
                      {"ssh": "m2", "ips": ["10.208.0.2"], "rdma": []}]}
RUN_ID = "r" * 24
PS_ONE = ("/usr/bin/ps", "-ww", "-p")
PS_ALL = ("/usr/bin/ps", "-ax", "-ww", "-o", "pid=,args=")


def spec_args(run_dir, **kw):
    script = run_dir / "mlx_cluster_server.py"
    if not script.exists():
        script.write_text("# server\n")
    return {"hostfile": HOSTFILE, "host": "m2", "run_dir": str(run_dir), "python": "/venv/bin/python",
            "script": str(script), "model": "/models/tiny", "supervisor": "process", **kw}


def test_spec_writes_the_rank_files_once(module_runner, tmp_path):
    first = module_runner("mlx_server_spec", args=spec_args(tmp_path))
    r = first.result
    assert not first.failed and r["changed"]
    assert (r["rank"], r["world_size"], r["backend"]) == (1, 2, "ring")
    assert r["env"] == {"MLX_HOSTFILE": f"{tmp_path}/ring_hosts.json", "MLX_RANK": "1"}
    assert json.loads((tmp_path / "rank1.env.json").read_text()) == r["env"]
    assert json.loads((tmp_path / "ring_hosts.json").read_text()) == [["10.208.0.1:42323"], ["10.208.0.2:42324"]]
    assert oct((tmp_path / "rank1.env.json").stat().st_mode & 0o777) == "0o600"
    assert r["argv"][:2] == ["/venv/bin/python", str(tmp_path / "mlx_cluster_server.py")]
    assert r["argv"][r["argv"].index("--settings-hash") + 1] == r["settings_hash"]
    assert r["argv"][r["argv"].index("--model-id") + 1] == "tiny"
    assert first.calls == []  # no command run: pure computation and two files

    again = module_runner("mlx_server_spec", args=spec_args(tmp_path))
    assert not again.result["changed"] and again.result["settings_hash"] == r["settings_hash"]

    # any setting, or the program itself, changes the hash
    assert module_runner("mlx_server_spec", args=spec_args(tmp_path, port=9000)).result["settings_hash"] != r["settings_hash"]
    (tmp_path / "mlx_cluster_server.py").write_text("# server v2\n")
    assert module_runner("mlx_server_spec", args=spec_args(tmp_path)).result["settings_hash"] != r["settings_hash"]


def test_spec_check_mode_writes_nothing_and_shows_the_diff(module_runner, tmp_path):
    run = module_runner("mlx_server_spec", args={**spec_args(tmp_path), "_ansible_check_mode": True,
                                                 "_ansible_diff": True})
    assert run.result["changed"]
    assert not (tmp_path / "rank1.env.json").exists()
    assert "ring_hosts.json" in run.result["diff"]["after"]


@pytest.mark.parametrize("change, match", [
    ({"host": "m9"}, "m9 is not in the hostfile"),
    ({"hostfile": {**HOSTFILE, "backend": "mpi"}}, "jaccl, jaccl-ring, ring only"),
])
def test_spec_fails_naming_the_problem(module_runner, tmp_path, change, match):
    run = module_runner("mlx_server_spec", args={**spec_args(tmp_path), **change})
    assert run.failed and match in run.result["msg"]


def test_spec_needs_the_deployed_program(module_runner, tmp_path):
    args = spec_args(tmp_path)
    os.unlink(args["script"])
    run = module_runner("mlx_server_spec", args=args)
    assert run.failed and "deploy it first" in run.result["msg"]


@pytest.fixture
def sleeper():
    """A real process to look at and stop (by its PID only)."""
    procs = []

    def start():
        p = subprocess.Popen(["sleep", "60"], start_new_session=True)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(5)


def write_rank(run_dir, rank, pid, phase="ready", run_id=RUN_ID, settings_hash="h" * 64):
    (run_dir / f"rank{rank}.pid").write_text(f"{pid}\n")
    (run_dir / f"rank{rank}.json").write_text(json.dumps({
        "rank": rank, "pid": pid, "host": "m2", "phase": phase, "message": "serving tiny",
        "started": 1763700000.0, "updated": 1763700005.0, "settings_hash": settings_hash, "run_id": run_id,
        "world_size": 2}))
    (run_dir / f"rank{rank}.log").write_text("line 1\nline 2\nthe last line\n")


def ps_line(pid, run_dir, run_id=RUN_ID):
    return f"{pid} /venv/bin/python {run_dir}/mlx_cluster_server.py --run-dir {run_dir} --run-id {run_id}\n"


def test_status_of_a_running_rank(module_runner, tmp_path, sleeper):
    p = sleeper()
    write_rank(tmp_path, 1, p.pid)
    run = module_runner("mlx_server_status", args={"run_dir": str(tmp_path), "supervisor": "process",
                                                   "want_hash": "h" * 64},
                        commands={(*PS_ONE, str(p.pid), "-o", "pid=,args="): (0, ps_line(p.pid, tmp_path), "")})
    st = run.result["status"]
    assert (st["rank"], st["running"], st["pid"], st["phase"]) == (1, True, p.pid, "ready")
    assert st["since"] == "2025-11-21T04:40:00+00:00" and st["until"] is None
    assert st["problems"] == [] and run.result["healthy"] and not run.result["changed"]
    assert st["log_tail"].endswith("the last line")


def test_status_does_not_trust_a_reused_pid(module_runner, tmp_path, sleeper):
    p = sleeper()
    write_rank(tmp_path, 1, p.pid)
    run = module_runner("mlx_server_status", args={"run_dir": str(tmp_path), "supervisor": "process",
                                                   "want_hash": "h" * 64},
                        commands={(*PS_ONE, str(p.pid), "-o", "pid=,args="): (0, f"{p.pid} sleep 60\n", "")})
    st = run.result["status"]
    assert not st["running"] and st["pid"] is None
    assert st["problems"] == ["rank 1 is not running (ready: serving tiny)"]


def test_status_of_a_stopped_rank_shows_its_last_state(module_runner, tmp_path):
    (tmp_path / "rank0.last.json").write_text(json.dumps({"rank": 0, "phase": "stopped", "message": "stopped on signal 15",
                                                          "started": 1763700000.0, "updated": 1763703600.0}))
    run = module_runner("mlx_server_status", args={"run_dir": str(tmp_path), "supervisor": "process"})
    st = run.result["status"]
    assert (st["rank"], st["running"], st["phase"]) == (0, False, "stopped")
    assert st["until"] == "2025-11-21T05:40:00+00:00"
    assert not run.result["healthy"] and "not running" in run.result["reason"]


def test_status_wait_reports_a_dead_rank_at_once_with_its_log(module_runner, tmp_path):
    write_rank(tmp_path, 1, 999999, phase="failed")
    json_path = tmp_path / "rank1.json"
    json_path.write_text(json_path.read_text().replace("serving tiny", "loading /models/tiny failed: boom"))
    t0 = time.monotonic()
    run = module_runner("mlx_server_status", args={"run_dir": str(tmp_path), "rank": 1, "supervisor": "process",
                                                   "wait": 60})
    assert time.monotonic() - t0 < 10
    assert not run.result["healthy"]
    assert run.result["reason"] == "rank 1 is not running (failed: loading /models/tiny failed: boom)"
    assert "the last line" in run.result["status"]["log_tail"]


def test_status_reads_launchd(module_runner, tmp_path):
    """launchd's PID is the rank's PID; whether it lives is asked of a fake liveness probe
    (module_attrs), never of this machine, whose PIDs are whatever they are."""
    out = "system/x = {\n\tstate = running\n\tpid = 12\n}\n"
    launchctl = ("/usr/bin/launchctl", "print", "system/x")
    probed = []

    def alive(pid):
        probed.append(pid)
        return pid == 12

    args = {"run_dir": str(tmp_path), "rank": 1, "label": "x"}
    # PID 12 lives but is somebody else's program: launchd's view is shown, the rank is not ours
    other = module_runner("mlx_server_status", args=args, module_attrs={"alive": alive},
                          commands={launchctl: (0, out, ""),
                                    (*PS_ONE, "12", "-o", "pid=,args="): (0, "   12 /usr/sbin/other\n", "")})
    st = other.result["status"]
    assert not other.failed
    assert st["launchd"]["state"] == "running" and st["launchd"]["pid"] == 12 and st["launchd"]["loaded"]
    assert probed == [12] and st["running"] is False and st["pid"] is None
    # PID 12 runs our rank (its arguments name this run directory): running, with launchd's PID
    ours = module_runner("mlx_server_status", args=args, module_attrs={"alive": alive},
                         commands={launchctl: (0, out, ""),
                                   (*PS_ONE, "12", "-o", "pid=,args="): (0, ps_line(12, tmp_path), "")})
    assert ours.result["status"]["running"] is True and ours.result["status"]["pid"] == 12
    # launchd's PID has exited: no ps at all (an unexpected command would fail the run)
    dead = module_runner("mlx_server_status", args=args, module_attrs={"alive": lambda pid: False},
                         commands={launchctl: (0, out, "")})
    assert dead.result["status"]["running"] is False and dead.calls == [list(launchctl)]

    probed.clear()
    gone = module_runner("mlx_server_status", args=args, module_attrs={"alive": alive},
                         commands={launchctl: (113, "", "Could not find service \"x\" in domain for system\n")})
    assert gone.result["status"]["launchd"]["loaded"] is False and "error" not in gone.result["status"]["launchd"]
    assert probed == [] and gone.result["status"]["running"] is False


def test_stop_by_recorded_pid_then_leftovers_by_run_id(module_runner, tmp_path, sleeper):
    rank, extra = sleeper(), sleeper()
    write_rank(tmp_path, 0, rank.pid)
    (tmp_path / "state.json").write_text("{}")
    commands = {
        (*PS_ONE, str(rank.pid), "-o", "pid=,args="): (0, ps_line(rank.pid, tmp_path), ""),
        PS_ALL: (0, f"1 /sbin/init\n{ps_line(rank.pid, tmp_path)}{extra.pid} python helper.py --run-id {RUN_ID}\n"
                    f"{os.getpid()} pytest\n", ""),
    }
    run = module_runner("mlx_server_stop", args={"run_dir": str(tmp_path), "supervisor": "process", "grace": 5},
                        commands=commands)
    r = run.result
    assert not run.failed and r["changed"]
    assert [(s["pid"], s["rank"], s["how"]) for s in r["stopped"]] == [(rank.pid, 0, "SIGTERM")]
    assert [x["pid"] for x in r["leftovers"]] == [extra.pid]
    assert r["remaining"] == [] and r["run_ids"] == [RUN_ID] and r["ranks"] == [0]
    assert rank.wait(5) == -15 and extra.wait(5) == -15
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.last.json", "rank0.log", "state.last.json"]

    again = module_runner("mlx_server_stop", args={"run_dir": str(tmp_path), "supervisor": "process"})
    assert not again.result["changed"] and again.result["stopped"] == [] and again.calls == []


def test_stop_check_mode_signals_nothing(module_runner, tmp_path, sleeper):
    p = sleeper()
    write_rank(tmp_path, 1, p.pid)
    run = module_runner("mlx_server_stop", args={"run_dir": str(tmp_path), "supervisor": "process",
                                                 "_ansible_check_mode": True},
                        commands={(*PS_ONE, str(p.pid), "-o", "pid=,args="): (0, ps_line(p.pid, tmp_path), ""),
                                  PS_ALL: (0, ps_line(p.pid, tmp_path), "")})
    assert run.result["changed"] and run.result["stopped"][0]["how"] == "would send SIGTERM"
    assert p.poll() is None
    assert (tmp_path / "rank1.pid").exists()


def test_stop_leaves_a_process_that_is_not_ours(module_runner, tmp_path, sleeper):
    p = sleeper()
    write_rank(tmp_path, 1, p.pid)
    run = module_runner("mlx_server_stop", args={"run_dir": str(tmp_path), "supervisor": "process"},
                        commands={(*PS_ONE, str(p.pid), "-o", "pid=,args="): (0, f"{p.pid} sleep 60\n", ""),
                                  PS_ALL: (0, f"{p.pid} sleep 60\n", "")})
    assert run.result["stopped"] == [] and run.result["leftovers"] == []
    assert p.poll() is None


def test_stop_launchd_boots_the_job_out_by_label_and_removes_the_plist(module_runner, tmp_path):
    plist = tmp_path / "org.mlx-cluster.server.plist"
    plist.write_text("<plist/>")
    out = "system/org.mlx-cluster.server = {\n\tstate = running\n\tpid = 999999\n}\n"
    run = module_runner("mlx_server_stop", args={"run_dir": str(tmp_path), "supervisor": "launchd",
                                                 "plist": str(plist)},
                        commands={("/usr/bin/launchctl", "print", "system/org.mlx-cluster.server"): (0, out, ""),
                                  ("/usr/bin/launchctl", "bootout", "system/org.mlx-cluster.server"): (0, "", "")})
    assert run.calls == [["/usr/bin/launchctl", "print", "system/org.mlx-cluster.server"],
                         ["/usr/bin/launchctl", "bootout", "system/org.mlx-cluster.server"]]
    assert run.result["launchd"] == {"booted_out": True, "plist_removed": True}
    assert not plist.exists()
    assert run.result["stopped"][0]["how"] == "launchctl bootout"


def test_stop_launchd_needs_a_plist_path(module_runner, tmp_path):
    run = module_runner("mlx_server_stop", args={"run_dir": str(tmp_path), "supervisor": "launchd"})
    assert run.failed and "plist" in run.result["msg"]
