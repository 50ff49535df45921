"""plugins/module_utils/mlx_server.py: the rank environment (checked against mlx.launch's own
code), the settings hash, launchctl parsing, PID checks and restart reasons."""

from __future__ import annotations

import json
import os
from argparse import Namespace
from pathlib import Path

import pytest
from mlx._distributed_utils import launch as mlx_launch
from mlx._distributed_utils.common import Hostfile

from ansible_collections.mlx.cluster.plugins.module_utils import mlx_server as ms
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import processes_with
from tests.programs import load_program

RUN_DIR = "/Users/admin/mlx-cluster/server"

RING2 = {
    "backend": "ring",
    "envs": ["MLX_FOO=1"],
    "hosts": [{"ssh": "m1", "ips": ["10.208.0.1"], "rdma": []}, {"ssh": "m2", "ips": ["10.208.0.2"], "rdma": []}],
}
RING3_MULTI = {
    "backend": "ring",
    "envs": [],
    "hosts": [
        {"ssh": "a", "ips": ["10.0.0.1", "10.0.1.1"], "rdma": []},
        {"ssh": "b", "ips": ["10.0.0.2", "10.0.2.1"], "rdma": []},
        {"ssh": "c", "ips": ["10.0.1.2", "10.0.2.2"], "rdma": []},
    ],
}
RING1 = {"backend": "ring", "envs": [], "hosts": [{"ssh": "solo", "ips": ["10.0.0.9"], "rdma": []}]}
JACCL3 = {
    "backend": "jaccl",
    "envs": ["MLX_METAL_FAST_SYNCH=1"],
    "hosts": [
        {"ssh": "m1", "ips": ["192.168.1.10"], "rdma": [None, "rdma_en2", "rdma_en3"]},
        {"ssh": "m2", "ips": ["192.168.1.11"], "rdma": ["rdma_en2", None, "rdma_en3"]},
        {"ssh": "m3", "ips": ["192.168.1.12"], "rdma": ["rdma_en2", "rdma_en3", None]},
    ],
}
JACCL_RING4 = {
    "backend": "jaccl-ring",
    "envs": [],
    "hosts": [
        {
            "ssh": f"m{i}",
            "ips": [f"10.1.0.{i}"],
            "rdma": [None if j == i else (f"rdma_en{j}" if abs(i - j) in (1, 3) else None) for j in range(4)],
        }
        for i in range(4)
    ],
}


def mlx_launch_view(hostfile, port, extra_env, monkeypatch, tmp_path):
    """What mlx.launch's own launch_ring / launch_jaccl hand every rank: the effective
    environment after its launch script's exports, with file variables replaced by the
    content its `echo ... > $fname` writes."""
    path = tmp_path / "hostfile.json"
    path.write_text(json.dumps(hostfile))
    hf = Hostfile.from_file(path)
    args = Namespace(
        starting_port=port,
        connections_per_ip=1,
        env=hf.envs + list(extra_env),
        verbose=False,
        cwd=None,
        python="/usr/bin/python3",
        backend=hf.backend,
    )
    captured = []
    monkeypatch.setattr(mlx_launch, "_launch_with_io", lambda cls, arguments, verbose: captured.extend(arguments))
    parser = Namespace(error=lambda msg: pytest.fail(msg))
    if hf.backend == "ring":
        mlx_launch.launch_ring(parser, hf.hosts, args, ["script.py"])
    else:
        mlx_launch.launch_jaccl(parser, hf.hosts, args, ["script.py"])
    views = []
    for (rank, _host, _python, _cwd, files, env, _cmd), _kw in captured:
        effective = {}
        for e in env:  # `export KEY=VALUE` in order
            key, _, value = e.partition("=")
            effective[key] = value
        contents = {}
        for name, content in files.items():  # `echo CONTENT > $fname; export NAME=$fname`
            effective[name] = "<file>"
            contents[name] = content + "\n"
        effective["MLX_RANK"] = str(rank)
        views.append((effective, contents))
    return views


def our_view(hostfile, port, extra_env):
    views = []
    for rank in range(len(hostfile["hosts"])):
        env, files = ms.launch_env(hostfile, rank, RUN_DIR, port, extra_env)
        effective, contents = dict(env), {}
        for name, value in env.items():
            if value.startswith(RUN_DIR + "/"):
                contents[name] = files[value[len(RUN_DIR) + 1 :]]
                effective[name] = "<file>"
        views.append((effective, contents))
    return views


