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

HOSTFILE = {
    "backend": "ring",
    "envs": [],
    "hosts": [{"ssh": "m1", "ips": ["10.208.0.1"], "rdma": []}, {"ssh": "m2", "ips": ["10.208.0.2"], "rdma": []}],
}
RUN_ID = "r" * 24
PS_ONE = ("/usr/bin/ps", "-ww", "-p")
PS_ALL = ("/usr/bin/ps", "-ax", "-ww", "-o", "pid=,args=")


def spec_args(run_dir, **kw):
    script, keeper = run_dir / "mlx_cluster_server.py", run_dir / "mlx_server_daemon.py"
    for f in (script, keeper):
        if not f.exists():
            f.write_text(f"# {f.name}\n")
    return {
        "hostfile": HOSTFILE,
        "host": "m2",
        "run_dir": str(run_dir),
        "python": "/venv/bin/python",
        "script": str(script),
        "keeper": str(keeper),
        "model": "/models/tiny",
        "supervisor": "process",
        **kw,
    }


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
    assert r["argv"][r["argv"].index("--queue-size") + 1] == "8"
    assert r["argv"][r["argv"].index("--stall-timeout") + 1] == "120"
    assert r["keeper_argv"][:2] == ["/venv/bin/python", str(tmp_path / "mlx_server_daemon.py")]
    assert r["keeper_argv"][-1] == "--detach" and "--max-restarts" in r["keeper_argv"]
    assert first.calls == []  # no command run: pure computation and two files

    again = module_runner("mlx_server_spec", args=spec_args(tmp_path))
    assert not again.result["changed"] and again.result["settings_hash"] == r["settings_hash"]

    # any setting, or the program itself, changes the hash
    assert (
        module_runner("mlx_server_spec", args=spec_args(tmp_path, port=9000)).result["settings_hash"]
        != r["settings_hash"]
    )
    for setting in ({"queue_size": 0}, {"stall_timeout": 60}, {"max_restarts": 1}):
        assert (
            module_runner("mlx_server_spec", args=spec_args(tmp_path, **setting)).result["settings_hash"]
            != r["settings_hash"]
        ), setting
    (tmp_path / "mlx_cluster_server.py").write_text("# server v2\n")
    v2 = module_runner("mlx_server_spec", args=spec_args(tmp_path)).result["settings_hash"]
    assert v2 != r["settings_hash"]
    (tmp_path / "mlx_server_daemon.py").write_text("# supervisor v2\n")
    assert module_runner("mlx_server_spec", args=spec_args(tmp_path)).result["settings_hash"] != v2


def test_spec_check_mode_writes_nothing_and_shows_the_diff(module_runner, tmp_path):
    run = module_runner(
        "mlx_server_spec", args={**spec_args(tmp_path), "_ansible_check_mode": True, "_ansible_diff": True}
    )
    assert run.result["changed"]
    assert not (tmp_path / "rank1.env.json").exists()
    assert "ring_hosts.json" in run.result["diff"]["after"]


@pytest.mark.parametrize(
    "change, match",
    [
        ({"host": "m9"}, "m9 is not in the hostfile"),
        ({"hostfile": {**HOSTFILE, "backend": "mpi"}}, "jaccl, jaccl-ring, ring only"),
    ],
)
def test_spec_fails_naming_the_problem(module_runner, tmp_path, change, match):
    run = module_runner("mlx_server_spec", args={**spec_args(tmp_path), **change})
    assert run.failed and match in run.result["msg"]


@pytest.mark.parametrize("which", ["script", "keeper"])
def test_spec_needs_the_deployed_programs(module_runner, tmp_path, which):
    args = spec_args(tmp_path)
    os.unlink(args[which])
    run = module_runner("mlx_server_spec", args=args)
    assert run.failed and "deploy it first" in run.result["msg"] and args[which] in run.result["msg"]


def test_spec_refuses_negative_bounds(module_runner, tmp_path):
    run = module_runner("mlx_server_spec", args=spec_args(tmp_path, queue_size=-1))
    assert run.failed and "cannot be negative" in run.result["msg"]


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


def write_rank(run_dir, rank, pid, phase="ready", run_id=RUN_ID, settings_hash="h" * 64, progress=None):
    (run_dir / f"rank{rank}.pid").write_text(f"{pid}\n")
    (run_dir / f"rank{rank}.json").write_text(
        json.dumps(
            {
                "rank": rank,
                "pid": pid,
                "host": "m2",
                "phase": phase,
                "message": "serving tiny",
                "started": 1763700000.0,
                "updated": 1763700005.0,
                "settings_hash": settings_hash,
                "run_id": run_id,
                "world_size": 2,
                **({"progress": progress} if progress else {}),
            }
        )
    )
    (run_dir / f"rank{rank}.log").write_text("line 1\nline 2\nthe last line\n")


