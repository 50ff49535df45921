# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
"""Callback plugin mlx.cluster.run_lock: one run at a time changes a cluster from this
controller. The lock is the kernel's (flock) on a file in the inventory's artifacts/, held by
ansible-playbook's own process: it ends with the process, however it ends, so it is never left
behind. A run that finds it taken is stopped by validate, which names the run that holds it."""

from __future__ import annotations

DOCUMENTATION = r"""
name: run_lock
type: aggregate
short_description: One run at a time changes a cluster from this controller
description:
  - >-
    When a run that may change the Macs starts (not C(--check), and not only read-only stages,
    C(validate), C(capture), C(preflight), C(rdma_check) or C(server_status)), this takes an
    exclusive lock on C(artifacts/.run.lock) beside the inventory (the directory of the first
    C(-i) source, or the source itself when it is a directory) and writes into it which run
    holds it (its PID, when it started, its command line without the values of C(-e), which may
    hold a password).
  - >-
    The lock is C(flock(2)), held by C(ansible-playbook)'s own process until it exits (killed
    too; the workers it forks close their copy at once), so a run that ends never leaves it
    behind, and nothing is ever removed by name.
  - >-
    A second such run finds the lock taken. This plugin then puts a message naming the run that
    holds it, and the fix, into the environment the tasks inherit (C(MLX_CLUSTER_RUN_LOCKED_BY)),
    and validate stops the run with it before any Mac is contacted. Dry runs and read-only checks
    take no lock and run beside it.
  - Two controllers, or two inventories for the same Macs, are not seen.
version_added: 0.4.0
requirements:
  - enabled in ansible.cfg, C(callbacks_enabled = mlx.cluster.run_lock) (this project's
    ansible.cfg does it, and validate checks that ansible.cfg is the one in use)
"""

import fcntl
import json
import os
import shlex
import sys
import time

from ansible import context
from ansible.plugins.callback import CallbackBase

# Stages that change nothing on the Macs (planner.STAGE_TAGS): a run of these alone takes no lock.
READ_ONLY_TAGS = frozenset(("validate", "capture", "preflight", "rdma_check", "server_status"))
LOCK_NAME = ".run.lock"
ENV = "MLX_CLUSTER_RUN_LOCKED_BY"


def changes_macs(check=False, tags=()):
    """Whether a run with these command-line options may change the Macs."""
    tags = [t for t in (tags or ()) if t]
    return not check and not (tags and all(t in READ_ONLY_TAGS for t in tags))


def lock_path(sources):
    """artifacts/.run.lock beside the first inventory source (a directory: inside it; a file:
    beside it); None for a source that is no path (an inline list of hosts)."""
    for source in sources or ():
        path = os.path.abspath(os.path.expanduser(str(source)))
        if os.path.isdir(path):
            return os.path.join(path, "artifacts", LOCK_NAME)
        if os.path.isfile(path):
            return os.path.join(os.path.dirname(path), "artifacts", LOCK_NAME)
    return None


def take(path, me):
    """(fd, None) with the lock on `path` taken and `me` (a dict) written into it, or (None, the
    holder's dict) when another process holds it. OSError when the file cannot be made."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = json.loads(os.pread(fd, 65536, 0).decode("utf-8") or "{}")
        except (OSError, ValueError):
            holder = {}
        os.close(fd)
        return None, holder if isinstance(holder, dict) else {}
    except OSError:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(me).encode("utf-8"), 0)
    return fd, None


# Options whose value may hold a secret (-e ansible_become_password=...): left out of the record
_VALUED = ("-e", "--extra-vars")


def command_line(argv):
    """The run's command line as the record shows it, each extra-vars value left out."""
    words, skip = [os.path.basename(argv[0])] if argv else [], False
    for word in argv[1:]:
        if skip:
            words.append("...")
            skip = False
        elif word in _VALUED:
            words.append(word)
            skip = True
        elif word.startswith("--extra-vars="):
            words.append("--extra-vars=...")
        elif word.startswith("-e") and len(word) > 2:  # -e@file, -ekey=value
            words.append("-e...")
        else:
            words.append(word)
    return shlex.join(words)


def _close(fd):
    try:
        os.close(fd)
    except OSError:
        pass


def locked_message(holder, path):
    """What validate says when the lock at `path` is held by `holder` (the dict `take` read)."""
    pid = holder.get("pid")
    who = ", ".join(
        part
        for part in (
            f"PID {pid}" if pid else "",
            f"started {holder['started']}" if holder.get("started") else "",
            f"`{holder['command']}`" if holder.get("command") else "",
        )
        if part
    )
    end = f"end it (kill {pid})" if pid else "end it"
    who = who or "it did not say which"
    return (
        f"another run of mlx-cluster on this controller is changing the same cluster ({who}): "
        "two runs at once would configure the same cables, copy into the same directories and launch on the same "
        f"ports. Wait for it to end, or {end}, then run again; a dry run (--check) and --tags rdma_check run beside "
        f"it (the lock, {path}, is held by that process until it exits)"
    )


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "mlx.cluster.run_lock"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fd = None  # held until the process ends

    def v2_playbook_on_start(self, playbook):
        os.environ.pop(ENV, None)  # (only this run says who holds the lock)
        args = context.CLIARGS  # (set by the CLI by now)
        if self.fd is not None or not changes_macs(args.get("check", False), args.get("tags", ())):
            return
        path = lock_path(args.get("inventory", ()))
        if path is None:
            return
        me = {
            "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": command_line(sys.argv),
        }
        try:
            self.fd, holder = take(path, me)
        except OSError as exc:  # an inventory directory this user cannot write to: no lock
            self._display.vvv(f"mlx.cluster.run_lock: no lock at {path} ({exc})")
            return
        if holder is not None:
            os.environ[ENV] = locked_message(holder, path)
        else:
            # the workers Ansible forks close their copy at once: the lock is this process's alone,
            # gone when it ends, not kept by a worker still finishing after it was killed
            fd = self.fd
            os.register_at_fork(after_in_child=lambda: _close(fd))