@pytest.mark.parametrize(
    "hostfile",
    [RING2, RING3_MULTI, RING1, JACCL3, JACCL_RING4],
    ids=["ring2", "ring3-two-ips", "ring1", "jaccl3", "jaccl-ring4"],
)
def test_rank_environment_is_what_mlx_launch_gives(hostfile, monkeypatch, tmp_path):
    extra = ["HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1"]
    assert our_view(hostfile, 42323, extra) == mlx_launch_view(hostfile, 42323, extra, monkeypatch, tmp_path)


def test_ring_files_and_paths():
    env, files = ms.launch_env(RING3_MULTI, 2, RUN_DIR + "/", 5000)
    assert env == {"MLX_HOSTFILE": f"{RUN_DIR}/ring_hosts.json", "MLX_RANK": "2"}
    assert json.loads(files["ring_hosts.json"]) == [
        ["10.0.0.1:5000", "10.0.1.1:5001"],
        ["10.0.0.2:5002", "10.0.2.1:5003"],
        ["10.0.1.2:5004", "10.0.2.2:5005"],
    ]


def test_jaccl_ring_sets_the_ring_flag_and_coordinator():
    env, files = ms.launch_env(JACCL_RING4, 3, RUN_DIR, 42323)
    assert env["MLX_JACCL_RING"] == "1"
    assert env["MLX_JACCL_COORDINATOR"] == "10.1.0.0:42323"
    assert env["MLX_IBV_DEVICES"] == f"{RUN_DIR}/ibv_devices.json"
    assert json.loads(files["ibv_devices.json"]) == [h["rdma"] for h in JACCL_RING4["hosts"]]


@pytest.mark.parametrize(
    "hostfile, match",
    [
        ({"backend": "mpi", "hosts": RING2["hosts"]}, "jaccl, jaccl-ring, ring only"),
        ({"backend": "ring", "hosts": [{"ssh": "a"}, {"ssh": "b", "ips": ["1.2.3.4"]}]}, "needs addresses"),
        (
            {
                "backend": "jaccl",
                "hosts": [
                    {"ssh": "a", "ips": ["1.1.1.1"], "rdma": [None]},
                    {"ssh": "b", "ips": [], "rdma": ["x", None]},
                ],
            },
            "does not match hosts",
        ),
        (
            {
                "backend": "jaccl",
                "hosts": [{"ssh": "a", "ips": ["1.1.1.1"], "rdma": ["x", "y"]}, {"ssh": "b", "rdma": ["x", None]}],
            },
            "self should be null",
        ),
        (
            {
                "backend": "jaccl",
                "hosts": [{"ssh": "a", "ips": ["1.1.1.1"], "rdma": [None, None]}, {"ssh": "b", "rdma": ["x", None]}],
            },
            "no RDMA device is listed for a to b",
        ),
        ({"backend": "ring", "hosts": []}, "lists no hosts"),
    ],
    ids=["mpi", "ring-no-ips", "jaccl-short-matrix", "jaccl-self", "jaccl-missing", "empty"],
)
def test_bad_hostfiles_are_refused_with_the_reason(hostfile, match):
    with pytest.raises(ms.SpecError, match=match):
        ms.launch_env(hostfile, 0, RUN_DIR, 42323)


def test_bad_extra_env_is_refused():
    with pytest.raises(ms.SpecError, match="KEY=VALUE"):
        ms.launch_env(RING2, 0, RUN_DIR, 42323, ["NOT-A-NAME=1"])
    with pytest.raises(ms.SpecError, match="KEY=VALUE"):
        ms.launch_env(RING2, 0, RUN_DIR, 42323, ["NOEQUALS"])


def test_extra_env_comes_after_the_hostfile_envs_and_before_the_backend():
    env, _ = ms.launch_env(RING2, 1, RUN_DIR, 42323, ["MLX_FOO=2", "MLX_RANK=7"])
    assert env["MLX_FOO"] == "2"  # overrides the hostfile's
    assert env["MLX_RANK"] == "1"  # the backend's last word, as in mlx.launch