def write_keeper(run_dir, rank, pid, state="running", restarts=()):
    (run_dir / f"keeper{rank}.pid").write_text(f"{pid}\n")
    (run_dir / f"keeper{rank}.json").write_text(
        json.dumps(
            {
                "pid": pid,
                "host": "m2",
                "state": state,
                "message": "",
                "child_pid": None,
                "max_restarts": 3,
                "restarts": [{"at": 1763700100.0, "why": w} for w in restarts],
            }
        )
    )


def keeper_line(pid, run_dir, run_id=RUN_ID):
    return (
        f"{pid} /venv/bin/python {run_dir}/mlx_server_daemon.py --pidfile {run_dir}/rank0.pid -- "
        f"/venv/bin/python {run_dir}/mlx_cluster_server.py --run-dir {run_dir} --run-id {run_id}\n"
    )


def ps_line(pid, run_dir, run_id=RUN_ID):
    return f"{pid} /venv/bin/python {run_dir}/mlx_cluster_server.py --run-dir {run_dir} --run-id {run_id}\n"


def test_status_of_a_running_rank(module_runner, tmp_path, sleeper):
    p, k = sleeper(), sleeper()
    write_rank(
        tmp_path,
        1,
        p.pid,
        progress={
            "progress_mono": time.monotonic() - 2,
            "stall_timeout": 120,
            "generating": True,
            "tokens": 17,
            "requests_done": 4,
            "queue_depth": 1,
        },
    )
    write_keeper(tmp_path, 1, k.pid, restarts=["generation stalled: no token for 130s"])
    run = module_runner(
        "mlx_server_status",
        args={"run_dir": str(tmp_path), "supervisor": "process", "want_hash": "h" * 64},
        commands={
            (*PS_ONE, str(p.pid), "-o", "pid=,args="): (0, ps_line(p.pid, tmp_path), ""),
            (*PS_ONE, str(k.pid), "-o", "pid=,args="): (0, keeper_line(k.pid, tmp_path), ""),
        },
    )
    st = run.result["status"]
    assert (st["rank"], st["running"], st["pid"], st["phase"]) == (1, True, p.pid, "ready")
    assert st["since"] == "2025-11-21T04:40:00+00:00" and st["until"] is None
    assert st["problems"] == [] and run.result["healthy"] and not run.result["changed"]
    assert st["log_tail"].endswith("the last line")
    assert (st["supervisor"]["pid"], st["supervisor"]["running"], st["supervisor"]["restarts"]) == (k.pid, True, 1)
    assert st["supervisor"]["last_restart"]["why"].startswith("generation stalled")
    prog = st["progress"]
    assert (prog["generating"], prog["tokens"], prog["requests_done"], prog["queue_depth"]) == (True, 17, 4, 1)
    assert 1.5 < prog["seconds_since_progress"] < 60 and prog["stalled"] == ""
    assert st["progress_line"].startswith("4 request(s) done, generating (17 token(s), last progress")


def test_status_flags_a_stalled_rank(module_runner, tmp_path, sleeper):
    p, k = sleeper(), sleeper()
    write_rank(
        tmp_path,
        1,
        p.pid,
        progress={
            "progress_mono": time.monotonic() - 300,
            "stall_timeout": 120,
            "generating": True,
            "tokens": 3,
            "requests_done": 0,
        },
    )
    write_keeper(tmp_path, 1, k.pid)
    commands = {
        (*PS_ONE, str(p.pid), "-o", "pid=,args="): (0, ps_line(p.pid, tmp_path), ""),
        (*PS_ONE, str(k.pid), "-o", "pid=,args="): (0, keeper_line(k.pid, tmp_path), ""),
    }
    for wait in (0, 30):
        t0 = time.monotonic()
        run = module_runner(
            "mlx_server_status",
            args={"run_dir": str(tmp_path), "supervisor": "process", "want_hash": "h" * 64, "wait": wait},
            commands=commands,
        )
        assert time.monotonic() - t0 < 10  # reported at once, not at the end of the wait
        assert not run.result["healthy"]
        assert run.result["reason"].startswith("rank 1 is stalled: generation stalled: no token for 300s (bound 120s)")
        assert run.result["status"]["problems"] == [run.result["reason"]]
        assert run.result["status"]["progress_line"].startswith("STALLED: ")


def test_status_names_a_rank_without_its_supervisor(module_runner, tmp_path, sleeper):
    p = sleeper()
    write_rank(tmp_path, 1, p.pid)
    write_keeper(tmp_path, 1, 999999, state="gave_up")
    run = module_runner(
        "mlx_server_status",
        args={"run_dir": str(tmp_path), "supervisor": "process", "want_hash": "h" * 64},
        module_attrs={"alive": lambda pid: pid == p.pid},
        commands={(*PS_ONE, str(p.pid), "-o", "pid=,args="): (0, ps_line(p.pid, tmp_path), "")},
    )
    st = run.result["status"]
    assert st["running"] and st["supervisor"]["running"] is False and st["supervisor"]["state"] == "gave_up"
    assert st["problems"] == ["rank 1 runs without its supervisor (no watchdog, no restart)"]


