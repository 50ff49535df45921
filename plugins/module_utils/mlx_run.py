# -*- coding: utf-8 -*-
"""Run one command on this Mac, bounded in time: the only way the modules run commands.

ansible-core's `AnsibleModule.run_command` has no timeout: a macOS command that never
answers (`ibv_devinfo` on a wedged RDMA stack, a stuck `system_profiler`) holds the module,
the task and the whole run. `run_bounded(argv, timeout)` runs `argv` (a list: no shell) in
the C locale, stdin closed, in a session and process group of its own; when it has not
exited after `timeout` seconds the whole group is killed (SIGKILL: a hung command does not
answer SIGTERM either) and CommandTimeout is raised, whose `msg` names the command, the
bound and a fix for that command. A process stuck in the kernel may not even die of
SIGKILL: after KILL_GRACE seconds it is left behind (its pipes closed) rather than waited
for, so the module still ends.

`Runner(timeout)` is what a module holds: its `run(argv)` applies the module's bound
(`command_timeout`). Tests replace `spawn` (the one place a process is started) to answer
commands without running them.
"""

from __future__ import annotations

import codecs
import os
import selectors
import signal
import subprocess
import time

C_LOCALE = {"LC_ALL": "C", "LANG": "C"}

# The bound when a module is given none (option `command_timeout`). `system_profiler
# SPThunderboltDataType` is the slowest command discovery runs: about a second on an idle
# Mac, several on a busy one or with many Thunderbolt devices; `networksetup` writes wait on
# configd. 30 s is ten times the slowest answer expected, so a Mac that is merely slow is not
# failed, while a Mac that never answers costs a run half a minute, not forever.
DEFAULT_TIMEOUT = 30

# The argument_spec entry of every module that runs commands on a Mac; its documentation is the
# doc fragment mlx.cluster.command_timeout (plugins/doc_fragments/command_timeout.py).
COMMAND_TIMEOUT_SPEC = {"command_timeout": {"type": "int", "default": DEFAULT_TIMEOUT}}

# Seconds to wait for a killed process group to go (and release its pipes) before leaving it.
KILL_GRACE = 2

FIX_RDMA = (
    "RDMA looks wedged on this Mac: replug its Thunderbolt cables, or reboot the Mac if that does not help, then re-run"
)
FIX_SYSTEM_PROFILER = (
    "System Information cannot read the Thunderbolt bus (a device or cable that "
    "does not answer): unplug the Thunderbolt cables and re-run; if it still hangs "
    "(`system_profiler SPThunderboltDataType` by hand does not end), reboot the Mac"
)
FIX_NETWORKSETUP = (
    "the network configuration daemon (configd) does not answer: wait a minute and "
    "re-run; if it still hangs (`networksetup -listallhardwareports` by hand does not "
    "end), reboot the Mac"
)
FIX_GENERIC = (
    "run it by hand on the Mac to see whether it ends; reboot the Mac if it hangs there too, "
    "or raise mlx_cluster_command_timeout if the Mac is only slow"
)
FIXES = {
    "ibv_devices": FIX_RDMA,
    "ibv_devinfo": FIX_RDMA,
    "rdma_ctl": FIX_RDMA,
    "system_profiler": FIX_SYSTEM_PROFILER,
    "networksetup": FIX_NETWORKSETUP,
}


def command_name(argv):
    """The program's name: `/usr/bin/ibv_devinfo -v` -> `ibv_devinfo`."""
    return os.path.basename(str(argv[0])) if argv else ""


def command_text(argv):
    """How messages name a command: its name and arguments, without the resolved path."""
    return " ".join([command_name(argv)] + [str(a) for a in argv[1:]])


def fix_for(argv):
    """The fix for a command that does not answer: specific where the cause is known."""
    return FIXES.get(command_name(argv), FIX_GENERIC)


class CommandTimeout(Exception):
    """`argv` did not end within `timeout` seconds (and was killed)."""

    def __init__(self, argv, timeout, stdout="", stderr=""):
        self.argv = list(argv)
        self.timeout = timeout
        self.stdout = stdout
        self.stderr = stderr
        self.command = command_text(argv)
        self.fix = fix_for(argv)
        super().__init__(self.msg)

    @property
    def reason(self):
        """What happened, without the fix: `ibv_devinfo -v` did not answer within 5 s on this Mac."""
        return f"`{self.command}` did not answer within {_seconds(self.timeout)} s on this Mac (stopped)"

    @property
    def msg(self):
        return f"{self.reason}. Fix: {self.fix}."

    def result(self):
        """What a module returns beside `msg` in its fail_json."""
        return {"cmd": self.argv, "rc": None, "stdout": self.stdout, "stderr": self.stderr, "timeout": self.timeout}


