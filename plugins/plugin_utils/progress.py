# -*- coding: utf-8 -*-
"""Progress of a long task while it runs: the action plugins of model_rsync and mlx_launch.

Ansible prints a task's result when the task ends; a 100 GB copy or a benchmark of several
minutes would be silent until then (plain `async` + `poll` prints only "ASYNC POLL ...
finished=0"). With `progress_interval` > 0 the action plugin of the module (same name, so
the tasks' FQCN does not change) runs the module as a plain task would (one pipelined SSH
command), with one more argument: a progress file in the task's temporary directory on the
machine (`module_utils/mlx_progress.py`). While the module runs, a thread of the action reads
that file over a second SSH session to the same machine (a copy of the task's connection; with
ControlPersist it shares the task's master connection), with one command that waits there
(`wait_command`: a few seconds at most, ending at once when the file says done), and prints a
line through Ansible's display, at most one every `progress_interval` seconds and none before
that many seconds passed: a short or empty step prints nothing. In a worker process display
goes to the main process (ansible-core's final queue), so with forks > 1 the lines of several
hosts interleave whole, each prefixed with its host as Ansible prints results
(`[m2 -> m1] model: 1.2/3.4 GB (35%), 850 MB/s`).

The module's result is the plain run's: the reads only print. Before 2026-11-26 the module ran
as an async job (async_wrapper, async_status) polled by the action; starting it that way (its
files copied, no pipelining) and asking its status cost seconds per copy on the simulated
cluster (docs/benchmarks.md), which the reading thread does not.

Pure parts (tested without Ansible running): `human_bytes`, `copy_line`, `launch_line`,
`wait_command` (the remote read, a POSIX sh command), `watch` (the reading loop, with the clock,
sleep, read and the module's end injected).
"""

from __future__ import annotations

import copy
import json
import math
import posixpath
import shlex
import threading
import time

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

from ansible_collections.mlx.cluster.plugins.plugin_utils.ansible_internals import own_settings, remote_tmpdir, run_raw

display = Display()

# The longest one read of the progress file waits on the machine (s): the wait ends sooner when
# the file says done, when its directory goes, or when the next line is due.
WAIT_MAX = 5.0
# The pause of the waiting read's loop on the machine (s; BSD and GNU sleep take fractions).
WAIT_STEP = 0.5
# The least time between the starts of two reads (s) when a read comes back early without the
# module being done (no file yet, or an unreadable one).
TICK = 1.0
# What ProgressWriter's JSON holds when the module is done (json.dump's default separators).
DONE_TEXT = '"done": true'
# What a read returns when the file's directory is gone or the file cannot be read or parsed.
GONE = "gone"
# Failed reads in a row (a connection that dropped) before the reading stops (the module's own
# run meets the same connection and fails, naming the host).
POLL_ERRORS = 3
# The progress file's name in the task's temporary directory (removed with it at the end).
PROGRESS_NAME = "mlx-cluster-progress.json"
# The most a read of the progress file takes in (bytes): the file is a few hundred.
READ_MAX = 65536
# How long the action waits, once the module returned, for the reading thread to end (s): its
# read on the machine ends within a WAIT_STEP of the module writing done; a module that ended
# without writing it leaves a read of WAIT_MAX at most, which is not waited for (the thread
# prints nothing more).
JOIN_WAIT = 2 * WAIT_STEP + 1.0


def human_bytes(n):
    """1234567890 -> '1.2 GB' (decimal units, as Finder reports sizes)."""
    n = float(n or 0)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # not reached


def copy_line(state):
    """model_rsync's and model_send's progress file -> 'model: 1.2/3.4 GB (35%), 850.0 MB/s'
    (model_send: what it sends, in place of "model"); None before a byte moved (nothing to
    copy prints nothing)."""
    if not isinstance(state, dict) or not state.get("bytes"):
        return None
    sent, total, rate = state["bytes"], state.get("total"), state.get("rate")
    what = state.get("what") if isinstance(state.get("what"), str) and state.get("what") else "model"
    if total:
        _, unit = human_bytes(total).split(" ")
        scale = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[unit]
        # the total is the whole model: a copy that resumes ends below 100%
        line = f"{what}: {sent / scale:.1f}/{human_bytes(total)} ({min(100, 100 * sent // total):.0f}%)"
    else:
        line = f"{what}: {human_bytes(sent)} sent"
    if rate:
        line += f", {human_bytes(rate)}/s"
    return line