def test_status_does_not_trust_a_reused_pid(module_runner, tmp_path, sleeper):
    p = sleeper()
    write_rank(tmp_path, 1, p.pid)
    run = module_runner(
        "mlx_server_status",
        args={"run_dir": str(tmp_path), "supervisor": "process", "want_hash": "h" * 64},
        commands={(*PS_ONE, str(p.pid), "-o", "pid=,args="): (0, f"{p.pid} sleep 60\n", "")},
    )
    st = run.result["status"]
    assert not st["running"] and st["pid"] is None
    assert st["problems"] == ["rank 1 is not running (ready: serving tiny)"]


def test_status_of_a_stopped_rank_shows_its_last_state(module_runner, tmp_path):
    (tmp_path / "rank0.last.json").write_text(
        json.dumps(
            {
                "rank": 0,
                "phase": "stopped",
                "message": "stopped on signal 15",
                "started": 1763700000.0,
                "updated": 1763703600.0,
            }
        )
    )
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
    run = module_runner(
        "mlx_server_status", args={"run_dir": str(tmp_path), "rank": 1, "supervisor": "process", "wait": 60}
    )
    assert time.monotonic() - t0 < 10
    assert not run.result["healthy"]
    assert run.result["reason"] == "rank 1 is not running (failed: loading /models/tiny failed: boom)"
    assert "the last line" in run.result["status"]["log_tail"]


def test_status_reads_launchd(module_runner, tmp_path):
    """launchd's PID is the rank's supervisor's; whether it lives is asked of a fake liveness
    probe (module_attrs), never of this machine, whose PIDs are whatever they are. The rank's
    own PID comes from its files (here: 4000, gone)."""
    out = "system/x = {\n\tstate = running\n\tpid = 12\n}\n"
    launchctl = ("/usr/bin/launchctl", "print", "system/x")
    write_rank(tmp_path, 1, 4000)
    probed = []

    def alive(pid):
        probed.append(pid)
        return pid == 12

    args = {"run_dir": str(tmp_path), "rank": 1, "label": "x"}
    # PID 12 lives but is somebody else's program: launchd's view is shown, the supervisor is not ours
    other = module_runner(
        "mlx_server_status",
        args=args,
        module_attrs={"alive": alive},
        commands={launchctl: (0, out, ""), (*PS_ONE, "12", "-o", "pid=,args="): (0, "   12 /usr/sbin/other\n", "")},
    )
    st = other.result["status"]
    assert not other.failed
    assert st["launchd"]["state"] == "running" and st["launchd"]["pid"] == 12 and st["launchd"]["loaded"]
    assert probed == [4000, 12] and st["running"] is False and st["pid"] is None
    assert st["supervisor"]["pid"] is None and st["supervisor"]["running"] is False
    # PID 12 runs our supervisor (its arguments name this run directory and run id)
    ours = module_runner(
        "mlx_server_status",
        args=args,
        module_attrs={"alive": alive},
        commands={launchctl: (0, out, ""), (*PS_ONE, "12", "-o", "pid=,args="): (0, keeper_line(12, tmp_path), "")},
    )
    assert ours.result["status"]["supervisor"]["pid"] == 12 and ours.result["status"]["supervisor"]["running"]
    assert ours.result["status"]["running"] is False  # the rank itself (4000) is gone
    # launchd's PID has exited: no ps at all (an unexpected command would fail the run)
    dead = module_runner(
        "mlx_server_status", args=args, module_attrs={"alive": lambda pid: False}, commands={launchctl: (0, out, "")}
    )
    assert dead.result["status"]["supervisor"]["running"] is False and dead.calls == [list(launchctl)]

    probed.clear()
    gone = module_runner(
        "mlx_server_status",
        args=args,
        module_attrs={"alive": alive},
        commands={launchctl: (113, "", 'Could not find service "x" in domain for system\n')},
    )
    assert gone.result["status"]["launchd"]["loaded"] is False and "error" not in gone.result["status"]["launchd"]
    assert probed == [4000] and gone.result["status"]["running"] is False


@pytest.fixture
def owners_run_dir(request):
    """An empty run directory of user 4242 (group 4343), reachable by that user: pytest's own
    tmp_path sits below a 0700 directory of root's, which the owner could not reach."""
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="mlx-status-"))
    request.addfinalizer(lambda: shutil.rmtree(top, ignore_errors=True))
    os.chmod(top, 0o711)
    run_dir = top / "server"
    run_dir.mkdir()
    os.chown(run_dir, 4242, 4343)
    return run_dir


