"""library/model_receive.py and model_send.py: the receiver started detached for real (a process
of its own, from the module's own source), a copy into it over loopback, its result collected,
and nothing left running."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from ansible_collections.mlx.cluster.plugins.plugin_utils.progress import copy_line
from tests.unit.conftest import random_files

RUN_ID = "copy-run-0123456789abcdef"
TOKEN = "k" * 32


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie of this test process is gone for our purpose
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def started(module_runner, dest, files, **extra):
    args = {
        "state": "started",
        "path": str(dest),
        "files": files,
        "addresses": ["127.0.0.1"],
        "token": TOKEN,
        "run_id": RUN_ID,
        "stall_timeout": 10,
        "idle_timeout": 20,
    }
    args.update(extra)
    return module_runner("model_receive", args=args)


def send(module_runner, src, files, port, **extra):
    """model_send from `src` to the receiver on loopback at `port`, for m2."""
    args = {"path": str(src), "files": files, "address": "127.0.0.1", "port": port, "token": TOKEN, "label": "m2"}
    return module_runner("model_send", args=dict(args, **extra))


def ps(pid):
    """The `ps` answer model_receive reads before it ends a receiver: its real arguments."""
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        words = [w.decode() for w in fh.read().split(b"\0") if w]
    return {("ps", "-ww", "-o", "args=", "-p", str(pid)): (0, " ".join(words) + "\n", "")}


@pytest.fixture
def dirs(tmp_path):
    return tmp_path / "src" / "m", tmp_path / "mlx-cluster" / "models" / "m"


def test_the_model_arrives_through_the_detached_receiver_and_nothing_listens_after(module_runner, dirs):
    src, dest = dirs
    files = random_files(src, {"a.safetensors": 1_500_000, "config.json": 200, "t/tokenizer.json": 5000})
    out = started(module_runner, dest, files)
    assert not out.failed, out.result
    r = out.result
    assert r["changed"] and r["port"] and r["todo"][0] == "a.safetensors" and r["todo_bytes"] == 1_505_200
    pid = r["pid"]
    assert alive(pid)
    sent = send(module_runner, src, files, r["port"], streams=2)
    assert not sent.failed, sent.result
    assert sent.result["bytes"] == 1_505_200 and sent.result["changed"]
    done = module_runner(
        "model_receive",
        args={"state": "finished", "path": str(dest), "run_id": RUN_ID, "wait": 10},
        commands=ps(pid) if alive(pid) else {},
    )
    assert not done.failed, done.result
    assert done.result["copied"] == sorted(files) and done.result["problems"] == [] and done.result["missing"] == []
    for rel in files:
        assert (dest / rel).read_bytes() == (src / rel).read_bytes()
    for _ in range(50):
        if not alive(pid):
            break
        time.sleep(0.1)
    assert not alive(pid)
    # a re-run: everything is in place, no receiver starts, nothing changes
    again = started(module_runner, dest, files)
    assert again.result["changed"] is False and again.result["port"] is None and again.result["todo"] == []


def test_a_reporting_sender_gets_the_result_and_leaves_nothing_to_collect(module_runner, dirs):
    """report on both ends: the sender's result carries the receiver's (copied files, the weight
    file the source lacks as the comparison); the receiver ends by itself and leaves neither its
    status nor an empty log in the model directory."""
    src, dest = dirs
    files = random_files(src, {"a.safetensors": 40_000, "config.json": 100})
    dest.mkdir(parents=True)
    (dest / "stale.safetensors").write_bytes(b"old shard")  # left by an older model
    r = started(module_runner, dest, files, report=True, label="m2").result
    sent = send(module_runner, src, files, r["port"], report=True)
    assert not sent.failed, sent.result
    got = sent.result["received"]
    assert got["copied"] == sorted(files) and got["missing"] == [] and got["bytes"] == 40_100
    assert [(p["host"], p["file"], p["kind"]) for p in got["compare"]] == [("m2", "stale.safetensors", "extra_weight")]
    for _ in range(50):
        if not alive(r["pid"]):
            break
        time.sleep(0.1)
    assert not alive(r["pid"])
    assert sorted(p.name for p in dest.iterdir()) == [
        ".mlx-cluster-sha256.json",
        "a.safetensors",
        "config.json",
        "stale.safetensors",
    ]


def test_collecting_compares_the_directory_with_the_source_when_asked(module_runner, dirs):
    src, dest = dirs
    files = random_files(src, {"a.safetensors": 4000, "config.json": 100})
    r = started(module_runner, dest, files).result
    sent = send(module_runner, src, files, r["port"])
    assert not sent.failed, sent.result
    (dest / "stale.safetensors").write_bytes(b"old shard")  # left by an older model
    expected = dict(files, **{"b.safetensors": {"size": 10, "sha256": "0" * 64}})  # one the sender never had
    args = {"state": "finished", "path": str(dest), "run_id": RUN_ID, "wait": 10, "label": "m2"}
    done = module_runner(
        "model_receive", args=dict(args, expected=expected), commands=ps(r["pid"]) if alive(r["pid"]) else {}
    )
    assert not done.failed, done.result
    assert done.result["copied"] == sorted(files)
    assert [(p["host"], p["file"], p["kind"]) for p in done.result["compare"]] == [
        ("m2", "b.safetensors", "missing"),
        ("m2", "stale.safetensors", "extra_weight"),
    ]
    # without `expected`: no listing
    assert module_runner("model_receive", args=args).result["compare"] is None


def test_check_mode_lists_what_would_come_and_makes_nothing(module_runner, dirs):
    src, dest = dirs
    files = random_files(src, {"a.safetensors": 1000})
    out = started(module_runner, dest, files, _ansible_check_mode=True)
    assert not out.failed, out.result
    assert out.result["todo"] == ["a.safetensors"] and out.result["pid"] is None and out.result["changed"]
    assert not dest.exists()


def test_a_receiver_no_sender_reaches_is_ended_by_pid(module_runner, dirs):
    src, dest = dirs
    files = random_files(src, {"a.safetensors": 1000})
    pid = started(module_runner, dest, files).result["pid"]
    assert alive(pid)
    done = module_runner(
        "model_receive", args={"state": "finished", "path": str(dest), "run_id": RUN_ID, "wait": 0}, commands=ps(pid)
    )
    assert done.result["changed"] and [p["kind"] for p in done.result["problems"]] == ["stopped"]
    assert done.result["missing"] == [] or "a.safetensors" in done.result["missing"]
    time.sleep(0.3)
    assert not alive(pid)


def test_a_pid_whose_arguments_no_longer_name_the_copy_is_left_alone(module_runner, dirs, monkeypatch):
    src, dest = dirs
    files = random_files(src, {"a.safetensors": 1000})
    pid = started(module_runner, dest, files).result["pid"]
    try:
        done = module_runner(
            "model_receive",
            args={"state": "finished", "path": str(dest), "run_id": RUN_ID, "wait": 0},
            commands={("ps", "-ww", "-o", "args=", "-p", str(pid)): (0, "/usr/bin/vim notes\n", "")},
        )
        assert alive(pid)  # not ours any more (a reused PID): not killed
        assert done.result["changed"] is False
    finally:
        os.kill(pid, 9)


def test_a_model_that_does_not_fit_is_refused_before_anything_starts(module_runner, dirs, monkeypatch):
    src, dest = dirs
    files = random_files(src, {"a.safetensors": 5000})
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 100, 100))
    out = started(module_runner, dest, files, label="m2")
    assert out.failed and out.result["pid"] is None
    assert "m2: the model needs 5000 more bytes" in out.result["msg"] and "disk has 100 free" in out.result["msg"]


def test_a_sender_that_finds_no_receiver_names_both_macs_and_the_fix(module_runner, dirs):
    src, _ = dirs
    files = random_files(src, {"a.safetensors": 10})
    out = send(module_runner, src, files, 1, source_name="m1", cable="m1:en2 <-> m2:en3")
    assert out.failed
    assert out.result["msg"].startswith("copy m1 -> m2 over m1:en2 <-> m2:en3 (127.0.0.1:1): nothing listens")
    assert "its receiver is not running" in out.result["msg"]


def test_a_file_where_the_model_goes_is_named_and_nothing_starts(module_runner, dirs):
    """The receiver is the only check of the destination on a Mac that gets its copy over a cable."""
    src, dest = dirs
    files = random_files(src, {"a.safetensors": 1000})
    dest.parent.mkdir(parents=True)
    dest.write_text("in the way")
    out = started(module_runner, dest, files, label="m2")
    assert out.failed and out.result["msg"] == f"{dest} on m2 is not a directory: move it away, the model goes there"
    assert out.result["pid"] is None and dest.read_text() == "in the way"


def test_files_without_hashes_are_refused(module_runner, dirs):
    _, dest = dirs
    out = started(module_runner, dest, {"a.safetensors": {"size": 3}})
    assert out.failed and "files without a size and sha256: a.safetensors" in out.result["msg"]


def test_the_sender_keeps_its_progress_file_for_the_lines_a_user_sees(module_runner, dirs, tmp_path):
    src, dest = dirs
    files = random_files(src, {"a.safetensors": 1_500_000, "config.json": 200})
    r = started(module_runner, dest, files).result
    progress = tmp_path / "progress.json"
    sent = send(module_runner, src, files, r["port"], what="wheels", progress_file=str(progress))
    assert not sent.failed, sent.result
    state = json.loads(progress.read_text())
    assert state["done"] is True and state["what"] == "wheels"
    assert state["bytes"] == state["total"] == 1_500_200 and state["files"] == 2
    assert copy_line(state).startswith("wheels: 1.5/1.5 MB (100%)")
    module_runner(
        "model_receive",
        args={"state": "finished", "path": str(dest), "run_id": RUN_ID, "wait": 10},
        commands=ps(r["pid"]) if alive(r["pid"]) else {},
    )


class SlowSender:
    """A sender whose bytes go out in three steps, a tick apart (what the progress file sees)."""

    def __init__(self, steps, pause):
        self.files = {"a": {"size": sum(steps)}}
        self.steps, self.pause = steps, pause
        self.sent, self.results = 0, {}

    def run(self):
        for n in self.steps:
            time.sleep(self.pause)
            self.sent += n
        self.results["a"] = {"bytes": self.sent}
        return {"bytes": self.sent, "seconds": 0.0, "files": self.results, "errors": []}


def test_the_progress_file_moves_while_the_copy_runs(tmp_path, monkeypatch):
    from ansible_collections.mlx.cluster.plugins.module_utils import mlx_progress
    from ansible_collections.mlx.cluster.plugins.modules import model_send

    seen = []
    real = mlx_progress.ProgressWriter.update

    def update(self, state, now, force=False):
        seen.append((state["bytes"], state["done"]))
        return real(self, state, now, force=True)  # every state, not at most every WRITE_EVERY

    monkeypatch.setattr(mlx_progress.ProgressWriter, "update", update)
    out = model_send.run_with_progress(SlowSender([100, 200, 300], 0.3), str(tmp_path / "p.json"), "model", tick=0.05)
    assert out["bytes"] == 600
    assert seen[0] == (0, False) and seen[-1] == (600, True)
    assert {(100, False), (300, False)} <= set(seen), seen  # the bytes as they went, before the end
