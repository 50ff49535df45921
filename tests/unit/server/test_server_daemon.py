"""roles/mlx_server/files/mlx_server_daemon.py, the supervisor of one rank: its pure rules
(restart or not, spacing), then the real program over small stand-in ranks (Python scripts that
write a heartbeat as the server does, then stall, exit with a code, or wait for SIGTERM).

Every process started here is ended by its PID in a finally block."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.programs import load_program, program_path

DAEMON = program_path("mlx_server", "mlx_server_daemon.py")


@pytest.fixture(scope="module")
def dmn():
    return load_program("mlx_server", "mlx_server_daemon.py")


# ---- pure rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rc, recent, action",
    [
        (0, 0, "stop"),
        (2, 0, "failed"),
        (7, 0, "restart"),
        (7, 2, "restart"),
        (7, 3, "give_up"),
        (-9, 0, "restart"),
        (3, 3, "give_up"),
        (0, 9, "stop"),
    ],
    ids=["clean", "bad-args", "lost-peer", "third", "over-budget", "killed", "init-over-budget", "clean-always"],
)
def test_decide(dmn, rc, recent, action):
    assert dmn.decide(rc, recent, 3)[0] == action


def test_restarts_are_spaced_more_and_more_up_to_a_cap(dmn):
    assert [dmn.restart_delay(n, 10) for n in (1, 2, 3, 4)] == [10, 20, 40, 80]
    assert dmn.restart_delay(30, 10) == dmn.MAX_DELAY


def test_exit_descriptions(dmn):
    assert dmn.describe_exit(7) == "exit code 7" and dmn.describe_exit(-9) == "killed by signal 9"


def test_the_give_up_message_names_the_mac_the_log_and_the_fix(dmn):
    msg = dmn.give_up_message("studio-2", 3, 3600, "/x/rank1.log")
    assert msg.startswith("on studio-2 its supervisor gave up after 3 restart(s) within 3600s")
    assert "/x/rank1.log on studio-2" in msg
    assert "reboot studio-2" in msg and "--tags server" in msg


# ---- the real supervisor over stand-in ranks ---------------------------------------------

FAKE_RANK = r"""
import json, os, signal, sys, time
mode, run_dir = sys.argv[1], sys.argv[2]
with open(os.path.join(run_dir, "starts.log"), "a") as f:
    f.write(f"{os.getpid()}\n")
