# -*- coding: utf-8 -*-
"""Progress of a long task while it runs: the action plugins of model_rsync and mlx_launch.

Ansible prints a task's result when the task ends; a 100 GB copy or a benchmark of several
minutes would be silent until then (plain `async` + `poll` prints only "ASYNC POLL ...
finished=0"). With `progress_interval` > 0 the action plugin of the module (same name, so
the tasks' FQCN does not change) starts the module as an async job (Ansible's async_wrapper,
as `async:` would), reads the module's progress file (`module_utils/mlx_progress.py`) on the
same machine with one command that waits there (`wait_command`: a few seconds at most, ending
at once when the file says done or the job's directory goes), and prints a line through
Ansible's display, at most one every `progress_interval` seconds and none before that many
seconds passed: a short or empty step prints nothing. The job's status (the async_status
module, a Python run on the machine) is asked when a read says the job ended, and otherwise
only every STATUS_EVERY seconds. In a worker process display
goes to the main process (ansible-core's final queue), so with forks > 1 the lines of several
hosts interleave whole, each prefixed with its host as Ansible prints results
(`[m2 -> m1] model: 1.2/3.4 GB (35%), 850 MB/s`).

The module's result comes back as it would from a plain run: the keys the async machinery
adds (`ansible_job_id`, `started`, `finished`, `results_file`) are taken off.

Pure parts (tested without Ansible running): `human_bytes`, `copy_line`, `launch_line`,
`wait_command` (the remote read, a POSIX sh command), `wait_for_job` (the polling loop, with
the clock, sleep, status and read injected).
"""

from __future__ import annotations

import json
import math
import posixpath
import shlex
import time

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

display = Display()

# The keys the async machinery adds to a module's result (async_wrapper, async_status).
ASYNC_KEYS = ("ansible_job_id", "started", "finished", "results_file")
# The longest one read of the progress file waits on the machine (s): the wait ends sooner when
# the file says done, when the job's directory goes (async_wrapper removes it when the job ends,
# however it ends), or when the next line is due.
WAIT_MAX = 5.0
# The pause of the waiting read's loop on the machine (s; BSD and GNU sleep take fractions).
WAIT_STEP = 0.5
# The least time between the starts of two reads (s) when a read comes back early without the
# job having ended (cannot happen with the module's files; guards against a loop of reads).
TICK = 1.0
# The job's status is asked when a read says the job ended (done, gone or unreadable), and
# otherwise every this many seconds: it finds a job whose file stays without `done` (its wrapper
# killed, or a failure with ANSIBLE_KEEP_REMOTE_FILES) at most this long (and one read) late.
STATUS_EVERY = 30.0
# What ProgressWriter's JSON holds when the module is done (json.dump's default separators).
DONE_TEXT = '"done": true'
# What a read returns when the job's directory is gone or the file cannot be read or parsed.
GONE = "gone"
# Failed polls in a row (a connection that dropped) before the host is given up as unreachable.
POLL_ERRORS = 3
# Seconds the action waits beyond the job's own time limit before it gives up on the job.
LIMIT_GRACE = 30
# The progress file's name in the job's temporary directory (removed with it at the end).
PROGRESS_NAME = "mlx-cluster-progress.json"
# The most a read of the progress file takes in (bytes): the file is a few hundred.
READ_MAX = 65536


def human_bytes(n):
    """1234567890 -> '1.2 GB' (decimal units, as Finder reports sizes)."""
    n = float(n or 0)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # not reached


def copy_line(state):
    """model_rsync's progress file -> 'model: 1.2/3.4 GB (35%), 850.0 MB/s'; None before a
    byte moved (nothing to copy prints nothing)."""
    if not isinstance(state, dict) or not state.get("bytes"):
        return None
    sent, total, rate = state["bytes"], state.get("total"), state.get("rate")
    if total:
        _, unit = human_bytes(total).split(" ")
        scale = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[unit]
        # the total is the whole model: a copy that resumes ends below 100%
        line = f"model: {sent / scale:.1f}/{human_bytes(total)} ({min(100, 100 * sent // total):.0f}%)"
    else:
        line = f"model: {human_bytes(sent)} sent"
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
            f"rank {k} ({ranks[k]['host']}) at {ranks[k]['kind']} {ranks[k]['step']}/{ranks[k]['of']}" for k in behind)
    elif len(ranks) < size:
        line += f"; {size - len(ranks)} rank(s) not yet started"
    return line


