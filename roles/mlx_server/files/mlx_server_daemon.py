#!/usr/bin/env python3
"""The supervisor of one rank of mlx-cluster's server: runs it, watches its progress, restarts it.

    mlx_server_daemon.py --pidfile FILE [--own-pidfile FILE] [--state FILE] [--heartbeat FILE]
        [--log FILE] [--env-file FILE] [--cwd DIR] [--detach]
        [--max-restarts N] [--restart-window SECONDS] [--throttle SECONDS] -- ARGV...

Standard library only, plus mlx_cluster_startup.py (deployed beside it) for the launcher
variables it drops. One per Mac, under launchd (in the foreground: launchd keeps it) or, with
--detach, on its own (the `process` supervisor: hosts without launchd).

- ARGV (the rank's command line, an argv list, never a shell string) runs as this process's
  child, in its process group; stdin /dev/null, stdout and stderr shared with this process.
  --pidfile gets the child's PID at every start (the rank writes it too, once it runs).
- Environment: this process's environment without the variables an MLX launcher sets
  (MLX_RANK, MLX_HOSTFILE, ...), plus the JSON object {"NAME": "value"} in --env-file.
- Watchdog: every second it reads --heartbeat (the rank's rank<N>.json). When the rank is
  ready and its serving loop made no progress (no turn, no token) for the bound the rank
  itself wrote there ("progress"."stall_timeout"), the rank counts as stalled: it is marked
  failed with the reason and killed (SIGKILL: a rank stuck in a collective, in the GPU or
  stopped cannot act on SIGTERM). Its peers then lose their collective and exit (7), or
  stall and are killed by their own supervisor, so every rank goes down and comes back.
- Restarts: a rank that ended other than cleanly (exit 0) or with bad arguments (exit 2) is
  started again after THROTTLE, 2 x THROTTLE, 4 x ... seconds (capped at MAX_DELAY), at most
  --max-restarts times within --restart-window seconds; one more failure and it gives up:
  the rank's file says why, naming this Mac and the fix, and this process exits 0.
- SIGTERM, SIGINT or SIGHUP: passed to the rank as SIGTERM (it finishes the generation
  under way and stops every rank); no restart; exits 0 when the rank is gone.
- Exit status: 0 whenever it stopped on purpose (the rank stopped, cannot start, or it gave
  up), so launchd's KeepAlive (SuccessfulExit false) restarts only a supervisor that crashed.
- --state (keeper<N>.json): {"pid", "host", "child_pid", "state", "message", "restarts":
  [{"at", "why"}], "max_restarts", "restart_window", "started", "updated"}; state is starting,
  running, waiting (before a restart), stopping, stopped, failed or gave_up.
- --detach: double fork + setsid (not a session leader: never a controlling terminal, and
  not a child of the SSH session that started it), umask 077, working directory --cwd,
  stdout and stderr appended to --log (an earlier log is kept as <log>.1). Prints one JSON
  line {"pid": the rank's PID, "supervisor": this process's PID, "pidfile", "log", "argv"}
  once the rank has been exec'd and exits 0; exits 1 with the reason on stderr when it could
  not be started.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

from mlx_cluster_startup import EXIT_RDMA, LAUNCHER_ENV, stall_verdict  # deployed beside this file

EXIT_USAGE = 2  # the rank's bad arguments or model directory: a restart cannot help
CHECK_EVERY = 1.0  # seconds between two looks at the heartbeat
THROTTLE = 10.0  # launchd's ThrottleInterval: no start sooner than this after the last
MAX_DELAY = 300.0


def log(msg):
    print(
        f"[{time.strftime('%Y-%m-%d %H:%M:%S')} supervisor {socket.gethostname()}] {msg}", file=sys.stderr, flush=True
    )


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--pidfile", required=True, help="the rank's PID, written at every start")
    p.add_argument("--own-pidfile", help="this supervisor's PID")
    p.add_argument("--state", help="this supervisor's state (JSON)")
    p.add_argument("--heartbeat", help="the rank's state file with its progress (rank<N>.json)")
    p.add_argument("--log", help="stdout and stderr of both (with --detach)")
    p.add_argument("--env-file", help="JSON object of environment variables for the rank")
    p.add_argument("--cwd", default="/")
    p.add_argument("--detach", action="store_true", help="run detached (the process supervisor)")
    p.add_argument("--max-restarts", type=int, default=3, help="restarts allowed within --restart-window")
    p.add_argument("--restart-window", type=float, default=3600.0)
    p.add_argument("--throttle", type=float, default=THROTTLE, help="seconds before the first restart")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        p.error("no command given (after --)")
    if args.detach and not args.log:
        p.error("--detach needs --log")
    if args.max_restarts < 0 or args.restart_window <= 0 or args.throttle < 0:
        p.error("--max-restarts >= 0, --restart-window > 0 and --throttle >= 0")
    return args


def child_env(env_file):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}
    if env_file:
        with open(env_file) as f:
            extra = json.load(f)
        if not isinstance(extra, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in extra.items()):
            raise ValueError(f"{env_file}: not a JSON object of strings")
        env.update(extra)
    return env


def rotate(path):
    if os.path.exists(path):
        os.replace(path, path + ".1")


def write_atomic(path, text):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def read_json(path):
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


# ---- pure rules (tests/unit/server/test_server_daemon.py) -------------------------------


def describe_exit(returncode):
    return f"killed by signal {-returncode}" if returncode < 0 else f"exit code {returncode}"


def restart_delay(nth, throttle):
    """Seconds before the nth restart within the window (1-based): throttle, 2x, 4x, ..."""
    return min(MAX_DELAY, throttle * 2 ** (nth - 1))


def decide(returncode, recent, max_restarts):
    """What to do when the rank ended: ("stop" | "failed" | "give_up" | "restart", why).
    `recent`: restarts already made within the window."""
    if returncode == 0:
        return "stop", "the rank stopped"
    if returncode == EXIT_USAGE:
        return "failed", "the rank refused its arguments or model directory (exit 2): a restart cannot help"
    if returncode == EXIT_RDMA:
        return "failed", (
            f"RDMA could not be brought up (exit {EXIT_RDMA}): never retried, as repeated "
            "attempts can wedge the link further; the rank's log names the devices and the fix"
        )
    if recent >= max_restarts:
        return "give_up", f"{recent} restart(s) within the window already"
    return "restart", f"restart {recent + 1} of {max_restarts}"


def give_up_message(host, recent, window, log_path):
    """What follows the rank's own last word when its supervisor gives up."""
    return (
        f"on {host} its supervisor gave up after {recent} restart(s) within {window:g}s. "
        f"Look at {log_path or 'its log'} on {host}; a stalled generation usually means a wedged "
        f"GPU or RDMA link, a Mac asleep or a model too large: reboot {host} (or replug its "
        "Thunderbolt cables), then start the server again (ansible-playbook site.yml --tags server)"
    )