def test_rank_of():
    assert ms.rank_of(RING2, "m2") == 1
    with pytest.raises(ms.SpecError, match="not in the hostfile"):
        ms.rank_of(RING2, "m9")
    with pytest.raises(ms.SpecError, match="appears 2 times"):
        ms.rank_of({"hosts": [{"ssh": "a"}, {"ssh": "a"}]}, "a")


# --- settings hash ---

SETTINGS = {
    "model": "/m/qwen",
    "backend": "ring",
    "hostfile": RING2,
    "port": 8080,
    "mode": "tensor",
    "python": "/venv/bin/python",
    "env": ["HF_HUB_OFFLINE=1"],
}


def test_settings_hash_ignores_key_order_and_is_stable():
    reordered = dict(reversed(list(SETTINGS.items())))
    reordered["hostfile"] = dict(reversed(list(RING2.items())))
    assert ms.settings_hash(reordered) == ms.settings_hash(SETTINGS)
    assert len(ms.settings_hash(SETTINGS)) == 64
    assert ms.settings_hash(SETTINGS) == ms.settings_hash(json.loads(json.dumps(SETTINGS)))


@pytest.mark.parametrize(
    "key, value",
    [
        ("model", "/m/other"),
        ("backend", "jaccl"),
        ("port", 8081),
        ("mode", "pipeline"),
        ("python", "/other/python"),
        ("env", ["HF_HUB_OFFLINE=1", "X=1"]),
        ("hostfile", {**RING2, "hosts": list(reversed(RING2["hosts"]))}),
    ],
)
def test_settings_hash_changes_with_any_setting(key, value):
    assert ms.settings_hash({**SETTINGS, key: value}) != ms.settings_hash(SETTINGS)


def test_server_argv():
    argv = ms.server_argv(
        "/py",
        "/srv/s.py",
        model="/m",
        run_dir="/r",
        mode="tensor",
        world=2,
        backend="jaccl-ring",
        host="0.0.0.0",
        port=8080,
        model_id="m",
        max_tokens=64,
        poll_interval=0.5,
        request_timeout=600,
        init_timeout=120,
        queue_size=0,
        stall_timeout=120,
        settings_hash_value="abc",
    )
    assert argv[:2] == ["/py", "/srv/s.py"]
    opts = dict(zip(argv[2::2], argv[3::2]))
    assert opts == {
        "--model": "/m",
        "--run-dir": "/r",
        "--mode": "tensor",
        "--expect-world": "2",
        "--init-timeout": "120",
        "--backend": "jaccl",
        "--host": "0.0.0.0",
        "--port": "8080",
        "--model-id": "m",
        "--max-tokens": "64",
        "--poll-interval": "0.5",
        "--request-timeout": "600",
        "--queue-size": "0",
        "--stall-timeout": "120",
        "--settings-hash": "abc",
    }


def test_server_argv_is_what_the_server_accepts(tmp_path):
    """Every option server_argv writes is one the deployed program parses, to the same value."""
    srv = load_program("mlx_server", "mlx_cluster_server.py")
    (tmp_path / "config.json").write_text("{}")
    argv = ms.server_argv(
        "/py",
        "/s.py",
        model=str(tmp_path),
        run_dir="/r",
        mode="pipeline",
        world=3,
        backend="ring",
        host="::",
        port=9000,
        model_id="m",
        max_tokens=64,
        poll_interval=0.25,
        request_timeout=30,
        init_timeout=60,
        queue_size=4,
        stall_timeout=90,
        settings_hash_value="abc",
        allowed_hosts=["mlx.lab.example", "studio-1.lan"],
    )
    args = srv.parse_args(argv[2:] + ["--run-id", "x"])
    assert (args.queue_size, args.stall_timeout, args.poll_interval, args.expect_world) == (4, 90.0, 0.25, 3)
    assert args.allowed_host == ["mlx.lab.example", "studio-1.lan"]


