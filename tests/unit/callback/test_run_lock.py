"""mlx.cluster.run_lock: one run at a time changes a cluster from this controller."""

from __future__ import annotations

import os

import pytest

from ansible_collections.mlx.cluster.plugins.callback import run_lock
from ansible_collections.mlx.cluster.plugins.plugin_utils import planner
from tests.unit.roles.test_validate_names import TWO, checked, validate


@pytest.mark.parametrize(
    "check, tags, changes",
    [
        (False, (), True),
        (False, ("all",), True),
        (True, (), False),
        (False, ("rdma_check",), False),
        (False, ("validate", "capture", "preflight", "server_status"), False),
        (False, ("rdma_check", "network"), True),
        (False, ("models",), True),
        (True, ("models",), False),
    ],
)
def test_which_runs_take_the_lock(check, tags, changes):
    assert run_lock.changes_macs(check, tags) is changes


def test_the_read_only_stages_are_stages():
    assert run_lock.READ_ONLY_TAGS <= set(planner.STAGE_TAGS)


def test_the_lock_is_beside_the_inventory(tmp_path):
    hosts = tmp_path / "inv" / "hosts.yml"
    hosts.parent.mkdir()
    hosts.write_text("all: {}\n")
    assert run_lock.lock_path([str(hosts.parent)]) == str(hosts.parent / "artifacts" / ".run.lock")
    assert run_lock.lock_path([str(hosts)]) == str(hosts.parent / "artifacts" / ".run.lock")
    assert run_lock.lock_path(["m1,m2,"]) is None  # an inline list of hosts: no place for it
    assert run_lock.lock_path([]) is None


def test_a_second_taker_reads_the_first_and_the_lock_goes_with_its_holder(tmp_path):
    path = str(tmp_path / "artifacts" / ".run.lock")
    me = {"pid": 11, "started": "2026-11-30 06:50:00", "command": "ansible-playbook site.yml"}
    fd, holder = run_lock.take(path, me)
    assert fd is not None and holder is None
    try:
        fd2, holder = run_lock.take(path, {"pid": 12})
        assert fd2 is None and holder == me
    finally:
        os.close(fd)  # as when the first run's process ends, however it ends
    fd3, holder = run_lock.take(path, {"pid": 13})
    assert holder is None
    os.close(fd3)


def test_the_record_keeps_no_extra_vars_value():
    """(-e may carry ansible_become_password: the record is a file another run reads)"""
    argv = ["/venv/bin/ansible-playbook", "site.yml", "-e", "ansible_become_password=hunter2", "--extra-vars=@s.yml"]
    argv += ["-eansible_become_password=x", "--tags", "models", "--extra-vars", "a=b"]
    line = run_lock.command_line(argv)
    assert line == "ansible-playbook site.yml -e ... --extra-vars=... -e... --tags models --extra-vars ..."
    assert "hunter2" not in line and "=x" not in line


def test_the_message_names_the_run_that_holds_the_lock_and_the_fix():
    msg = run_lock.locked_message(
        {"pid": 4242, "started": "2026-11-30 06:50:00", "command": "ansible-playbook site.yml -i inv"}, "/x/.run.lock"
    )
    assert msg.startswith(
        "another run of mlx-cluster on this controller is changing the same cluster (PID 4242, started "
        "2026-11-30 06:50:00, `ansible-playbook site.yml -i inv`)"
    ), msg
    assert "end it (kill 4242)" in msg and "a dry run (--check) and --tags rdma_check run beside it" in msg
    assert "(it did not say which)" in run_lock.locked_message({}, "/x/.run.lock")


def test_validate_stops_a_run_while_another_holds_the_lock_and_lets_a_dry_run_through(tmp_path):
    """The real ansible-playbook, its ansible.cfg's callbacks: the lock held here (a run in
    another terminal), a run of the network stage is stopped before any Mac is contacted."""
    (tmp_path / "inventory").mkdir()
    fd, _ = run_lock.take(str(tmp_path / "inventory" / "artifacts" / ".run.lock"), {"pid": os.getpid()})
    try:
        res = validate(tmp_path, TWO, {}, "--tags", "network")
        out = " ".join(res.stdout.split())
        assert res.returncode != 0
        assert (
            f"inventory: another run of mlx-cluster on this controller is changing the same cluster (PID {os.getpid()})"
            in out
        ), res.stdout[-3000:]
        assert "Discover" not in res.stdout
        dry = validate(tmp_path, TWO, {}, "--tags", "network", "--check")
        assert checked(dry) == "ok: [m1]", dry.stdout[-3000:]
    finally:
        os.close(fd)
    again = validate(tmp_path, TWO, {}, "--tags", "network")
    assert checked(again) == "ok: [m1]", again.stdout[-3000:]


def test_a_forked_child_does_not_keep_the_lock_of_its_parent(tmp_path):
    """Ansible's workers are forks of ansible-playbook: one still finishing after the run was
    killed must not hold the run's lock."""
    import signal

    path = str(tmp_path / "artifacts" / ".run.lock")
    parent_r, child_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the "run": takes the lock, forks a "worker", then dies at once
        try:
            fd, _ = run_lock.take(path, {"pid": os.getpid()})
            os.register_at_fork(after_in_child=lambda: run_lock._close(fd))
            worker = os.fork()
            if worker == 0:
                os.write(child_w, b"%d" % os.getpid())
                signal.pause()  # (killed below)
            os._exit(0)
        except BaseException:
            os._exit(1)
    os.waitpid(pid, 0)
    worker = int(os.read(parent_r, 32))
    try:
        fd, holder = run_lock.take(path, {"pid": os.getpid()})
        assert holder is None, holder  # the worker lives on, the lock went with the run
        os.close(fd)
    finally:
        os.kill(worker, signal.SIGKILL)
        os.close(parent_r)
        os.close(child_w)