# ---- the supervisor ----------------------------------------------------------------------


class Keeper:
    def __init__(self, args, env, clock=time.monotonic, wall=time.time):
        self.args, self.env, self.clock, self.wall = args, env, clock, wall
        self.host = socket.gethostname()
        self.proc = None
        self.stopping = False
        self.restarts = []  # clock() of each restart made
        self.state = {
            "pid": os.getpid(),
            "host": self.host,
            "child_pid": None,
            "state": "starting",
            "message": "",
            "restarts": [],
            "max_restarts": args.max_restarts,
            "restart_window": args.restart_window,
            "started": wall(),
            "updated": wall(),
        }

    def on_signal(self, signum, _frame):
        if not self.stopping:
            log(f"signal {signum}: stopping the rank (no restart)")
        self.stopping = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def save(self, state=None, message=None, **extra):
        if state is not None:
            self.state["state"] = state
        if message is not None:
            self.state["message"] = message
        self.state.update(updated=self.wall(), **extra)
        if self.args.state:
            write_atomic(self.args.state, json.dumps(self.state, indent=2, sort_keys=True) + "\n")

    def mark_rank(self, pid, message, over_failed=False, after=False):
        """The rank is gone without saying why (killed here, or by a signal), or its supervisor
        has the last word (it gave up, `after` the rank's own): the rank's file says so. Never
        over a clean stop."""
        if not self.args.heartbeat:
            return
        data = read_json(self.args.heartbeat)
        if (
            data.get("pid") != pid
            or data.get("phase") == "stopped"
            or (data.get("phase") == "failed" and not (over_failed or after))
        ):
            return
        if after and data.get("phase") == "failed" and data.get("message"):
            message = f"{data['message']}; {message}"
        data.update(phase="failed", message=message, updated=self.wall())
        write_atomic(self.args.heartbeat, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def spawn(self):
        proc = subprocess.Popen(self.args.command, env=self.env, stdin=subprocess.DEVNULL, close_fds=True)
        write_atomic(self.args.pidfile, f"{proc.pid}\n")
        self.proc = proc
        self.save("running", "", child_pid=proc.pid)
        log(f"started the rank: pid {proc.pid}")
        return proc

    def stalled(self, pid):
        if not self.args.heartbeat:
            return ""
        data = read_json(self.args.heartbeat)
        if data.get("pid") != pid or data.get("phase") != "ready":
            return ""
        return stall_verdict(data.get("progress") or {}, self.clock())

    def watch(self, proc):
        """Until the rank ends: -> (returncode, why it was ended here or "")."""
        killed_for, next_check, told = "", self.clock() + CHECK_EVERY, False
        while True:
            rc = proc.poll()
            if rc is not None:
                return rc, killed_for
            if self.stopping and not told:  # a signal that came while the rank was being started
                told = True
                proc.send_signal(signal.SIGTERM)
            if not killed_for and not self.stopping and self.clock() >= next_check:
                next_check = self.clock() + CHECK_EVERY
                killed_for = self.stalled(proc.pid)
                if killed_for:
                    log(f"rank pid {proc.pid}: {killed_for}: killing it (SIGKILL)")
                    proc.kill()
            time.sleep(0.1)

    def sleep(self, seconds):
        end = self.clock() + seconds
        while not self.stopping and self.clock() < end:
            time.sleep(min(0.2, max(0.0, end - self.clock())))

    def run(self, report=None):
        """-> exit status. `report(text)` is told once whether the first start worked."""
        first = True
        while True:
            try:
                proc = self.spawn()
            except OSError as exc:
                why = f"could not start {self.args.command[0]}: {exc}"
                log(why)
                self.save("failed", why, child_pid=None)
                if report:
                    report(f"error {why}")
                return 0
            if first and report:
                report(f"started {proc.pid}")
            first = False
            rc, killed_for = self.watch(proc)
            why = killed_for or describe_exit(rc)
            if killed_for:
                self.mark_rank(proc.pid, f"{killed_for}; ended by its supervisor", over_failed=True)
            elif rc != 0:
                self.mark_rank(proc.pid, f"ended with {why}")
            self.proc = None
            if self.stopping:
                self.save("stopped", f"stopped on request (the rank ended with {describe_exit(rc)})", child_pid=None)
                return 0
            now = self.clock()
            self.restarts = [t for t in self.restarts if now - t < self.args.restart_window]
            action, detail = decide(rc, len(self.restarts), self.args.max_restarts)
            if action == "stop":
                self.save("stopped", detail, child_pid=None)
                log(detail)
                return 0
            if action == "failed":
                self.save("failed", detail, child_pid=None)
                log(detail)
                return 0
            if action == "give_up":
                msg = give_up_message(self.host, len(self.restarts), self.args.restart_window, self.args.log)
                self.mark_rank(proc.pid, msg, after=True)
                msg = f"the rank failed again ({why}); {msg}"
                self.save("gave_up", msg, child_pid=None)
                log(msg)
                return 0
            delay = restart_delay(len(self.restarts) + 1, self.args.throttle)
            self.restarts.append(now)
            self.state["restarts"].append({"at": self.wall(), "why": why})
            msg = f"the rank ended ({why}); {detail} in {delay:g}s"
            self.save("waiting", msg, child_pid=None)
            log(msg)
            self.sleep(delay)
            if self.stopping:
                self.save("stopped", "stopped on request while waiting to restart the rank")
                return 0


def serve(args, env, report=None):
    keeper = Keeper(args, env)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, keeper.on_signal)
    if args.own_pidfile:
        write_atomic(args.own_pidfile, f"{os.getpid()}\n")
    keeper.save()
    try:
        return keeper.run(report)
    finally:
        if args.own_pidfile:
            try:
                with open(args.own_pidfile) as f:
                    mine = f.read().strip() == str(os.getpid())
                if mine:
                    os.unlink(args.own_pidfile)
            except OSError:
                pass