@pytest.mark.parametrize("supervisor, detached", [("process", True), ("launchd", False)])
def test_keeper_argv(supervisor, detached):
    argv = ms.keeper_argv(
        "/py", "/r/mlx_server_daemon.py", run_dir="/r/", rank=1, supervisor=supervisor, max_restarts=3
    )
    assert argv[:2] == ["/py", "/r/mlx_server_daemon.py"]
    assert ("--detach" in argv) is detached
    opts = dict(zip(argv[2::2], argv[3::2]))
    f = ms.rank_files("/r", 1)
    assert opts["--pidfile"] == f["pid"] == "/r/rank1.pid"
    assert opts["--own-pidfile"] == f["keeper_pid"] == "/r/keeper1.pid"
    assert opts["--state"] == f["keeper"] and opts["--heartbeat"] == f["state"] == "/r/rank1.json"
    assert opts["--log"] == f["log"] and opts["--env-file"] == f["env"] == "/r/rank1.env.json"
    assert opts["--cwd"] == "/r" and opts["--max-restarts"] == "3"


def test_keeper_argv_is_what_the_supervisor_accepts():
    dmn = load_program("mlx_server", "mlx_server_daemon.py")
    argv = ms.keeper_argv("/py", "/d.py", run_dir="/r", rank=0, supervisor="process", max_restarts=2)
    args = dmn.parse_args(argv[2:] + ["--", "/py", "/s.py"])
    assert (args.detach, args.max_restarts, args.heartbeat, args.command) == (
        True,
        2,
        "/r/rank0.json",
        ["/py", "/s.py"],
    )


# --- launchctl, processes, rank files ---

# Built from the layout `launchctl print` uses on macOS 14/15 (top-level keys one tab deep,
# nested blocks deeper); not a capture from a real Mac.
LAUNCHCTL_RUNNING = """system/org.mlx-cluster.server = {
\tactive count = 1
\tpath = /Library/LaunchDaemons/org.mlx-cluster.server.plist
\ttype = LaunchDaemon
\tstate = running

\tprogram = /Users/admin/mlx-cluster/venv/bin/python
\targuments = {
\t\t/Users/admin/mlx-cluster/venv/bin/python
\t\t--run-dir
\t}

\tenvironment = {
\t\tMLX_RANK => 1
\t\tpid = 999
\t}

\tpid = 4242
\timmediate reason = speculative
\tforks = 0
\texecs = 1
\tlast exit code = (never exited)
}
"""
LAUNCHCTL_WAITING = (
    LAUNCHCTL_RUNNING.replace("\tstate = running", "\tstate = not running")
    .replace("\tpid = 4242\n", "")
    .replace("(never exited)", "7")
)


def test_parse_launchctl_print():
    assert ms.parse_launchctl_print(LAUNCHCTL_RUNNING) == {
        "loaded": True,
        "state": "running",
        "pid": 4242,
        "last_exit_code": "(never exited)",
        "path": "/Library/LaunchDaemons/org.mlx-cluster.server.plist",
    }
    waiting = ms.parse_launchctl_print(LAUNCHCTL_WAITING)
    assert (waiting["state"], waiting["pid"], waiting["last_exit_code"]) == ("not running", None, 7)
    assert ms.parse_launchctl_print("") == {
        "loaded": False,
        "state": None,
        "pid": None,
        "last_exit_code": None,
        "path": None,
    }


PS_LINE = "  4242 /venv/bin/python /r/mlx_cluster_server.py --model /m --run-dir /r --run-id abc123"


@pytest.mark.parametrize(
    "line, pid, run_dir, run_id, want",
    [
        (PS_LINE, 4242, "/r", "abc123", True),
        (PS_LINE, 4242, "/r", None, True),
        (PS_LINE, 4242, "/r", "other", False),  # another start's process
        (PS_LINE, 4242, "/elsewhere", "abc123", False),  # another server
        (PS_LINE, 4243, "/r", "abc123", False),  # not the PID asked about
        ("  4242 /usr/bin/vim /r --run-dir", 4242, "/r", None, False),  # a reused PID
        ("", 4242, "/r", None, False),
    ],
)
def test_process_matches_by_pid_run_dir_and_run_id(line, pid, run_dir, run_id, want):
    assert ms.process_matches(line, pid, run_dir, run_id) is want


def test_processes_with_a_run_id_only_whole_arguments():
    ps = "\n".join(
        [
            "  1 /sbin/launchd",
            PS_LINE,
            "  77 python other.py --run-id abc1234",
            "  78 python watchdog.py abc123",
            "  99 ps -ax",
        ]
    )
    assert [p["pid"] for p in processes_with(ps, "abc123", own_pid=99)] == [4242, 78]