def _seconds(value):
    return f"{value:g}" if isinstance(value, float) else str(value)


def _text(data):
    return (data or b"").decode("utf-8", errors="replace")


def _kill_group(proc):
    """SIGKILL the process group `proc` leads (its own session: nothing else is in it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # gone already (PermissionError: macOS answers so for a group of zombies)


# `ps` arguments that list every process of the Mac with its whole command line: macOS's ps
# cuts each line at 79 columns when its output is no terminal (every module's), unless -ww,
# and a run's id comes last on a long command line
PS_ALL = ("-ax", "-ww", "-o", "pid=,args=")


def processes_with(ps_text, token, own_pid=None):
    """[{"pid", "args"}] from `ps` run with PS_ALL: the processes that carry `token` (a run's
    unique id) as a whole argument, never matched by a process name; `own_pid` left out."""
    found = []
    for line in (ps_text or "").splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) != 2 or not parts[0].isdigit() or int(parts[0]) == own_pid:
            continue
        if token in parts[1].split():
            found.append({"pid": int(parts[0]), "args": parts[1]})
    return found


def processes_of_runs(module, runner, run_ids):
    """[{"pid", "args"}] of this Mac's processes that carry one of `run_ids` (processes_with
    over one bounded `ps` with PS_ALL; the module's own process left out). A `ps` that fails
    fails the module, naming it."""
    argv = [module.get_bin_path("ps", required=True), *PS_ALL]
    rc, out, err = module_run(module, runner, argv)
    if rc != 0:
        module.fail_json(msg=f"ps failed: {err.strip()}", rc=rc, cmd=argv, stderr=err)
    return [f for run_id in run_ids for f in processes_with(out, run_id, own_pid=os.getpid())]


def alive(pid, zombie_is_gone=False):
    """Whether process `pid` is still there: signal 0 reaches it, or it is another user's
    (PermissionError). zombie_is_gone: a zombie (exited, not yet reaped by its parent) counts as
    gone, where /proc/<pid>/stat says so (Linux); without /proc (macOS) it counts as there."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not zombie_is_gone:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def signal_all(pids, sig):
    """Send `sig` to each of `pids`; one that is gone already is skipped."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def wait_gone(pids, seconds):
    """Wait up to `seconds` for `pids` to end (a zombie counts as ended); -> those still there."""
    deadline = time.monotonic() + seconds
    pending = [p for p in pids if alive(p, zombie_is_gone=True)]
    while pending and time.monotonic() < deadline:
        time.sleep(0.1)
        pending = [p for p in pending if alive(p, zombie_is_gone=True)]
    return pending


def stream_output(proc, timeout, on_output, on_error=None):
    """communicate() that hands each piece of standard output to `on_output(text)` (and of
    standard error to `on_error(text)`) as it arrives: the command's own progress, read while
    it runs. Raises TimeoutExpired after `timeout` seconds (None: no bound); returns (stdout,
    stderr) as bytes. `proc`: a Popen with both pipes and no standard input to write."""
    deadline = None if timeout is None else time.monotonic() + timeout
    chunks = {proc.stdout: [], proc.stderr: []}
    calls = {proc.stdout: on_output, proc.stderr: on_error}
    decoders = {pipe: codecs.getincrementaldecoder("utf-8")(errors="replace") for pipe in chunks}
    with selectors.DefaultSelector() as sel:
        for pipe in chunks:
            sel.register(pipe, selectors.EVENT_READ)
        while sel.get_map():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                # what was read so far goes with it: the caller's communicate() reads the rest
                raise subprocess.TimeoutExpired(
                    proc.args, timeout, output=b"".join(chunks[proc.stdout]), stderr=b"".join(chunks[proc.stderr])
                )
            for key, _ in sel.select(left):
                data = os.read(key.fd, 65536)
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                chunks[key.fileobj].append(data)
                call = calls[key.fileobj]
                text = decoders[key.fileobj].decode(data) if call else ""
                if text:
                    call(text)
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        proc.wait(left)  # its pipes are closed: it has ended or is about to
    except subprocess.TimeoutExpired as exc:
        exc.output, exc.stderr = b"".join(chunks[proc.stdout]), b"".join(chunks[proc.stderr])
        raise
    return b"".join(chunks[proc.stdout]), b"".join(chunks[proc.stderr])


def spawn(argv, timeout, env_update=None, data=None, on_output=None):
    """Run argv and return (rc, stdout, stderr), or raise CommandTimeout after `timeout`
    seconds (None: no bound). `data`: text for its standard input (else none). `on_output`:
    called with each piece of standard output as it arrives (the whole output is still
    returned). OSError when it cannot be started at all."""
    env = dict(os.environ, **C_LOCALE)
    env.update(env_update or {})
    proc = subprocess.Popen(
        [str(a) for a in argv],
        stdin=subprocess.DEVNULL if data is None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        close_fds=True,
        start_new_session=True,
    )
    try:
        if on_output is None:
            out, err = proc.communicate(None if data is None else data.encode(), timeout=timeout)
        else:
            if data is not None:
                proc.stdin.write(data.encode())
                proc.stdin.close()
            out, err = stream_output(proc, timeout, on_output)
    except subprocess.TimeoutExpired as exc:
        _kill_group(proc)
        before = (exc.output or b"", exc.stderr or b"") if on_output is not None else (b"", b"")
        try:
            out, err = proc.communicate(timeout=KILL_GRACE)
            out, err = before[0] + (out or b""), before[1] + (err or b"")
        except (subprocess.TimeoutExpired, ValueError):
            # stuck in the kernel: not even SIGKILL ends it now. Leave it, do not hang on it.
            # (ValueError: communicate() after stdin was written and closed by hand)
            for pipe in (proc.stdout, proc.stderr):
                try:
                    pipe.close()
                except OSError:
                    pass
            out, err = before
        raise CommandTimeout(argv, timeout, _text(out), _text(err)) from None
    except BaseException:
        _kill_group(proc)  # interrupted: leave nothing running behind
        raise
    return proc.returncode, _text(out), _text(err)


def run_bounded(argv, timeout, env_update=None, data=None, on_output=None):
    """(rc, stdout, stderr) of argv, or CommandTimeout after `timeout` seconds; `on_output`
    sees standard output as it arrives (see spawn)."""
    if on_output is None:  # spawn called as before streaming existed (stand-ins in tests take that)
        return spawn(list(argv), timeout, env_update, data)
    return spawn(list(argv), timeout, env_update, data, on_output=on_output)


_OWN = object()


class Runner:
    """A module's way to run commands: every one bounded by `timeout` seconds."""

    def __init__(self, timeout=DEFAULT_TIMEOUT):
        self.timeout = timeout

    def run(self, argv, env_update=None, timeout=_OWN, data=None, on_output=None):
        """(rc, stdout, stderr); CommandTimeout when argv does not end within the module's
        bound, or `timeout` for a command known to take longer (None: a transfer whose
        length depends on its size, not on the Mac). `on_output`: see spawn."""
        return run_bounded(argv, self.timeout if timeout is _OWN else timeout, env_update, data, on_output)


def module_run(module, runner, argv, env_update=None, timeout=_OWN, data=None):
    """runner.run(argv) for an AnsibleModule: a command that does not answer, or cannot be
    started, fails the module with a message naming it (and, for a hang, the fix)."""
    try:
        return runner.run(argv, env_update, timeout, data)
    except CommandTimeout as exc:
        module.fail_json(msg=exc.msg, **exc.result())
    except OSError as exc:
        module.fail_json(msg=f"`{command_text(argv)}` could not be started on this Mac: {exc}", cmd=list(argv))


def first_line(proc, wait):
    """What a detached child (a listener, a receiver) says first on its stdout, one line, read
    for at most `wait` seconds; then its stdout is closed (it says nothing more there). -> the
    bytes read (without a newline when it did not finish the line in time)."""
    line, end = b"", time.monotonic() + wait
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        while not line.endswith(b"\n") and time.monotonic() < end:
            if not sel.select(max(0.0, end - time.monotonic())):
                break
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            line += chunk
    finally:
        sel.close()
        proc.stdout.close()
    return line