def wait_command(path, wait, step=WAIT_STEP, read_max=READ_MAX):
    """The POSIX sh command of one read: waits on the machine while the progress file `path` does
    not say done and its directory is there, at most `wait` seconds (ceil(wait / step) pauses of
    `step` s, plus a `grep` of a few hundred bytes per pause), then prints the file's first
    `read_max` bytes. Exit 0 with nothing printed: no file yet; non-zero: the directory is gone
    (the job ended) or the file could not be read. Paths are quoted: nothing in them runs."""
    pauses = max(0, math.ceil(wait / step - 1e-9))
    f, d = shlex.quote(path), shlex.quote(posixpath.dirname(path) or ".")
    return (f"n={pauses}; while [ \"$n\" -gt 0 ] && [ -d {d} ] && ! grep -qF {shlex.quote(DONE_TEXT)} {f} 2>/dev/null; "
            f"do sleep {step:g}; n=$((n - 1)); done; "
            f"[ -d {d} ] || exit 3; [ -f {f} ] || exit 0; exec head -c {int(read_max)} {f}")


def finished(status):
    """True when an async_status result says the job ended (or cannot be found any more)."""
    return bool(status.get("finished")) or (bool(status.get("failed")) and status.get("_ansible_parsed", True))


def wait_for_job(status, read, show, render, interval, limit, clock=time.monotonic, sleep=time.sleep):
    """Poll a started async job until it ends; returns the last async_status result.

    read(wait): the progress file's state (a dict) after waiting on the machine up to `wait`
    seconds for the job to end (`wait_command`), None when the file is not written yet, GONE
    when the job's directory is gone or the file cannot be read (raises AnsibleConnectionFailure
    when the host cannot be reached: counted as GONE). status(): the job's async_status result
    (raises AnsibleConnectionFailure likewise). render(state): the line to show or None;
    show(line) prints it. A line is shown when `interval` seconds passed since the start or the
    last line shown, and it differs from the last one; each read waits until the next line is
    due, WAIT_MAX s at most.

    The status is asked when a read says the job ended (done, GONE, or the file gone after it
    was seen): within about a second of the module's end (one WAIT_STEP, the read's return,
    one status run). Otherwise every STATUS_EVERY s: a job that died leaving its file without
    `done` is found at most STATUS_EVERY + WAIT_MAX s after it died. POLL_ERRORS failed status
    calls in a row raise. After `limit` seconds (the job's own limit and some grace) a failed
    result.
    """
    start = clock()
    deadline, next_status = start + limit, start + STATUS_EVERY
    last_shown, shown = start, None
    seen, errors, pause = False, 0, 0.25
    while True:
        now = clock()
        until_due = last_shown + interval - now
        wait = until_due if until_due > 0 else min(interval, WAIT_MAX)
        wait = max(0.0, min(wait, WAIT_MAX, next_status - now, deadline - now))
        asked = now
        try:
            state = read(wait)
        except AnsibleConnectionFailure:
            state = GONE
        now = clock()
        running = isinstance(state, dict)
        ended = state == GONE or (state is None and seen) or bool(running and state.get("done"))
        seen = seen or running
        if ended or now >= next_status:
            try:
                result = status()
                errors = 0
            except AnsibleConnectionFailure:
                errors += 1
                if errors >= POLL_ERRORS:
                    raise
                result = {}
            next_status = clock() + STATUS_EVERY
            if result and finished(result):
                return result
        if running:
            line = render(state)
            if line and line != shown and now - last_shown >= interval:
                show(line)
                shown, last_shown = line, now
        if clock() >= deadline:
            return {"failed": True, "msg": f"the job did not end within {int(limit)} s (its time limit and "
                                           f"{LIMIT_GRACE} s more): it was given up; look on the machine for "
                                           "what still runs"}
        if ended:
            # the module wrote done (or its directory went) but the job's result is not written yet
            sleep(pause)
            pause = min(TICK, pause * 2)
        else:
            pause = 0.25
            rest = min(wait, TICK) - (clock() - asked)  # a read that came back early
            if rest > 0:
                sleep(rest)