def test_ranks_in_prefers_live_files():
    assert ms.ranks_in(["rank1.log", "rank1.last.json", "state.json", "x.pid"]) == [1]
    assert ms.ranks_in(["rank3.log", "rank1.json", "rank2.pid"]) == [2, 1, 3]
    assert ms.ranks_in(["mlx_cluster_server.py"]) == []


@pytest.mark.parametrize(
    "status, want",
    [
        ({"rank": 0, "running": True, "settings_hash": "h", "phase": "ready"}, []),
        ({"rank": 0, "running": True, "settings_hash": "h", "phase": "loading"}, []),
        ({"rank": 1, "running": False, "phase": "failed", "message": "boom"}, ["rank 1 is not running (failed: boom)"]),
        ({"rank": 1, "running": False, "phase": None}, ["rank 1 is not running (never started)"]),
        (
            {"rank": 0, "running": True, "settings_hash": "old0000000000000", "phase": "ready"},
            ["rank 0 runs other settings (old000000000, want h)"],
        ),
    ],
)
def test_problems(status, want):
    assert ms.problems(status, "h", "process") == want


def test_problems_name_a_stalled_rank_and_a_missing_supervisor():
    st = {
        "rank": 1,
        "running": True,
        "settings_hash": "h",
        "phase": "ready",
        "progress": {"stalled": "generation stalled: no token for 130s"},
        "supervisor": {"running": False},
    }
    assert ms.problems(st, "h", "process") == [
        "rank 1 is stalled: generation stalled: no token for 130s",
        "rank 1 runs without its supervisor (no watchdog, no restart)",
    ]
    assert ms.problems({**st, "progress": {"stalled": ""}, "supervisor": {"running": True}}, "h", "process") == []


def test_progress_report_and_line():
    info = {
        "phase": "ready",
        "progress": {
            "progress_mono": 100.0,
            "stall_timeout": 60,
            "generating": True,
            "tokens": 45,
            "requests_done": 3,
            "queue_depth": 2,
            "last_turn_at": 1.7e9,
            "last_token_at": 1.7e9 + 5,
        },
    }
    rep = ms.progress_report(info, 100.25, 1.7e9 + 6)
    assert rep == {
        "generating": True,
        "tokens": 45,
        "requests_done": 3,
        "queue_depth": 2,
        "last_turn_at": 1.7e9,
        "last_token_at": 1.7e9 + 5,
        "seconds_since_progress": 0.2,
        "stall_timeout": 60,
        "stalled": "",
    }
    assert ms.progress_line(rep) == "3 request(s) done, generating (45 token(s), last progress 0.2s ago), 2 waiting"
    late = ms.progress_report(info, 200.0, 0)
    assert late["stalled"].startswith("generation stalled: no token for 100s (bound 60s)")
    assert ms.progress_line(late).startswith("STALLED: generation stalled")
    # loading, or gone: never "stalled"; before serving: no report
    assert ms.progress_report({**info, "phase": "loading"}, 200.0, 0)["stalled"] == ""
    assert ms.progress_report({"phase": "loading"}, 200.0, 0) is None and ms.progress_line(None) == ""
    idle = ms.progress_report({"phase": "ready", "progress": {"progress_mono": 10.0, "stall_timeout": 60}}, 11.0, 0)
    assert ms.progress_line(idle) == "0 request(s) done, idle (last turn 1.0s ago)"


def test_problems_launchd_needs_a_loaded_job():
    st = {"rank": 0, "running": True, "settings_hash": "h", "phase": "ready", "launchd": {"loaded": False}}
    assert ms.problems(st, "h", "launchd") == ["rank 0 is not a loaded launchd job"]
    assert ms.problems({**st, "launchd": {"loaded": True}}, "h", "launchd") == []


def test_the_run_directory_is_read_without_following_links(tmp_path):
    secret = tmp_path / "not-the-servers"
    secret.write_text('{"run_id": "' + "s" * 24 + '"}')
    (tmp_path / "rank0.json").symlink_to(secret)
    (tmp_path / "rank0.pid").symlink_to(tmp_path / "pid-elsewhere")
    (tmp_path / "pid-elsewhere").write_text("1\n")
    assert ms.read_json(str(tmp_path / "rank0.json")) == {}
    assert ms.read_pid(str(tmp_path / "rank0.pid")) is None
    (tmp_path / "rank1.json").write_text('{"run_id": "x"}')
    assert ms.read_json(str(tmp_path / "rank1.json")) == {"run_id": "x"}
    # a FIFO the user left in the run directory: root's read fails at once, never blocks
    os.mkfifo(tmp_path / "rank2.json")
    os.mkfifo(tmp_path / "rank2.pid")
    assert ms.read_json(str(tmp_path / "rank2.json")) == {}
    assert ms.read_pid(str(tmp_path / "rank2.pid")) is None


