"""mlx_run: every command bounded in time, killed with its whole process group, named with a fix.

Real processes (sh, sleep, cat) are run; only the PIDs these tests start are looked at."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils import mlx_run
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import (
    CommandTimeout,
    Runner,
    command_text,
    fix_for,
    run_bounded,
)


def running(pid):
    """True while `pid` runs (a zombie, or no such process, is not running)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS): ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def wait_not_running(pids, seconds=3.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(running(p) for p in pids):
        time.sleep(0.02)
    return [p for p in pids if running(p)]


def test_answers_rc_stdout_stderr_in_the_c_locale_without_a_shell():
    rc, out, err = run_bounded(["sh", "-c", 'echo "$LC_ALL $LANG"; echo oops >&2; exit 3'], 5)
    assert (rc, out, err) == (3, "C C\n", "oops\n")
    # argv is passed as is: no shell sees `;` or `$HOME`
    assert run_bounded(["echo", "a;b", "$HOME"], 5) == (0, "a;b $HOME\n", "")


def test_stdin_is_closed_so_a_reader_ends_at_once():
    start = time.monotonic()
    assert run_bounded(["cat"], 5) == (0, "", "")
    assert time.monotonic() - start < 2


def test_a_missing_program_raises_oserror():
    with pytest.raises(OSError):
        run_bounded(["/nonexistent/mlx-cluster/ibv_devinfo"], 5)


def test_a_command_that_does_not_answer_is_killed_with_its_whole_group(tmp_path):
    """sh (the group leader) starts a sleep in its group: both die at the bound."""
    start = time.monotonic()
    with pytest.raises(CommandTimeout) as info:
        run_bounded(["sh", "-c", "sleep 30 & echo $$ $!; wait"], 0.5)
    took = time.monotonic() - start
    assert 0.5 <= took < 0.5 + mlx_run.KILL_GRACE, took
    leader, child = (int(x) for x in info.value.stdout.split())
    assert leader != child
    assert wait_not_running([leader, child]) == []


def test_the_command_leads_a_session_and_group_of_its_own():
    rc, out, _ = run_bounded([sys.executable, "-c", "import os; print(os.getsid(0), os.getpgid(0), os.getpid())"], 10)
    sid, pgid, pid = (int(x) for x in out.split())
    assert rc == 0 and sid == pgid == pid and sid != os.getsid(0)


@pytest.mark.parametrize("streamed", [False, True], ids=["piped", "streamed"])
def test_a_process_that_escapes_the_group_with_the_pipes_does_not_hold_the_caller(tmp_path, streamed):
    """Like a command stuck in the kernel (SIGKILL does not end it): left behind after
    KILL_GRACE, the caller is not held, whether it reads the output at the end or as it comes."""
    pidfile = tmp_path / "pid"
    extra = {"on_output": lambda text: None} if streamed else {}
    start = time.monotonic()
    try:
        with pytest.raises(CommandTimeout):
            run_bounded(["sh", "-c", f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 30' & wait"], 0.5, **extra)
        took = time.monotonic() - start
        assert took < 0.5 + mlx_run.KILL_GRACE + 1.5, took
    finally:
        deadline = time.monotonic() + 3
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        if pidfile.exists() and pidfile.read_text().strip():
            os.kill(int(pidfile.read_text()), signal.SIGKILL)  # the one process this test escaped


@pytest.mark.parametrize(
    "argv, words",
    [
        pytest.param(
            ["/usr/bin/ibv_devinfo", "-v"], ["RDMA looks wedged", "replug", "reboot the Mac"], id="ibv_devinfo"
        ),
        pytest.param(["/usr/bin/ibv_devices"], ["RDMA looks wedged", "replug"], id="ibv_devices"),
        pytest.param(["/usr/bin/rdma_ctl", "status"], ["RDMA looks wedged"], id="rdma_ctl"),
        pytest.param(
            ["/usr/sbin/system_profiler", "SPThunderboltDataType", "-json"],
            ["cannot read the Thunderbolt bus", "unplug the Thunderbolt cables", "reboot the Mac"],
            id="system_profiler",
        ),
        pytest.param(
            ["/usr/sbin/networksetup", "-getinfo", "Thunderbolt 1"], ["configd", "reboot the Mac"], id="networksetup"
        ),
        pytest.param(["/sbin/ifconfig"], ["by hand", "mlx_cluster_command_timeout"], id="generic"),
    ],
)
def test_the_message_names_the_command_the_bound_and_a_fix(argv, words):
    exc = CommandTimeout(argv, 5)
    name = command_text(argv)
    assert exc.msg.startswith(f"`{name}` did not answer within 5 s on this Mac")
    assert "/usr" not in name and exc.fix == fix_for(argv)
    assert all(w in exc.msg for w in words), exc.msg
    assert exc.result()["cmd"] == argv and exc.result()["timeout"] == 5


def test_the_runner_applies_its_bound_and_a_longer_one_when_asked(monkeypatch):
    seen = []
    monkeypatch.setattr(
        mlx_run, "spawn", lambda argv, timeout, env=None, data=None: seen.append(timeout) or (0, "", "")
    )
    runner = Runner(7)
    runner.run(["sw_vers"])
    runner.run(["launchctl", "bootout", "system/x"], timeout=40)
    assert seen == [7, 40]


def test_standard_input_is_given_when_asked_and_closed_otherwise():
    assert run_bounded(["cat"], 5, data="lock\ncommit\n")[1] == "lock\ncommit\n"
    assert run_bounded(["cat"], 5) == (0, "", "")


def test_standard_output_is_handed_over_as_it_arrives():
    """A command that prints, then waits: the first piece comes before the command ends."""
    seen = []
    start = time.monotonic()
    script = "import sys, time; print('a', flush=True); sys.stderr.write('e'); time.sleep(1); print('b')"
    rc, out, err = run_bounded(
        [sys.executable, "-c", script], 10, on_output=lambda text: seen.append((time.monotonic() - start, text))
    )
    assert (rc, out, err) == (0, "a\nb\n", "e")
    assert "".join(t for _, t in seen) == "a\nb\n"
    # what was said before the 1 s pause arrived well before what came after it (in any pieces)
    b_at = next(t for t, text in seen if "b" in text)
    assert "".join(text for t, text in seen if t < b_at - 0.5) == "a\n", seen


def test_a_streamed_command_that_does_not_answer_keeps_what_it_said(tmp_path):
    seen = []
    start = time.monotonic()
    with pytest.raises(CommandTimeout) as info:
        run_bounded(["sh", "-c", "echo 12% ; echo half >&2; sleep 30 & wait"], 0.5, on_output=seen.append)
    assert time.monotonic() - start < 0.5 + mlx_run.KILL_GRACE + 1
    assert seen == ["12%\n"] and info.value.stdout == "12%\n" and info.value.stderr == "half\n"


@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/stat"), reason="a zombie is told from /proc (Linux)")
def test_alive_counts_a_zombie_as_gone_only_when_asked():
    proc = subprocess.Popen(["true"])
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and running(proc.pid):
        time.sleep(0.02)
    assert not running(proc.pid)  # exited, not yet reaped: a zombie
    assert mlx_run.alive(proc.pid) and not mlx_run.alive(proc.pid, zombie_is_gone=True)
    proc.wait()
    assert not mlx_run.alive(proc.pid) and not mlx_run.alive(proc.pid, zombie_is_gone=True)
    assert mlx_run.alive(os.getpid()) and mlx_run.alive(os.getpid(), zombie_is_gone=True)