def launch_line(state):
    """mlx_launch's progress file -> the latest step of the ranks: the most advanced rank's line
    (the lowest such rank), and the ranks behind it. None before a rank logged a step."""
    ranks = (state or {}).get("ranks") if isinstance(state, dict) else None
    if not ranks:
        return None

    def where(r):
        return (r["kind"] == "trial", r["step"])

    order = sorted(ranks, key=int)
    ahead = max(order, key=lambda k: (where(ranks[k]), -int(k)))
    lead = ranks[ahead]
    size = lead.get("size") or len(ranks)
    line = f"[rank {ahead}/{size} {lead['host']}] {lead['line']}"
    behind = [k for k in order if where(ranks[k]) < where(lead)]
    if behind:
        line += "; behind: " + ", ".join(
            f"rank {k} ({ranks[k]['host']}) at {ranks[k]['kind']} {ranks[k]['step']}/{ranks[k]['of']}" for k in behind
        )
    elif len(ranks) < size:
        line += f"; {size - len(ranks)} rank(s) not yet started"
    return line


def wait_command(path, wait, step=WAIT_STEP, read_max=READ_MAX):
    """The POSIX sh command of one read: waits on the machine while the progress file `path` does
    not say done and its directory is there, at most `wait` seconds (ceil(wait / step) pauses of
    `step` s, plus a `grep` of a few hundred bytes per pause), then prints the file's first
    `read_max` bytes. Exit 0 with nothing printed: no file yet; non-zero: the directory is gone
    (the task ended and removed it) or the file could not be read. Paths are quoted: nothing in them runs."""
    pauses = max(0, math.ceil(wait / step - 1e-9))
    f, d = shlex.quote(path), shlex.quote(posixpath.dirname(path) or ".")
    return (
        f'n={pauses}; while [ "$n" -gt 0 ] && [ -d {d} ] && ! grep -qF {shlex.quote(DONE_TEXT)} {f} 2>/dev/null; '
        f"do sleep {step:g}; n=$((n - 1)); done; "
        f"[ -d {d} ] || exit 3; [ -f {f} ] || exit 0; exec head -c {int(read_max)} {f}"
    )


def watch(read, show, render, interval, stopped, clock=time.monotonic, sleep=time.sleep):
    """Read the progress file of a module that runs, and show its lines, until it is done.

    read(wait): the progress file's state (a dict) after waiting on the machine up to `wait`
    seconds for the module to be done (`wait_command`), None when the file is not written yet,
    GONE when its directory is gone or it cannot be read or parsed; it may raise
    AnsibleConnectionFailure. render(state): the line to show or None; show(line) prints it.
    stopped(): True once the module's run has returned (the action's own thread knows it);
    sleep(s) pauses, and may return early when stopped.

    A line is shown when `interval` seconds passed since the start or the last line shown, and it
    differs from the last one; each read waits on the machine until the next line is due,
    WAIT_MAX s at most. The loop ends when stopped, when the file says done or is GONE (nothing
    more will be shown), or after POLL_ERRORS failed reads in a row (the module's own run then
    meets the same connection and says so). Returns the number of reads made.
    """
    start = clock()
    last_shown, shown = start, None
    errors = reads = 0
    while not stopped():
        now = clock()
        until_due = last_shown + interval - now
        wait = until_due if until_due > 0 else min(interval, WAIT_MAX)
        wait = max(0.0, min(wait, WAIT_MAX))
        asked = now
        reads += 1
        try:
            state = read(wait)
            errors = 0
        except AnsibleConnectionFailure:
            errors += 1
            if errors >= POLL_ERRORS:
                return reads
            state = None
        if stopped() or state == GONE or (isinstance(state, dict) and state.get("done")):
            return reads
        if isinstance(state, dict):
            line = render(state)
            now = clock()
            if line and line != shown and now - last_shown >= interval:
                show(line)
                shown, last_shown = line, now
        rest = min(wait, TICK) - (clock() - asked)  # a read that came back early
        if rest > 0:
            sleep(rest)
    return reads