@pytest.mark.parametrize(
    "run_id, ok",
    [
        ("a1" * 12, True),
        ("r" * 24, True),
        ("bash", False),
        ("A" * 24, False),
        ("a" * 23, False),
        ("a" * 25, False),
        ("--run-dir", False),
        ("a" * 24 + "\n", False),
    ],
)
def test_a_run_id_is_used_only_in_the_form_the_toolkit_makes(run_id, ok):
    assert bool(ms.RUN_ID_RE.fullmatch(run_id)) is ok


@pytest.mark.parametrize("item", ["A\n=1", "1A=2", "A B=3", "=4", "NOVALUE"])
def test_an_environment_entry_needs_a_variable_name(item):
    with pytest.raises(ms.SpecError, match="not KEY=VALUE"):
        ms.split_env(["OK=1", item])


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="dropping to another user needs root")
def test_root_goes_on_as_the_owner_of_the_run_directory(tmp_path):
    import os

    run_dir = tmp_path / "server"
    run_dir.mkdir()
    os.chown(run_dir, 4242, 4343)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the drop is for good: in a child
        os.close(r)
        try:
            got = ms.become_owner(str(run_dir))
            os.write(w, json.dumps([got, os.getuid(), os.geteuid(), os.getgid()]).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        said = json.loads(f.read() or "null")
    os.waitpid(pid, 0)
    assert said == [4242, 4242, 4242, 4343]
    os.chown(run_dir, 0, 0)
    assert ms.become_owner(str(run_dir)) is None and os.geteuid() == 0  # root's own: nothing to drop to
    (tmp_path / "link").symlink_to(run_dir)
    with pytest.raises(OSError, match="symbolic link"):
        ms.become_owner(str(tmp_path / "link"))


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="reading as another user needs root")
def test_root_reads_the_run_directory_as_its_owner_and_is_root_again_after(tmp_path, request):
    """The status runs `launchctl print` as root and reads the user's files as the user: inside
    the block the effective ids (and groups) are the owner's, so a file only root may read is
    refused; after it, root's own ids and groups are back."""
    import os
    import shutil
    import tempfile

    # (pytest's own tmp_path sits below a 0700 directory of root's: the owner could not reach it)
    top = Path(tempfile.mkdtemp(prefix="mlx-owner-"))
    request.addfinalizer(lambda: shutil.rmtree(top, ignore_errors=True))
    os.chmod(top, 0o711)
    run_dir = top / "server"
    run_dir.mkdir()
    (run_dir / "rank0.json").write_text("{}")
    (run_dir / "secret").write_text("root's")
    os.chown(run_dir, 4242, 4343)
    os.chown(run_dir / "rank0.json", 4242, 4343)
    os.chmod(run_dir / "rank0.json", 0o600)
    os.chmod(run_dir / "secret", 0o600)
    before = (os.geteuid(), os.getegid(), sorted(os.getgroups()))
    with ms.reading_as_owner(str(run_dir)) as uid:
        inside = (uid, os.geteuid(), os.getegid(), os.getuid())
        assert (run_dir / "rank0.json").read_text() == "{}"
        with pytest.raises(PermissionError):
            (run_dir / "secret").read_text()
    assert inside == (4242, 4242, 4343, 0)
    assert (os.geteuid(), os.getegid(), sorted(os.getgroups())) == before
    # root comes back after an error in the block too
    with pytest.raises(ValueError), ms.reading_as_owner(str(run_dir)):
        raise ValueError("boom")
    assert os.geteuid() == 0
    os.chown(run_dir, 0, 0)
    with ms.reading_as_owner(str(run_dir)) as uid:
        assert uid is None and os.geteuid() == 0  # root's own: nothing to drop to
    (tmp_path / "link").symlink_to(run_dir)
    with pytest.raises(OSError, match="symbolic link"), ms.reading_as_owner(str(tmp_path / "link")):
        pass
