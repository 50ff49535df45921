"""plugins/plugin_utils/progress.py: the progress lines and the polling loop of the action plugins
(model_rsync, mlx_launch), with a fake clock, fake job states and fake progress files."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleConnectionFailure

from ansible_collections.mlx.cluster.plugins.plugin_utils import progress
from ansible_collections.mlx.cluster.plugins.plugin_utils.progress import copy_line, human_bytes, launch_line, wait_for_job

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
    """A job on a fake clock: `states` are the progress file's contents at each read (None: not
    there), `statuses` the async_status answers in turn (the last repeats)."""

    def __init__(self, states, statuses, errors=()):
        self.now = 0.0
        self.states = list(states)
        self.statuses = list(statuses)
        self.errors = set(errors)  # status calls (1-based) that raise a connection failure
        self.status_calls = 0
        self.shown = []

    def clock(self):
        return self.now

    def sleep(self, s):
        self.now += s

    def read(self):
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    def status(self):
        self.status_calls += 1
        if self.status_calls in self.errors:
            raise AnsibleConnectionFailure("ssh: connection reset")
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]

    def wait(self, interval=2, limit=100):
        return wait_for_job(self.status, self.read, lambda line: self.shown.append((self.now, line)), copy_line,
                            interval, limit, clock=self.clock, sleep=self.sleep)


def copying(n, total=10_000_000, done=False):
    return {"bytes": n, "total": total, "rate": 1_000_000, "files": 0, "done": done}


def test_a_long_copy_shows_lines_at_most_every_interval_then_returns_the_result():
    states = [None] + [copying(i * 500_000) for i in range(1, 20)] + [copying(10_000_000, done=True)]
    job = FakeJob(states, [RUNNING] * 8 + [DONE])
    result = job.wait(interval=2)
    assert result == DONE
    times = [t for t, _ in job.shown]
    assert len(times) >= 3 and times[0] >= 2
    assert all(b - a >= 2 for a, b in zip(times, times[1:]))
    assert all(line.startswith("model: ") for _, line in job.shown)


def test_a_short_copy_shows_nothing():
    job = FakeJob([copying(10_000_000, done=True)], [DONE])
    assert job.wait(interval=10) == DONE and job.shown == []
    assert job.now < 1  # asked at once when the file said done


def test_nothing_to_copy_shows_nothing_however_long():
    job = FakeJob([copying(0)] * 30 + [copying(0, done=True)], [RUNNING] * 5 + [DONE])
    assert job.wait(interval=1) == DONE and job.shown == []


def test_the_status_is_asked_at_once_when_the_progress_file_says_done():
    """Late in a long copy the status is asked only every STATUS_EVERY s; the module's last
    write (done) brings the answer at once."""
    job = FakeJob([copying(1000)] * 20 + [copying(2000, done=True)], [RUNNING])
    read, seen = job.read, {}

    def read_and_note():
        state = read()
        if state.get("done"):
            seen.setdefault("done_at", job.now)
        return state

    def status():
        job.status_calls += 1
        return DONE if "done_at" in seen else RUNNING  # the module wrote its last state: ended

    job.read, job.status = read_and_note, status
    assert job.wait(interval=100) == DONE
    assert seen["done_at"] > 15 and job.now == seen["done_at"]
    assert job.status_calls < 12


def test_the_status_is_asked_at_once_when_the_progress_file_goes():
    job = FakeJob([copying(1000), copying(2000), None], [RUNNING, RUNNING, DONE])
    job.wait(interval=100)
    assert job.now < 3 and job.status_calls <= 3


def test_a_job_that_fails_before_writing_progress_is_found_early():
    failed = {"failed": True, "msg": "refusing to sync into m2:/: the destination is / (the whole disk)",
              "finished": True}
    job = FakeJob([None], [failed])
    assert job.wait() == failed and job.now < 1


def test_a_dropped_connection_is_retried_then_given_up():
    job = FakeJob([copying(1000)] * 5 + [copying(5000, done=True)], [RUNNING, DONE], errors={1})
    assert job.wait() == DONE
    dead = FakeJob([None], [RUNNING], errors=set(range(1, 100)))
    with pytest.raises(AnsibleConnectionFailure):
        dead.wait()
    assert dead.status_calls == progress.POLL_ERRORS


def test_a_job_that_never_ends_is_given_up_after_its_limit():
    job = FakeJob([copying(1000)], [RUNNING])
    result = job.wait(limit=40)
    assert result["failed"] is True and "did not end within 40 s" in result["msg"]
    assert 40 < job.now < 45
    # the status is not asked more often than every STATUS_EVERY seconds once the gaps grew
    assert job.status_calls <= 40 / progress.STATUS_EVERY + 6


def test_a_job_whose_status_cannot_be_found_ends_the_wait():
    gone = {"failed": True, "msg": "could not find job", "started": True, "finished": True}
    assert FakeJob([None], [gone]).wait() == gone