@pytest.mark.skipif(os.geteuid() != 0, reason="reading as another user needs root")
def test_status_under_launchd_is_root_for_launchctl_print_alone(module_runner, owners_run_dir):
    """Run as root (become, for launchd), the status runs `launchctl print` as root, then `ps`
    and every read of the run directory as the directory's owner, and is root again after: a
    file there that only root may read (the user's log swapped for one of root's) is not read,
    while the owner's own 0600 files are."""
    run_dir = owners_run_dir
    write_rank(run_dir, 1, 4000)
    write_keeper(run_dir, 1, 12)
    for f in run_dir.iterdir():
        os.chmod(f, 0o600)
        if f.name != "rank1.log":
            os.chown(f, 4242, 4343)
    (run_dir / "rank1.log").write_text("root's own line\n")
    as_whom = []

    def commands(argv):
        as_whom.append((Path(argv[0]).name, os.geteuid(), os.getegid()))
        if argv[0].endswith("launchctl"):
            assert argv == ["/usr/bin/launchctl", "print", "system/x"]
            return (0, "system/x = {\n\tstate = running\n\tpid = 12\n}\n", "")
        assert argv == [*PS_ONE, "12", "-o", "pid=,args="]
        return (0, keeper_line(12, run_dir), "")

    run = module_runner(
        "mlx_server_status",
        args={"run_dir": str(run_dir), "rank": 1, "label": "x"},
        module_attrs={"alive": lambda pid: pid == 12},
        commands=commands,
    )
    st = run.result["status"]
    assert not run.failed, run.result
    assert as_whom == [("launchctl", 0, 0), ("ps", 4242, 4343)]
    assert os.geteuid() == 0 and os.getegid() == 0
    assert st["phase"] == "ready" and st["run_id"] == RUN_ID  # rank1.json, the owner's 0600 file
    assert st["supervisor"]["running"] and st["supervisor"]["state"] == "running"  # keeper1.json, the same
    assert st["log_tail"] == ""  # root's file: not readable as the owner


@pytest.mark.skipif(os.geteuid() != 0, reason="asking as another user needs root")
def test_status_under_launchd_asks_rank_0s_api_as_the_run_directorys_owner(module_runner, owners_run_dir):
    """Root (become, for launchd) is for `launchctl print` alone: rank 0's API is asked as the
    run directory's owner, and root comes back after."""
    run_dir = owners_run_dir
    write_rank(run_dir, 0, 4000)
    for f in run_dir.iterdir():
        os.chown(f, 4242, 4343)
    asked = []

    def http(url, body=None, timeout=10.0, api_key=""):
        asked.append((url, os.geteuid(), os.getegid()))
        return 200, {"data": [{"id": "qwen"}]}

    run = module_runner(
        "mlx_server_status",
        args={"run_dir": str(run_dir), "rank": 0, "label": "x", "url": "http://127.0.0.1:8080"},
        module_attrs={"alive": lambda pid: pid == 4000, "http": http},
        commands={
            ("/usr/bin/launchctl", "print", "system/x"): (0, "system/x = {\n\tstate = running\n\tpid = 12\n}\n", ""),
            (*PS_ONE, "4000", "-o", "pid=,args="): (0, ps_line(4000, run_dir), ""),
        },
    )
    assert not run.failed and run.result["healthy"], run.result
    assert asked == [("http://127.0.0.1:8080/v1/models", 4242, 4343)]
    assert os.geteuid() == 0 and os.getegid() == 0


def test_stop_by_recorded_pid_then_leftovers_by_run_id(module_runner, tmp_path, sleeper):
    rank, extra = sleeper(), sleeper()
    write_rank(tmp_path, 0, rank.pid)
    (tmp_path / "state.json").write_text("{}")
    commands = {
        (*PS_ONE, str(rank.pid), "-o", "pid=,args="): (0, ps_line(rank.pid, tmp_path), ""),
        PS_ALL: (
            0,
            f"1 /sbin/init\n{ps_line(rank.pid, tmp_path)}{extra.pid} python helper.py --run-id {RUN_ID}\n"
            f"{os.getpid()} pytest\n",
            "",
        ),
    }
    run = module_runner(
        "mlx_server_stop", args={"run_dir": str(tmp_path), "supervisor": "process", "grace": 5}, commands=commands
    )
    r = run.result
    assert not run.failed and r["changed"]
    assert [(s["pid"], s["rank"], s["how"]) for s in r["stopped"]] == [(rank.pid, 0, "SIGTERM")]
    assert [x["pid"] for x in r["leftovers"]] == [extra.pid]
    assert r["remaining"] == [] and r["run_ids"] == [RUN_ID] and r["ranks"] == [0]
    assert rank.wait(5) == -15 and extra.wait(5) == -15
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.last.json", "rank0.log", "state.last.json"]
    assert r["supervisors"] == []

    again = module_runner("mlx_server_stop", args={"run_dir": str(tmp_path), "supervisor": "process"})
    assert not again.result["changed"] and again.result["stopped"] == [] and again.calls == []


def test_a_run_id_not_of_the_toolkits_form_ends_nothing_by_it(module_runner, tmp_path, sleeper):
    """A word the user wrote in rank<N>.json as the run id (one every shell carries) is not
    used to find leftovers: only the recorded PIDs, checked, are stopped."""
    bystander = sleeper()
    write_rank(tmp_path, 0, 999999, run_id="bash")
    commands = {PS_ALL: (0, f"{bystander.pid} bash\n", "")}
    run = module_runner(
        "mlx_server_stop", args={"run_dir": str(tmp_path), "supervisor": "process", "grace": 5}, commands=commands
    )
    r = run.result
    assert not run.failed and r["run_ids"] == [] and r["leftovers"] == []
    assert any("not one the toolkit makes" in w for w in run.warnings), run.warnings
    assert bystander.poll() is None