def beat(**progress):
    data = {"pid": os.getpid(), "rank": 0, "phase": "ready", "message": "serving",
            "progress": {"progress_mono": time.monotonic(), "stall_timeout": 1.5, "generating": True,
                         "tokens": 2, **progress}}
    tmp = os.path.join(run_dir, "rank0.json.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, os.path.join(run_dir, "rank0.json"))
if mode == "stall":           # ready, then no progress at all
    beat(); time.sleep(60)
elif mode == "beat":          # ready and making progress
    while True:
        beat(); time.sleep(0.3)
elif mode.startswith("exit"):
    beat(); sys.exit(int(mode[4:]))
elif mode == "term":          # stops cleanly on SIGTERM, as the server does
    def stop(*_):
        open(os.path.join(run_dir, "got-sigterm"), "w").close(); sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    beat(); time.sleep(60)
"""


class Supervised:
    def __init__(self, tmp_path, mode, *extra, detach=False):
        self.dir = tmp_path
        (tmp_path / "fake_rank.py").write_text(FAKE_RANK)
        self.argv = [
            sys.executable,
            str(DAEMON),
            "--pidfile",
            str(tmp_path / "rank0.pid"),
            "--own-pidfile",
            str(tmp_path / "keeper0.pid"),
            "--state",
            str(tmp_path / "keeper0.json"),
            "--heartbeat",
            str(tmp_path / "rank0.json"),
            "--log",
            str(tmp_path / "rank0.log"),
            "--cwd",
            str(tmp_path),
            *extra,
            *(["--detach"] if detach else []),
            "--",
            sys.executable,
            str(tmp_path / "fake_rank.py"),
            mode,
            str(tmp_path),
        ]
        self.proc = None
        self.started = time.monotonic()
        if detach:
            self.out = subprocess.run(self.argv, capture_output=True, text=True, timeout=30)
        else:
            self.log = open(tmp_path / "rank0.log", "a")
            self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def starts(self):
        path = self.dir / "starts.log"
        return [int(x) for x in path.read_text().split()] if path.exists() else []

    def state(self):
        return json.loads((self.dir / "keeper0.json").read_text())

    def rank(self):
        return json.loads((self.dir / "rank0.json").read_text())

    def wait(self, seconds):
        try:
            return self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            pytest.fail("the supervisor did not end:\n" + (self.dir / "rank0.log").read_text())

    def cleanup(self):
        pids = self.starts()
        for f in ("keeper0.pid",):
            if (self.dir / f).exists():
                pids.append(int((self.dir / f).read_text()))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(5)
            self.log.close()


@pytest.fixture
def supervised(tmp_path):
    made = []

    def start(mode, *extra, detach=False):
        s = Supervised(tmp_path, mode, *extra, detach=detach)
        made.append(s)
        return s

    yield start
    for s in made:
        s.cleanup()


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return True


def test_a_stalled_rank_is_killed_restarted_then_given_up_on(supervised):
    s = supervised("stall", "--max-restarts", "1", "--throttle", "0.2")
    assert s.wait(20) == 0  # it gave up: 0, so launchd leaves it down
    took = time.monotonic() - s.started
    first, second = s.starts()  # one restart, then no more
    assert gone(first) and gone(second)
    assert 3.0 <= took < 12, took  # two stalls of 1.5 s (+ the 1 s look) and a 0.2 s pause
    st = s.state()
    assert st["state"] == "gave_up" and st["child_pid"] is None
    assert [r["why"][:30] for r in st["restarts"]] == ["generation stalled: no token f"]
    rank = s.rank()
    assert rank["phase"] == "failed" and rank["pid"] == second
    # the rank's last word (the stall), then the supervisor's, naming this Mac and the fix
    assert rank["message"].startswith("generation stalled: no token for")
    assert f"; on {os.uname().nodename} its supervisor gave up after 1 restart(s)" in rank["message"]
    assert "--tags server" in rank["message"]
    assert st["message"].startswith("the rank failed again (generation stalled")
    log = (s.dir / "rank0.log").read_text()
    assert "killing it (SIGKILL)" in log and "restart 1 of 1 in 0.2s" in log


def test_a_rank_making_progress_is_left_alone(supervised):
    s = supervised("beat", "--throttle", "0.2")
    time.sleep(4)  # well past the 1.5 s bound
    assert s.proc.poll() is None and len(s.starts()) == 1
    assert s.state()["state"] == "running" and s.state()["child_pid"] == s.starts()[0]
    assert int((s.dir / "rank0.pid").read_text()) == s.starts()[0]
    os.kill(s.proc.pid, signal.SIGTERM)
    assert s.wait(10) == 0
    assert s.state()["state"] == "stopped"


def test_a_stopped_process_is_a_stall_too(supervised):
    """SIGSTOP (a frozen rank: it cannot act on any signal but SIGKILL) is ended the same way."""
    s = supervised("beat", "--max-restarts", "0")
    deadline = time.monotonic() + 10
    while not s.starts() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    os.kill(s.starts()[0], signal.SIGSTOP)
    assert s.wait(15) == 0
    assert gone(s.starts()[0])
    assert s.state()["state"] == "gave_up" and "no token for" in s.rank()["message"]


def test_a_lost_peer_exit_is_restarted_with_growing_pauses_up_to_the_bound(supervised):
    s = supervised("exit7", "--max-restarts", "2", "--throttle", "0.3")
    assert s.wait(20) == 0
    assert len(s.starts()) == 3  # the start and two restarts
    st = s.state()
    assert st["state"] == "gave_up" and [r["why"] for r in st["restarts"]] == ["exit code 7", "exit code 7"]
    at = [r["at"] for r in st["restarts"]]
    log = (s.dir / "rank0.log").read_text()
    assert "restart 1 of 2 in 0.3s" in log and "restart 2 of 2 in 0.6s" in log
    assert s.rank()["phase"] == "failed"
    assert s.rank()["message"].startswith("ended with exit code 7; on ") and "gave up" in s.rank()["message"]
    assert at == sorted(at)


@pytest.mark.parametrize("mode, state", [("exit0", "stopped"), ("exit2", "failed")])
def test_clean_exits_and_bad_arguments_are_not_restarted(supervised, mode, state):
    s = supervised(mode, "--throttle", "0.1")
    assert s.wait(10) == 0
    assert len(s.starts()) == 1 and s.state()["state"] == state


def test_sigterm_goes_to_the_rank_and_nothing_restarts(supervised):
    s = supervised("term", "--throttle", "0.1")
    deadline = time.monotonic() + 10
    while not (s.dir / "rank0.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(s.proc.pid, signal.SIGTERM)
    assert s.wait(10) == 0
    assert (s.dir / "got-sigterm").exists() and len(s.starts()) == 1
    assert s.state()["state"] == "stopped" and not (s.dir / "keeper0.pid").exists()


def test_sigterm_while_waiting_to_restart_ends_at_once(supervised):
    s = supervised("exit7", "--throttle", "30")
    deadline = time.monotonic() + 10
    while (not (s.dir / "keeper0.json").exists() or s.state()["state"] != "waiting") and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    os.kill(s.proc.pid, signal.SIGTERM)
    assert s.wait(5) == 0 and time.monotonic() - t0 < 3
    assert s.state()["state"] == "stopped" and len(s.starts()) == 1


def test_detached_supervisor_reports_both_pids_and_keeps_the_old_log(supervised, tmp_path):
    (tmp_path / "rank0.log").write_text("old run\n")
    s = supervised("beat", detach=True)
    assert s.out.returncode == 0, s.out.stderr
    said = json.loads(s.out.stdout)
    keeper = int((tmp_path / "keeper0.pid").read_text())
    assert said["supervisor"] == keeper and said["pid"] == int((tmp_path / "rank0.pid").read_text())
    deadline = time.monotonic() + 10
    while not s.starts() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert s.starts() == [said["pid"]]
    assert (tmp_path / "rank0.log.1").read_text() == "old run\n"
    assert oct((tmp_path / "keeper0.pid").stat().st_mode & 0o777) == "0o600"  # umask 077
    assert os.getsid(keeper) not in (os.getsid(0), keeper)  # its own session, not its leader
    os.kill(keeper, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while not (gone(keeper) and gone(said["pid"])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(keeper) and gone(said["pid"])


def test_detached_supervisor_reports_a_command_that_cannot_start(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            str(DAEMON),
            "--pidfile",
            str(tmp_path / "x.pid"),
            "--log",
            str(tmp_path / "x.log"),
            "--detach",
            "--",
            str(tmp_path / "no-such-program"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 1
    assert "could not start" in res.stderr and "No such file" in res.stderr


def test_the_rank_gets_the_env_file_and_no_launcher_variables(tmp_path):
    (tmp_path / "env.json").write_text(json.dumps({"GREETING": "hello"}))
    code = "import os; print(os.environ['GREETING'], os.environ.get('MLX_RANK'), flush=True)"
    res = subprocess.run(
        [
            sys.executable,
            str(DAEMON),
            "--pidfile",
            str(tmp_path / "x.pid"),
            "--env-file",
            str(tmp_path / "env.json"),
            "--cwd",
            str(tmp_path),
            "--",
            sys.executable,
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "MLX_RANK": "5"},
    )
    assert res.returncode == 0 and res.stdout.split() == ["hello", "None"]