class ProgressAction(ActionBase):
    """Runs the task's module; with `progress_interval` > 0 as an async job shown while it runs.

    A subclass sets `render` (state -> line) and `job_limit(args)` (the job's time limit, s).
    """

    _supports_check_mode = True
    _supports_async = True

    @staticmethod
    def render(state):
        raise NotImplementedError

    def job_limit(self, args):
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
                self._remove_tmp_path(self._connection._shell.tmpdir)
            return result
        return merge_hash(result, self._run_with_progress(task_vars, interval))

    def _label(self, task_vars):
        """The host as Ansible's default callback names it in results: `[m2]`, `[m2 -> m1]`, and
        the delegate's address when it differs from its name: `[m2 -> m1(10.0.0.11)]`."""
        task_vars = task_vars or {}
        host = task_vars.get("inventory_hostname", self._play_context.remote_addr)
        delegated = self._task.delegate_to
        if delegated and delegated != host:
            address = ((task_vars.get("ansible_delegated_vars") or {}).get(delegated) or {}).get("ansible_host", delegated)
            host += f" -> {delegated}" if address == delegated else f" -> {delegated}({address})"
        # a task with a loop of its own: the item, as the callback shows it, when short (the benchmark's mode)
        looping = self._task.loop is not None or self._task.loop_with
        loop_var = task_vars.get("ansible_loop_var") if looping else None
        item = task_vars.get(loop_var) if loop_var else None
        shown = f" (item={item})" if isinstance(item, (str, int)) and len(str(item)) <= 40 else ""
        return f"[{host}]{shown}"

    def _run_with_progress(self, task_vars, interval):
        args = dict(self._task.args)
        limit = self.job_limit(args)
        if self._connection._shell.tmpdir is None:
            self._make_tmp_path()
        tmpdir = self._connection._shell.tmpdir
        path = self._connection._shell.join_path(tmpdir, PROGRESS_NAME)
        args["progress_file"] = path
        self._task.async_val = limit  # async_wrapper's time limit for this job
        try:
            started = self._execute_module(module_args=args, task_vars=task_vars, wrap_async=True)
        finally:
            self._task.async_val = 0  # the task itself is not async: no polling by the executor
        jid = started.get("ansible_job_id")
        if started.get("failed") or not jid:
            self._remove_tmp_path(tmpdir)
            return started
        # where async_wrapper itself put the job's status file (it expands ~ as the job's user)
        results_file = started.get("results_file")
        async_dir = (results_file.rsplit("/", 1)[0] if results_file and "/" in results_file
                     else self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async")))
        label = self._label(task_vars)

        def status():
            return self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                        module_args={"jid": jid, "mode": "status", "_async_dir": async_dir})

        def read(wait):
            res = self._low_level_execute_command(wait_command(path, wait), sudoable=False)
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
            display.display(f"{label} {line}")

        try:
            final = wait_for_job(status, read, show, self.render, interval, limit + LIMIT_GRACE)
        except BaseException:
            self._remove_tmp_path(self._connection._shell.tmpdir)
            raise
        if final.get("failed") and final.get("msg") == "could not find job":
            final["msg"] = (f"the async job {jid} of this task is gone from the machine it ran on (its "
                            f"status file in {async_dir} was removed, or the machine restarted): run the "
                            "stage again")
        elif final.get("finished") and results_file and self._should_remove_tmp_path(tmpdir):
            # what async_status's cleanup does (remove the job's status file) and the temporary
            # directory's removal in one shell command: no Python run at the end of every copy
            done = self._low_level_execute_command(
                f"rm -f {shlex.quote(results_file)}; {self._connection._shell.remove(tmpdir, recurse=True)}",
                sudoable=False)
            if done.get("rc") == 0:
                self._connection._shell.tmpdir = None
        elif final.get("finished"):
            self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                 module_args={"jid": jid, "mode": "cleanup", "_async_dir": async_dir})
        self._remove_tmp_path(self._connection._shell.tmpdir)
        return {k: v for k, v in final.items() if k not in ASYNC_KEYS}