def test_stop_tells_the_supervisor_first_then_the_rank(module_runner, tmp_path, sleeper):
    """The supervisor gets SIGTERM before its rank (so it restarts nothing); both are ended and
    reported apart; neither counts as left behind; their files are moved aside."""
    rank, keeper = sleeper(), sleeper()
    write_rank(tmp_path, 0, rank.pid)
    write_keeper(tmp_path, 0, keeper.pid)
    commands = {
        (*PS_ONE, str(rank.pid), "-o", "pid=,args="): (0, ps_line(rank.pid, tmp_path), ""),
        (*PS_ONE, str(keeper.pid), "-o", "pid=,args="): (0, keeper_line(keeper.pid, tmp_path), ""),
        PS_ALL: (0, f"{ps_line(rank.pid, tmp_path)}{keeper_line(keeper.pid, tmp_path)}", ""),
    }
    run = module_runner(
        "mlx_server_stop", args={"run_dir": str(tmp_path), "supervisor": "process", "grace": 5}, commands=commands
    )
    r = run.result
    assert not run.failed and r["changed"]
    ps_calls = [c[3] for c in run.calls if c[:3] == list(PS_ONE)]
    # the rank is looked up before its supervisor is told: the supervisor passes SIGTERM on at
    # once, and a rank ending then (its peers stopped first) was reported as "nothing was running"
    assert ps_calls == [str(rank.pid), str(keeper.pid)]
    assert [(s["pid"], s["rank"], s["how"]) for s in r["supervisors"]] == [(keeper.pid, 0, "SIGTERM")]
    assert [(s["pid"], s["how"]) for s in r["stopped"]] == [(rank.pid, "SIGTERM")]
    assert r["leftovers"] == [] and r["remaining"] == []
    assert keeper.wait(5) == -15 and rank.wait(5) == -15
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keeper0.last.json", "rank0.last.json", "rank0.log"]


def test_stop_check_mode_signals_nothing(module_runner, tmp_path, sleeper):
    p = sleeper()
    write_rank(tmp_path, 1, p.pid)
    run = module_runner(
        "mlx_server_stop",
        args={"run_dir": str(tmp_path), "supervisor": "process", "_ansible_check_mode": True},
        commands={
            (*PS_ONE, str(p.pid), "-o", "pid=,args="): (0, ps_line(p.pid, tmp_path), ""),
            PS_ALL: (0, ps_line(p.pid, tmp_path), ""),
        },
    )
    assert run.result["changed"] and run.result["stopped"][0]["how"] == "would send SIGTERM"
    assert p.poll() is None
    assert (tmp_path / "rank1.pid").exists()


def test_stop_leaves_a_process_that_is_not_ours(module_runner, tmp_path, sleeper):
    p = sleeper()
    write_rank(tmp_path, 1, p.pid)
    run = module_runner(
        "mlx_server_stop",
        args={"run_dir": str(tmp_path), "supervisor": "process"},
        commands={
            (*PS_ONE, str(p.pid), "-o", "pid=,args="): (0, f"{p.pid} sleep 60\n", ""),
            PS_ALL: (0, f"{p.pid} sleep 60\n", ""),
        },
    )
    assert run.result["stopped"] == [] and run.result["leftovers"] == []
    assert p.poll() is None


def test_stop_launchd_boots_the_job_out_by_label_and_removes_the_plist(module_runner, tmp_path):
    plist = tmp_path / "org.mlx-cluster.server.plist"
    plist.write_text("<plist/>")
    out = "system/org.mlx-cluster.server = {\n\tstate = running\n\tpid = 999999\n}\n"
    run = module_runner(
        "mlx_server_stop",
        args={"run_dir": str(tmp_path), "supervisor": "launchd", "plist": str(plist)},
        commands={
            ("/usr/bin/launchctl", "print", "system/org.mlx-cluster.server"): (0, out, ""),
            ("/usr/bin/launchctl", "bootout", "system/org.mlx-cluster.server"): (0, "", ""),
        },
    )
    assert run.calls == [
        ["/usr/bin/launchctl", "print", "system/org.mlx-cluster.server"],
        ["/usr/bin/launchctl", "bootout", "system/org.mlx-cluster.server"],
    ]
    assert run.result["launchd"] == {"booted_out": True, "plist_removed": True}
    assert not plist.exists()
    assert run.result["stopped"][0]["how"] == "launchctl bootout"


def test_stop_launchd_needs_a_plist_path(module_runner, tmp_path):
    run = module_runner("mlx_server_stop", args={"run_dir": str(tmp_path), "supervisor": "launchd"})
    assert run.failed and "plist" in run.result["msg"]


