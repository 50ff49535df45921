"""plugins/plugin_utils/progress.py: the progress lines and the reading loop of the action plugins
(model_rsync, mlx_launch), with a fake clock and fake runs; the remote read (`wait_command`) for
real with /bin/sh on temporary files."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time

import pytest
from ansible.errors import AnsibleConnectionFailure

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_progress import ProgressWriter
from ansible_collections.mlx.cluster.plugins.plugin_utils import progress
from ansible_collections.mlx.cluster.plugins.plugin_utils.progress import (
    GONE,
    copy_line,
    human_bytes,
    launch_line,
    wait_command,
    watch,
)


@pytest.mark.parametrize(
    "n, text",
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.0 KB"),
        (1_234_567, "1.2 MB"),
        (3_400_000_000, "3.4 GB"),
        (2.5e13, "25.0 TB"),
    ],
)
def test_human_bytes(n, text):
    assert human_bytes(n) == text


def test_copy_line():
    state = {"bytes": 1_200_000_000, "total": 3_400_000_000, "rate": 850_000_000, "files": 1, "done": False}
    assert copy_line(state) == "model: 1.2/3.4 GB (35%), 850.0 MB/s"
    assert copy_line(dict(state, total=None, rate=None)) == "model: 1.2 GB sent"
    # a copy that resumes may send more than a share of the total: never above 100%
    assert copy_line(dict(state, bytes=4_000_000_000)).startswith("model: 4.0/3.4 GB (100%)")


@pytest.mark.parametrize("state", [None, {}, {"bytes": 0, "total": 10}, "junk", {"bytes": None}])
def test_nothing_copied_is_no_line(state):
    assert copy_line(state) is None


def rank(host, kind, step, of=3, size=2):
    return {
        "size": size,
        "host": host,
        "kind": kind,
        "step": step,
        "of": of,
        "line": f"{kind} {step}/{of}: prompt_tps=1.0, generation_tps=2.0",
    }


def test_launch_line_shows_the_most_advanced_rank_and_the_ones_behind():
    both = {"ranks": {"0": rank("m1", "trial", 2), "1": rank("m2", "trial", 2)}, "seq": 6}
    assert launch_line(both) == "[rank 0/2 m1] trial 2/3: prompt_tps=1.0, generation_tps=2.0"
    behind = {"ranks": {"0": rank("m1", "warm-up", 1), "1": rank("m2", "trial", 1)}}
    assert launch_line(behind) == (
        "[rank 1/2 m2] trial 1/3: prompt_tps=1.0, generation_tps=2.0; behind: rank 0 (m1) at warm-up 1/3"
    )
    one = {"ranks": {"1": rank("m2", "warm-up", 1, size=3)}}
    assert launch_line(one).endswith("; 2 rank(s) not yet started")
    assert launch_line({"ranks": {}}) is None and launch_line(None) is None


class FakeRun:
    """A copy on a fake clock, as the machine would answer the reading thread's reads.

    The module writes its progress file from `file_at` s, sends `rate` bytes/s, and writes
    `done` at `ends` (unless `writes_done` is False: it died); its run returns to the action
    RETURN_LAG s later (`stopped`). A read waits as `wait_command` does (pauses of WAIT_STEP while
    the file is there without done), plus a round trip."""

    RTT = 0.05  # one command over the connection
    RETURN_LAG = 0.1  # the module's exit to its result back in the action

    def __init__(self, ends, file_at=0.3, rate=1_000_000, writes_done=True, read_errors=(), gone_at=None):
        self.now = 0.0
        self.ends, self.file_at, self.rate, self.writes_done = ends, file_at, rate, writes_done
        self.read_errors = set(read_errors)  # reads (1-based) that fail
        self.gone_at = gone_at
        self.reads, self.waits, self.shown = 0, [], []

    def clock(self):
        return self.now

    def sleep(self, s):
        assert s > 0
        self.now += s

    def stopped(self):
        return self.now >= self.ends + self.RETURN_LAG

    def done(self, t):
        return self.writes_done and t >= self.ends

    def state(self, t):
        if self.gone_at is not None and t >= self.gone_at:
            return GONE
        if t < self.file_at:
            return None
        sent = self.rate * (min(t, self.ends) - self.file_at)
        return copying(int(sent), total=int(self.rate * self.ends) + 1, done=self.done(t))

    def read(self, wait):
        self.reads += 1
        self.waits.append(wait)
        if self.reads in self.read_errors:
            self.now += self.RTT
            raise AnsibleConnectionFailure("ssh: connection reset")
        pauses = math.ceil(wait / progress.WAIT_STEP - 1e-9)
        while pauses > 0 and not self.done(self.now):
            self.now += progress.WAIT_STEP
            pauses -= 1
        self.now += self.RTT
        return self.state(self.now)

    def show(self, line):
        assert not self.stopped(), "a line after the module's result"
        self.shown.append((self.now, line))

    def watch(self, interval=10, render=copy_line):
        return watch(self.read, self.show, render, interval, self.stopped, clock=self.clock, sleep=self.sleep)


def copying(n, total=10_000_000, done=False):
    return {"bytes": n, "total": total, "rate": 1_000_000, "files": 0, "done": done}


@pytest.mark.parametrize("interval", [1, 2, 10, 60])
def test_a_long_copy_shows_lines_at_most_every_interval(interval):
    run = FakeRun(ends=120)
    run.watch(interval=interval)
    times = [t for t, _ in run.shown]
    assert times and times[0] >= interval
    assert all(b - a >= interval for a, b in zip(times, times[1:]))
    # a line when it is due, not much later: the reads wait until then
    assert all(b - a < interval + 1 for a, b in zip([0] + times, times))
    assert all(line.startswith("model: ") for _, line in run.shown)


def test_a_long_copy_costs_a_read_every_few_seconds():
    """Over two minutes at the roles' default interval (10 s): a read each WAIT_MAX s at most
    (each waits on the machine), not one a second."""
    run = FakeRun(ends=120)
    reads = run.watch(interval=10)
    assert reads == run.reads <= 120 / progress.WAIT_MAX + 3
    assert max(run.waits) <= progress.WAIT_MAX


def test_the_reading_ends_within_about_a_second_of_done():
    for ends in (0.5, 3.7, 61.2):
        run = FakeRun(ends=ends)
        run.watch(interval=10)
        assert run.now - ends < 1.0, ends


def test_a_short_copy_shows_nothing():
    run = FakeRun(ends=1.5)
    run.watch(interval=10)
    assert run.shown == [] and run.now < 2.5


def test_nothing_to_copy_shows_nothing_however_long():
    run = FakeRun(ends=45, rate=0)
    run.watch(interval=1)
    assert run.shown == []


def test_a_module_that_ends_without_done_stops_the_reading_at_its_return():
    """The module failed or was killed (no done written): the action's own run returns, which
    stops the loop after the read under way (WAIT_MAX at most); nothing is shown after it."""
    run = FakeRun(ends=33.3, writes_done=False)
    run.watch(interval=10)
    assert run.stopped() and run.now - (run.ends + run.RETURN_LAG) <= progress.WAIT_MAX + run.RTT
    failed_early = FakeRun(ends=0.2, file_at=10, writes_done=False)
    failed_early.watch()
    assert failed_early.shown == [] and failed_early.now <= 0.3 + progress.WAIT_MAX + run.RTT


def test_a_read_that_comes_back_early_is_not_repeated_at_once():
    """A read that returns before its wait without the module being done (no file yet): at most
    one read per TICK, not a loop of commands."""
    run = FakeRun(ends=30)
    run.read = lambda wait: (run.waits.append(wait), None)[1]
    run.watch(interval=100)
    assert len(run.waits) <= 30 / progress.TICK + 2


def test_a_dropped_connection_is_retried_then_the_reading_stops():
    run = FakeRun(ends=20, read_errors={2})
    run.watch()
    assert run.now >= 20  # went on after one failed read
    dead = FakeRun(ends=20, read_errors=set(range(1, 100)))
    assert dead.watch() == progress.POLL_ERRORS and dead.now < 5


def test_the_file_gone_ends_the_reading():
    run = FakeRun(ends=100, gone_at=12)
    run.watch(interval=1)
    assert 12 <= run.now < 13


def test_the_done_text_is_what_the_progress_writer_writes(tmp_path):
    path = tmp_path / "p.json"
    writer = ProgressWriter(str(path))
    writer.update({"ranks": {"0": {"line": 'said "done": false'}}, "seq": 1, "done": False}, 0, force=True)
    assert progress.DONE_TEXT not in path.read_text()
    for state in (copying(5, done=True), {"ranks": {}, "seq": 3, "done": True}):
        writer.update(state, 1, force=True)
        assert progress.DONE_TEXT in path.read_text()


# The remote read for real, with the machine's /bin/sh (dash here: no bashisms get through).
SH = shutil.which("sh") or "/bin/sh"


def sh(command, timeout=20):
    started = time.monotonic()
    res = subprocess.run([SH, "-c", command], capture_output=True, text=True, timeout=timeout)
    return res.returncode, res.stdout, time.monotonic() - started


@pytest.fixture
def job_dir(tmp_path):
    d = tmp_path / "ansible-tmp-1.2 'x'; touch pwned #"  # spaces, quotes, a command
    d.mkdir()
    return d


def write(path, state):
    path.write_text(json.dumps(state, sort_keys=True))


def test_the_read_prints_the_file_at_once_when_asked_not_to_wait(job_dir):
    f = job_dir / progress.PROGRESS_NAME
    write(f, copying(1000))
    rc, out, took = sh(wait_command(str(f), 0))
    assert rc == 0 and json.loads(out) == copying(1000) and took < 1
    assert not (job_dir.parent / "pwned").exists() and not os.path.exists("pwned")


def test_the_read_waits_its_time_and_no_longer(job_dir):
    f = job_dir / progress.PROGRESS_NAME
    write(f, copying(1000))
    rc, out, took = sh(wait_command(str(f), 1.2))  # ceil(1.2 / 0.5): three pauses of 0.5 s
    assert rc == 0 and json.loads(out) == copying(1000)
    assert 1.4 <= took < 1.5 + 1.0


def test_the_read_waits_for_a_file_not_yet_written_then_says_nothing(job_dir):
    rc, out, took = sh(wait_command(str(job_dir / progress.PROGRESS_NAME), 1))
    assert rc == 0 and out == "" and 0.9 <= took < 2


def test_the_read_returns_promptly_when_the_file_says_done(job_dir):
    f = job_dir / progress.PROGRESS_NAME
    write(f, copying(1000))
    proc = subprocess.Popen([SH, "-c", wait_command(str(f), 5)], stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    ProgressWriter(str(f)).update(copying(2000, done=True), 0, force=True)  # as the module writes it
    started = time.monotonic()
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0 and json.loads(out)["done"] is True
    assert time.monotonic() - started < 1.0


def test_the_read_returns_promptly_when_the_directory_goes(job_dir):
    f = job_dir / progress.PROGRESS_NAME
    write(f, copying(1000))
    proc = subprocess.Popen([SH, "-c", wait_command(str(f), 5)], stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    shutil.rmtree(job_dir)  # as async_wrapper does when the job ends
    started = time.monotonic()
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode != 0 and out == ""
    assert time.monotonic() - started < 1.0


def test_the_read_is_bounded_in_bytes(job_dir):
    f = job_dir / progress.PROGRESS_NAME
    f.write_text("x" * 100)
    rc, out, _ = sh(wait_command(str(f), 0, read_max=10))
    assert rc == 0 and out == "x" * 10


def test_the_reads_get_a_master_connection_of_their_own():
    """sshd's MaxSessions (10) bounds one connection's sessions: the reads go over their own
    ControlPath, so a Mac sending k copies carries k sessions per master, not 2k on one."""
    import copy as _copy
    import io

    from ansible.playbook.play_context import PlayContext
    from ansible.plugins.loader import connection_loader

    task_conn = connection_loader.get("ssh", PlayContext(), io.StringIO())
    task_conn.set_option("control_path_dir", "/tmp/cp")
    reader = progress.own_master(_copy.copy(task_conn))
    assert task_conn.get_option("control_path_dir") == "/tmp/cp"  # the task's own is unchanged
    assert reader.get_option("control_path_dir") == "/tmp/cp/progress"
    task_conn.set_option("control_path", "%(directory)s/%%h-%%r")
    reader = progress.own_master(_copy.copy(task_conn))
    assert reader.get_option("control_path") == "%(directory)s/%%h-%%r-progress"
    assert task_conn.get_option("control_path") == "%(directory)s/%%h-%%r"
    local = connection_loader.get("local", PlayContext(), io.StringIO())
    assert progress.own_master(local) is local and not hasattr(local, "control_path_dir")