def own_master(conn):
    """Give a copy of a task's ssh connection a ControlPath of its own (the same one for every
    read of every task to that machine, beside the tasks' own): the reads share one master
    connection and the modules' commands another. sshd's MaxSessions (10 by default, in OpenSSH
    and on macOS) bounds the sessions of one connection: a Mac that sends k copies at once
    would carry 2k sessions on one master (each copy's command and its read), past 10 from k = 6
    on (rank 0 of a mesh of 7 or 8). OpenSSH's client then falls back to a connection of its own
    for each refused command ("Session open refused by peer ... disabling multiplexing" on
    stderr; tried with MaxSessions 2 on a simulated Mac): a handshake per read. On two masters
    each carries k, as the copies alone did before. Other connection plugins, and a ControlPath
    set in ssh_args (the user's own), are left as they are."""
    if getattr(conn, "transport", None) not in ("ssh", "ansible.builtin.ssh", "ansible.legacy.ssh"):
        return conn
    conn = own_settings(conn)  # the copy's own settings: the task's connection keeps its
    path = conn.get_option("control_path")
    if path:
        conn.set_option("control_path", f"{path}-progress")
    else:
        conn.set_option("control_path_dir", posixpath.join(conn.get_option("control_path_dir"), "progress"))
    return conn


class ProgressAction(ActionBase):
    """Runs the task's module; with `progress_interval` > 0 its progress file is read and shown
    while it runs. A subclass sets `render` (state -> line)."""

    _supports_check_mode = True
    _supports_async = True

    @staticmethod
    def render(state):
        raise NotImplementedError

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        try:
            interval = int(self._task.args.get("progress_interval") or 0)
        except (TypeError, ValueError):
            interval = 0  # the module's own argument check names the bad value
        if interval <= 0 or self._task.async_val or self._task.check_mode:
            # as the normal action: a plain run (or the task's own async)
            wrap_async = self._task.async_val and not self._connection.has_native_async
            result = merge_hash(result, self._execute_module(task_vars=task_vars, wrap_async=wrap_async))
            if not wrap_async:
                self._remove_tmp_path(remote_tmpdir(self))
            return result
        return merge_hash(result, self._run_with_progress(task_vars, interval))

    def _label(self, task_vars):
        """The host as Ansible's default callback names it in results: `[m2]`, `[m2 -> m1]`, and
        the delegate's address when it differs from its name: `[m2 -> m1(10.0.0.11)]`."""
        task_vars = task_vars or {}
        host = task_vars.get("inventory_hostname", self._play_context.remote_addr)
        delegated = self._task.delegate_to
        if delegated and delegated != host:
            address = ((task_vars.get("ansible_delegated_vars") or {}).get(delegated) or {}).get(
                "ansible_host", delegated
            )
            host += f" -> {delegated}" if address == delegated else f" -> {delegated}({address})"
        # a task with a loop of its own: the item, as the callback shows it, when short (the benchmark's mode)
        looping = self._task.loop is not None or self._task.loop_with
        loop_var = task_vars.get("ansible_loop_var") if looping else None
        item = task_vars.get(loop_var) if loop_var else None
        shown = f" (item={item})" if isinstance(item, (str, int)) and len(str(item)) <= 40 else ""
        return f"[{host}]{shown}"

    def _run_with_progress(self, task_vars, interval):
        args = dict(self._task.args)
        if remote_tmpdir(self) is None:
            self._make_tmp_path()
        tmpdir = remote_tmpdir(self)
        path = self._connection._shell.join_path(tmpdir, PROGRESS_NAME)
        args["progress_file"] = path
        label = self._label(task_vars)
        # The reads go over a copy of the task's connection: the ssh plugin keeps per-command
        # state on its object (the flags of the command that runs), so the module's command and
        # a read must not share one object; each runs its own ssh process (with ControlPersist,
        # a session on the same master connection). A shallow copy of this action with that
        # connection runs them through Ansible's own _low_level_execute_command (shell, `sleep 0`
        # against the SSH race that drops output, decoding) as the module's command is run.
        reader = copy.copy(self)
        reader._connection = own_master(copy.copy(self._connection))
        done = threading.Event()

        def read(wait):
            res = run_raw(reader, wait_command(path, wait))
            text = res.get("stdout") or ""
            if res.get("rc") != 0:
                return GONE
            if not text.strip():
                return None  # the module has not written it yet
            try:
                state = json.loads(text)
            except ValueError:
                return GONE
            return state if isinstance(state, dict) else GONE

        def show(line):
            if not done.is_set():
                display.display(f"{label} {line}")

        def reading():
            try:
                watch(read, show, self.render, interval, done.is_set, sleep=done.wait)
            except Exception as exc:  # pylint: disable=broad-except  # the lines only inform: never fail the task
                display.vvv(f"{label} progress reading stopped: {exc}")

        thread = threading.Thread(target=reading, name="mlx-cluster-progress", daemon=True)
        thread.start()
        try:
            result = self._execute_module(module_args=args, task_vars=task_vars)
        finally:
            done.set()
            thread.join(JOIN_WAIT)
            self._remove_tmp_path(remote_tmpdir(self))
        return result
