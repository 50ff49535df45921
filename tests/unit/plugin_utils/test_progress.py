"""plugins/plugin_utils/progress.py: the progress lines and the polling loop of the action plugins
(model_rsync, mlx_launch), with a fake clock and fake jobs; the remote read (`wait_command`) for
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
from ansible_collections.mlx.cluster.plugins.plugin_utils.progress import (GONE, copy_line, human_bytes, launch_line, wait_command,
                                                                  wait_for_job)

RUNNING = {"started": True, "finished": False, "ansible_job_id": "j1.2"}
DONE = {"changed": True, "transferred": ["model.safetensors"], "finished": True, "ansible_job_id": "j1.2"}


@pytest.mark.parametrize("n, text", [(0, "0 B"), (999, "999 B"), (1000, "1.0 KB"), (1_234_567, "1.2 MB"),
                                     (3_400_000_000, "3.4 GB"), (2.5e13, "25.0 TB")])
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
    return {"size": size, "host": host, "kind": kind, "step": step, "of": of,
            "line": f"{kind} {step}/{of}: prompt_tps=1.0, generation_tps=2.0"}


def test_launch_line_shows_the_most_advanced_rank_and_the_ones_behind():
    both = {"ranks": {"0": rank("m1", "trial", 2), "1": rank("m2", "trial", 2)}, "seq": 6}
    assert launch_line(both) == "[rank 0/2 m1] trial 2/3: prompt_tps=1.0, generation_tps=2.0"
    behind = {"ranks": {"0": rank("m1", "warm-up", 1), "1": rank("m2", "trial", 1)}}
    assert launch_line(behind) == ("[rank 1/2 m2] trial 1/3: prompt_tps=1.0, generation_tps=2.0; "
                                   "behind: rank 0 (m1) at warm-up 1/3")
    one = {"ranks": {"1": rank("m2", "warm-up", 1, size=3)}}
    assert launch_line(one).endswith("; 2 rank(s) not yet started")
    assert launch_line({"ranks": {}}) is None and launch_line(None) is None


class FakeJob:
    """A copy on a fake clock, as the machine would answer the action's reads and status calls.

    The module writes its progress file from `file_at` s, sends `rate` bytes/s, and writes
    `done` at `ends` (unless `writes_done` is False: it died); async_wrapper writes the job's
    result `RESULT_LAG` s later and then removes the job's directory (unless `dir_stays`).
    A read waits as `wait_command` does (pauses of WAIT_STEP while the file is there without done
    and the directory is there), plus a round trip; a status call costs a Python run."""

    RTT = 0.05          # one command over the connection
    STATUS_COST = 0.3   # one async_status run
    RESULT_LAG = 0.1    # the module's exit to the job's result written
    DIR_LAG = 0.05      # the result written to the directory removed

    def __init__(self, ends, file_at=0.3, rate=1_000_000, writes_done=True, dir_stays=False, result=None,
                 read_errors=(), status_errors=()):
        self.now = 0.0
        self.ends, self.file_at, self.rate = ends, file_at, rate
        self.writes_done, self.dir_stays = writes_done, dir_stays
        self.result = result or DONE
        self.read_errors, self.status_errors = set(read_errors), set(status_errors)  # calls (1-based) that fail
        self.reads, self.waits, self.status_calls, self.shown = 0, [], 0, []

    def clock(self):
        return self.now

    def sleep(self, s):
        assert s > 0
        self.now += s

    def finished_at(self):
        return self.ends + self.RESULT_LAG

    def gone(self, t):
        return not self.dir_stays and t >= self.finished_at() + self.DIR_LAG

    def done(self, t):
        return self.writes_done and t >= self.ends

    def state(self, t):
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
        while pauses > 0 and not self.gone(self.now) and not self.done(self.now):
            self.now += progress.WAIT_STEP
            pauses -= 1
        self.now += self.RTT
        return GONE if self.gone(self.now) else self.state(self.now)

    def status(self):
        self.status_calls += 1
        self.now += self.STATUS_COST
        if self.status_calls in self.status_errors:
            raise AnsibleConnectionFailure("ssh: connection reset")
        return self.result if self.now >= self.finished_at() else RUNNING

    def wait(self, interval=10, limit=1000, render=copy_line):
        return wait_for_job(self.status, self.read, lambda line: self.shown.append((self.now, line)), render,
                            interval, limit, clock=self.clock, sleep=self.sleep)


def copying(n, total=10_000_000, done=False):
    return {"bytes": n, "total": total, "rate": 1_000_000, "files": 0, "done": done}


@pytest.mark.parametrize("interval", [1, 2, 10, 60])
def test_a_long_copy_shows_lines_at_most_every_interval_then_returns_the_result(interval):
    job = FakeJob(ends=120)
    assert job.wait(interval=interval) == DONE
    times = [t for t, _ in job.shown]
    assert times and times[0] >= interval
    assert all(b - a >= interval for a, b in zip(times, times[1:]))
    # a line when it is due, not much later: the reads wait until then
    assert all(b - a < interval + 1 for a, b in zip([0] + times, times))
    assert all(line.startswith("model: ") for _, line in job.shown)


def test_a_long_copy_costs_a_read_every_few_seconds_and_a_status_call_every_half_minute():
    """Over two minutes at the roles' default interval (10 s): a read each WAIT_MAX s (was one a
    second), the status every STATUS_EVERY s and once at the end (was every 5 s)."""
    job = FakeJob(ends=120)
    assert job.wait(interval=10) == DONE
    assert job.reads <= 120 / progress.WAIT_MAX + 3
    assert job.status_calls <= 120 / progress.STATUS_EVERY + 2
    assert max(job.waits) <= progress.WAIT_MAX


def test_the_end_is_noticed_within_about_a_second():
    for ends in (0.5, 3.7, 61.2):
        job = FakeJob(ends=ends)
        assert job.wait(interval=10) == DONE
        assert job.now - job.finished_at() < 1.0, ends


def test_a_short_copy_shows_nothing():
    job = FakeJob(ends=1.5)
    assert job.wait(interval=10) == DONE and job.shown == []
    assert job.now < 2.5 and job.status_calls <= 2


def test_nothing_to_copy_shows_nothing_however_long():
    job = FakeJob(ends=45, rate=0)
    assert job.wait(interval=1) == DONE and job.shown == []


def test_the_end_is_noticed_when_the_directory_goes_without_done():
    """The module failed (no done written): async_wrapper writes the result and removes the job's
    directory, which ends the read's wait."""
    failed = {"failed": True, "msg": "rsync: connection unexpectedly closed", "finished": True}
    job = FakeJob(ends=33.3, writes_done=False, result=failed)
    assert job.wait(interval=10) == failed
    assert job.now - job.finished_at() < 1.0