def test_the_settings_have_one_default_everywhere(tmp_path):
    """The role's defaults, its argument_specs, the spec module's documented defaults, the
    server program's and its supervisor's own defaults (for a standalone run) say the same."""
    import yaml

    from tests.programs import load_program

    root = Path(__file__).resolve().parents[3]
    defaults = yaml.safe_load((root / "roles/mlx_server/defaults/main.yml").read_text())
    specs = yaml.safe_load((root / "roles/mlx_server/meta/argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    doc = (root / "library/mlx_server_spec.py").read_text().split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0]
    module_opts = yaml.safe_load(doc)["options"]

    (tmp_path / "config.json").write_text("{}")
    server = vars(
        load_program("mlx_server", "mlx_cluster_server.py").parse_args(
            ["--model", str(tmp_path), "--run-dir", str(tmp_path)]
        )
    )
    keeper = vars(load_program("mlx_server", "mlx_server_daemon.py").parse_args(["--pidfile", "x", "--", "true"]))
    for var in defaults:
        assert options[var]["default"] == defaults[var], var
    for setting, where in [
        ("queue_size", server),
        ("stall_timeout", server),
        ("max_tokens", server),
        ("poll_interval", server),
        ("request_timeout", server),
        ("init_timeout", server),
        ("port", server),
        ("max_restarts", keeper),
    ]:
        role = defaults[f"mlx_server_{setting}"]
        assert module_opts[setting]["default"] == role, setting
        assert where[setting] == role, setting


@pytest.mark.parametrize("module", ["mlx_server_spec", "mlx_server_status", "mlx_server_stop"])
@pytest.mark.parametrize(
    "change, match",
    [
        ({"label": "../../../tmp/evil"}, "mlx_server_label '../../../tmp/evil' is not a launchd label"),
        ({"label": "org.mlx-cluster.server/x"}, "is not a launchd label"),
        ({"run_dir": "/tmp/mlx server"}, "mlx_server_run_dir) '/tmp/mlx server' holds whitespace"),
    ],
)
def test_a_label_or_path_unfit_for_root_is_refused_before_anything_runs(module_runner, tmp_path, module, change, match):
    """The label names the plist root writes and removes; the run directory is read as root before
    the modules drop to its owner: each module refuses them, naming the setting, and runs nothing
    (an unexpected command would fail the run)."""
    args = (
        spec_args(tmp_path)
        if module == "mlx_server_spec"
        else {"run_dir": str(tmp_path), "rank": 1, "supervisor": "launchd", "plist": str(tmp_path / "x.plist")}
    )
    if module == "mlx_server_status":
        args.pop("plist")
    run = module_runner(module, args={**args, **change})
    assert run.failed and match in run.result["msg"] and run.calls == []


def test_spec_refuses_an_interpreter_a_shell_would_read(module_runner, tmp_path):
    run = module_runner("mlx_server_spec", args=spec_args(tmp_path, python="/venv/bin/python;id"))
    assert (
        run.failed
        and "the interpreter (mlx_server_python, python_env_python) '/venv/bin/python;id'" in run.result["msg"]
    )
    assert not (tmp_path / "rank1.env.json").exists()


def test_the_ranks_environment_values_stay_in_its_0600_file_never_in_results_or_diffs(module_runner, tmp_path):
    """mlx_server_env may carry a token: the env file has it (0600, the supervisor reads it); the
    result, the settings and a check-mode diff show its name only; a new value still restarts."""
    env = ["HF_TOKEN=hf_s3cret_value", "OMP_NUM_THREADS=4"]
    dry = module_runner(
        "mlx_server_spec", args={**spec_args(tmp_path, env=env), "_ansible_check_mode": True, "_ansible_diff": True}
    )
    assert dry.result["changed"] and "HF_TOKEN" in dry.result["diff"]["after"]
    run = module_runner("mlx_server_spec", args=spec_args(tmp_path, env=env))
    for result in (dry.result, run.result):
        assert "hf_s3cret_value" not in json.dumps(result)
    r = run.result
    assert r["env"]["HF_TOKEN"] == r["env"]["OMP_NUM_THREADS"] == "(set; in the 0600 env file)"
    assert r["env"]["MLX_RANK"] == "1"  # the toolkit's own values show
    assert r["settings"]["env"] == ["HF_TOKEN", "OMP_NUM_THREADS"]
    on_disk = tmp_path / "rank1.env.json"
    assert json.loads(on_disk.read_text())["HF_TOKEN"] == "hf_s3cret_value"
    assert oct(on_disk.stat().st_mode & 0o777) == "0o600"
    changed = module_runner(
        "mlx_server_spec",
        args={
            **spec_args(tmp_path, env=["HF_TOKEN=hf_other", "OMP_NUM_THREADS=4"]),
            "_ansible_check_mode": True,
            "_ansible_diff": True,
        },
    )
    assert changed.result["settings_hash"] != r["settings_hash"]
    assert "hf_other" not in json.dumps(changed.result) and "hf_s3cret_value" not in json.dumps(changed.result)


def test_spec_writes_the_api_key_unshown_and_removes_it_when_none_is_set(module_runner, tmp_path):
    """The key goes to api_key (0600) and to the rank as --api-key-file, never into a result or
    diff; a later spec without a key removes the file (check mode only says so)."""
    run = module_runner("mlx_server_spec", args={**spec_args(tmp_path, api_key="k3y_s3cret"), "_ansible_diff": True})
    key_file = tmp_path / "api_key"
    assert run.result["changed"] and key_file.read_text() == "k3y_s3cret\n"
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    assert run.result["argv"][run.result["argv"].index("--api-key-file") + 1] == str(key_file)
    assert "api_key_sha256" in run.result["settings"] and "k3y_s3cret" not in json.dumps(run.result)
    assert f"# {key_file}\n(the API key)\n" in run.result["diff"]["after"]
    args = {**spec_args(tmp_path), "_ansible_diff": True}
    dry = module_runner("mlx_server_spec", args={**args, "_ansible_check_mode": True})
    assert dry.result["changed"] and str(key_file) in dry.result["files"] and key_file.exists()
    gone = module_runner("mlx_server_spec", args=args)
    assert gone.result["files"] == [str(key_file)] and not key_file.exists()
    assert "--api-key-file" not in gone.result["argv"] and "api_key_sha256" not in gone.result["settings"]


def test_spec_needs_the_run_dir_and_the_imports_except_in_check_mode(module_runner, tmp_path):
    helper, absent = tmp_path / "helper.py", tmp_path / "absent.py"
    helper.write_text("# helper\n")
    args = spec_args(tmp_path, imports=[str(helper), str(absent)])
    run = module_runner("mlx_server_spec", args=args)
    assert run.failed and run.result["msg"] == (f"{absent} (imported by {args['script']}) missing: deploy it first")
    dry = module_runner("mlx_server_spec", args={**args, "_ansible_check_mode": True})
    assert not dry.failed and dry.result["settings"]["imports_sha256"][str(absent)] is None
    assert dry.result["settings"]["imports_sha256"][str(helper)] is not None
    no_dir = {**spec_args(tmp_path), "run_dir": str(tmp_path / "nowhere")}
    run = module_runner("mlx_server_spec", args=no_dir)
    assert run.failed and run.result["msg"] == f"{tmp_path}/nowhere does not exist: create the server directory first"
    assert not module_runner("mlx_server_spec", args={**no_dir, "_ansible_check_mode": True}).failed


LAUNCHCTL_PRINT = ("/usr/bin/launchctl", "print", "system/org.mlx-cluster.server")
LAUNCHCTL_BOOTOUT = ("/usr/bin/launchctl", "bootout", "system/org.mlx-cluster.server")
LOADED_JOB = "system/org.mlx-cluster.server = {\n\tstate = running\n\tpid = 999999\n}\n"


def test_stop_launchd_check_mode_boots_out_nothing_and_a_failed_bootout_says_so(module_runner, tmp_path):
    plist = tmp_path / "org.mlx-cluster.server.plist"
    plist.write_text("<plist/>")
    args = {"run_dir": str(tmp_path), "supervisor": "launchd", "plist": str(plist)}
    dry = module_runner(
        "mlx_server_stop",
        args={**args, "_ansible_check_mode": True},
        commands={LAUNCHCTL_PRINT: (0, LOADED_JOB, "")},
    )
    assert dry.result["changed"] and dry.result["launchd"] == {"booted_out": False, "plist_removed": False}
    assert dry.calls == [list(LAUNCHCTL_PRINT)] and plist.exists()
    run = module_runner(
        "mlx_server_stop",
        args=args,
        commands={LAUNCHCTL_PRINT: (0, LOADED_JOB, ""), LAUNCHCTL_BOOTOUT: (5, "", "Boot-out failed: 5\n")},
    )
    assert run.failed and run.result["rc"] == 5 and run.result["cmd"] == list(LAUNCHCTL_BOOTOUT)
    assert run.result["msg"] == (
        "launchctl bootout system/org.mlx-cluster.server failed: Boot-out failed: 5; run the stop with become (sudo)"
    )
    assert plist.exists()


def test_stop_refuses_a_linked_run_dir_and_fails_when_ps_does(module_runner, tmp_path, sleeper):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    linked = module_runner("mlx_server_stop", args={"run_dir": str(tmp_path / "link"), "supervisor": "process"})
    assert linked.failed and linked.result["msg"].startswith(f"refusing to stop the server from {tmp_path}/link: ")
    assert linked.result["stopped"] == [] and linked.calls == []
    p = sleeper()
    write_rank(tmp_path, 0, p.pid)
    run = module_runner(
        "mlx_server_stop",
        args={"run_dir": str(tmp_path), "supervisor": "process", "grace": 5},
        commands={
            (*PS_ONE, str(p.pid), "-o", "pid=,args="): (0, ps_line(p.pid, tmp_path), ""),
            PS_ALL: (1, "", "ps: boom\n"),
        },
    )
    assert run.failed and run.result["msg"] == "ps failed: ps: boom" and run.result["rc"] == 1
    assert p.wait(5) == -15 and (tmp_path / "rank0.json").exists()  # stopped; its files as they were


def test_stop_fails_naming_what_outlived_sigkill(module_runner, tmp_path, sleeper):
    p = sleeper()
    write_rank(tmp_path, 0, p.pid)
    run = module_runner(
        "mlx_server_stop",
        args={"run_dir": str(tmp_path), "supervisor": "process", "grace": 5},
        commands={
            (*PS_ONE, str(p.pid), "-o", "pid=,args="): (0, ps_line(p.pid, tmp_path), ""),
            PS_ALL: (0, "", ""),
        },
        module_attrs={"wait_gone": lambda pids, seconds: list(pids)},  # as if nothing ever ended
    )
    r = run.result
    assert run.failed and r["msg"].startswith(f"processes [{p.pid}] did not end even after SIGKILL")
    assert [(s["pid"], s["how"]) for s in r["stopped"]] == [(p.pid, "SIGKILL after 5s")]
    assert r["remaining"][0]["pid"] == p.pid and r["ranks"] == [0] and r["run_ids"] == [RUN_ID]
    assert not (tmp_path / "rank0.json").exists()  # tidied before the failure is reported


def test_status_of_a_host_without_a_rank(module_runner, tmp_path):
    run = module_runner("mlx_server_status", args={"run_dir": str(tmp_path), "supervisor": "process", "wait": 60})
    r = run.result
    assert not run.failed and not r["healthy"] and r["reason"] == "no rank of the server on this host"
    assert r["status"]["rank"] is None and r["status"]["problems"] == ["no rank of the server on this host"]
    assert run.calls == []


class _Clock:
    """A stand-in for the module's `time`: sleep moves it on, nothing waits."""

    def __init__(self):
        self.now, self.slept = 100.0, []

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds

    def time(self):
        return 1763700000.0


def _status_run(module_runner, tmp_path, states, answers, **args):
    """mlx_server_status over the rank states `states` (one per look) and the API answers
    `answers` (one per probe); -> (run, looks, probes, clock)."""
    states, answers, looks, probes, clock = list(states), list(answers), [], [], _Clock()

    def look(module, p, rank):
        looks.append(rank)
        return {"problems": [], "progress": None, "message": "", **states.pop(0)}

    def probe(p, deadline):
        probes.append(deadline - clock.now)
        return answers.pop(0)

    run = module_runner(
        "mlx_server_status",
        args={"run_dir": str(tmp_path), "rank": 0, "supervisor": "process", **args},
        module_attrs={"look": look, "probe": probe, "time": clock},
    )
    return run, looks, probes, clock


def test_status_wait_probes_the_api_once_the_rank_is_ready(module_runner, tmp_path):
    run, looks, probes, clock = _status_run(
        module_runner,
        tmp_path,
        [{"running": True, "phase": "loading"}, {"running": True, "phase": "ready"}] * 2,
        [(False, "no answer"), (True, {"models": ["tiny"]})],
        wait=30,
        url="http://127.0.0.1:8080",
    )
    assert run.result["healthy"] and run.result["reason"] == ""
    assert run.result["status"]["http"] == {"models": ["tiny"]}
    assert looks == [0] * 4 and clock.slept == [1.0] * 3 and probes == [29.0, 27.0]


def test_status_wait_names_why_the_rank_is_not_healthy_when_time_is_up(module_runner, tmp_path):
    ready = {"running": True, "phase": "ready"}
    run, _looks, _probes, _clock = _status_run(
        module_runner, tmp_path, [ready] * 3, [(False, "503")] * 3, wait=2, url="http://127.0.0.1:8080"
    )
    assert not run.result["healthy"] and run.result["status"]["http"] == "503"
    assert run.result["reason"] == "rank 0 is up but its API is not healthy after 2s: 503"
    loading = {"running": True, "phase": "loading", "message": "layer 3"}
    run, *_ = _status_run(module_runner, tmp_path, [loading] * 3, [], wait=2)
    assert run.result["reason"] == "rank 0 did not come up within 2s (loading: layer 3)"
    exiting = {"running": True, "phase": "stopped"}
    run, *_ = _status_run(module_runner, tmp_path, [exiting], [], wait=2)
    assert run.result["reason"] == "rank 0 is exiting (stopped)" and run.result["status"]["http"] is None


def test_status_without_wait_probes_the_api_once_and_counts_its_silence_a_problem(module_runner, tmp_path):
    ready = {"running": True, "phase": "ready"}
    run, _looks, probes, _clock = _status_run(
        module_runner, tmp_path, [ready], [(False, "refused")], url="http://127.0.0.1:8080", want_hash="h" * 64
    )
    assert not run.result["healthy"] and probes == [10.0]
    assert run.result["reason"] == "rank 0's API does not answer: refused"
    assert run.result["status"]["problems"] == ["rank 0's API does not answer: refused"]
    run, *_ = _status_run(module_runner, tmp_path, [{"running": True, "phase": "loading"}], [])
    assert not run.result["healthy"] and run.result["reason"] == "rank 0 is not ready (loading)"