def detached(args, env, report_fd):
    """In the detached process: set up, then supervise. Never returns."""
    code = 1
    try:
        os.chdir(args.cwd)
        os.umask(0o077)
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        for fd in (null, out):
            if fd > 2:
                os.close(fd)

        def report(text):
            os.write(report_fd, text.encode()[:4000])
            os.close(report_fd)

        code = serve(args, env, report)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, then exit
        try:
            os.write(report_fd, f"error {type(exc).__name__}: {exc}".encode()[:4000])
        except OSError:
            pass
    finally:
        os._exit(code)


def main(argv=None):
    args = parse_args(argv)
    try:
        env = child_env(args.env_file)
        if args.detach:
            rotate(args.log)
    except (OSError, ValueError) as exc:
        print(f"mlx_server_daemon: {exc}", file=sys.stderr)
        return 1
    if not args.detach:
        os.chdir(args.cwd)
        return serve(args, env)
    r, w = os.pipe()
    first = os.fork()
    if first == 0:
        os.close(r)
        try:
            os.setsid()
            if os.fork() > 0:
                os._exit(0)
        except BaseException:  # noqa: BLE001
            os._exit(127)
        detached(args, env, w)
    os.close(w)
    os.waitpid(first, 0)
    chunks = []
    while True:
        data = os.read(r, 4096)
        if not data:
            break
        chunks.append(data)
    os.close(r)
    said = b"".join(chunks).decode(errors="replace")
    if not said.startswith("started "):
        print(f"mlx_server_daemon: {said.partition(' ')[2] or 'could not start ' + args.command[0]}", file=sys.stderr)
        return 1
    supervisor = None
    if args.own_pidfile:
        try:
            with open(args.own_pidfile) as f:
                supervisor = int(f.read().strip())
        except (OSError, ValueError):
            supervisor = None
    print(
        json.dumps(
            {
                "pid": int(said.split()[1]),
                "supervisor": supervisor,
                "pidfile": args.pidfile,
                "log": args.log,
                "argv": args.command,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