def test_a_job_that_fails_before_writing_progress_is_found_early():
    failed = {"failed": True, "msg": "refusing to sync into m2:/: the destination is / (the whole disk)",
              "finished": True}
    job = FakeJob(ends=0.2, file_at=10, writes_done=False, result=failed)
    assert job.wait() == failed and job.now < 1.5


def test_a_job_that_died_leaving_its_file_is_found_within_the_bound():
    """Its wrapper killed (or ANSIBLE_KEEP_REMOTE_FILES): the file stays without done, nothing
    ends the reads' waits; the status every STATUS_EVERY s finds it."""
    killed = {"failed": True, "msg": "killed", "finished": True}
    job = FakeJob(ends=40, writes_done=False, dir_stays=True, result=killed)
    assert job.wait(interval=10) == killed
    assert job.now - job.finished_at() <= progress.STATUS_EVERY + progress.WAIT_MAX + 1


def test_the_status_is_not_asked_before_the_job_ends_or_half_a_minute():
    job = FakeJob(ends=25)
    assert job.wait(interval=10) == DONE
    assert job.status_calls == 1


def test_a_read_that_comes_back_early_is_not_repeated_at_once():
    """A read that returns before its wait without the job having ended (it cannot with the
    module's files): at most one read per TICK, not a loop of commands."""
    job = FakeJob(ends=30)
    job.read = lambda wait: (job.waits.append(wait), copying(1000))[1]
    job.status = lambda: DONE if job.now >= 30 else RUNNING
    assert job.wait(interval=100) == DONE
    assert len(job.waits) <= 30 / progress.TICK + 2


def test_a_dropped_connection_is_retried_then_given_up():
    job = FakeJob(ends=20, read_errors={2}, status_errors={1})
    assert job.wait() == DONE
    dead = FakeJob(ends=20, read_errors=set(range(1, 100)), status_errors=set(range(1, 100)))
    with pytest.raises(AnsibleConnectionFailure):
        dead.wait()
    assert dead.status_calls == progress.POLL_ERRORS and dead.now < 5


def test_a_job_that_never_ends_is_given_up_after_its_limit():
    job = FakeJob(ends=10_000)
    result = job.wait(limit=100)
    assert result["failed"] is True and "did not end within 100 s" in result["msg"]
    assert 100 <= job.now < 102
    assert job.status_calls <= 100 / progress.STATUS_EVERY + 1


def test_a_job_whose_status_cannot_be_found_ends_the_wait():
    gone = {"failed": True, "msg": "could not find job", "started": True, "finished": True}
    job = FakeJob(ends=5, result=gone)
    assert job.wait() == gone


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
