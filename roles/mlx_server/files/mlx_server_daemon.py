#!/usr/bin/env python3
"""Start one command detached from the session, record its PID, and return at once.

    mlx_server_daemon.py --pidfile FILE --log FILE [--env-file FILE] [--cwd DIR] -- ARGV...

The `process` supervisor of mlx-cluster's server role (where there is no launchd: the
simulated cluster, or by choice). Standard library only, plus mlx_cluster_startup.py
(deployed beside it) for the launcher variables it drops.

- ARGV is exec'd as given (an argv list, never a shell string).
- Double fork + setsid: the command runs in a new session and process group (not as their
  leader, so it can never acquire a controlling terminal), is not a child of the SSH session
  that started it and survives the session's end; its PID is how it is reached.
- Environment: this process's environment without the variables an MLX launcher sets
  (MLX_RANK, MLX_HOSTFILE, ...), plus the JSON object {"NAME": "value"} in --env-file.
- stdin is /dev/null; stdout and stderr are appended to --log (an earlier log is kept as
  <log>.1); umask 077; working directory --cwd (default /).
- --pidfile gets the command's PID before it is exec'd (exec keeps the PID).

Prints one JSON line {"pid", "pidfile", "log", "argv"} once the command has been exec'd and
exits 0; exits 1 with the reason on stderr when it could not be started (the exec failed,
the log or pidfile could not be written). What the command does after exec is for its
supervisor's health check to find out.
"""

import argparse
import json
import os
import sys

from mlx_cluster_startup import LAUNCHER_ENV  # deployed beside this file


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--pidfile", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--env-file", help="JSON object of environment variables for the command")
    p.add_argument("--cwd", default="/")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        p.error("no command given (after --)")
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


def rotate(log):
    if os.path.exists(log):
        os.replace(log, log + ".1")


def write_pidfile(path, pid):
    tmp = f"{path}.tmp{pid}"
    with open(tmp, "w") as f:
        f.write(f"{pid}\n")
    os.replace(tmp, path)


def grandchild(args, env, report_fd):
    """In the detached process: set up, record the PID, exec. Never returns."""
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
        write_pidfile(args.pidfile, os.getpid())
        if os.sep in args.command[0]:
            os.execve(args.command[0], args.command, env)
        os.execvpe(args.command[0], args.command, env)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, then exit
        try:
            os.write(report_fd, f"{type(exc).__name__}: {exc}".encode()[:4000])
        finally:
            os._exit(127)


def main(argv=None):
    args = parse_args(argv)
    try:
        env = child_env(args.env_file)
        rotate(args.log)
    except (OSError, ValueError) as exc:
        print(f"mlx_server_daemon: {exc}", file=sys.stderr)
        return 1
    # The report pipe closes on exec (close-on-exec): EOF with no data means exec succeeded.
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
        grandchild(args, env, w)
    os.close(w)
    os.waitpid(first, 0)
    chunks = []
    while True:
        data = os.read(r, 4096)
        if not data:
            break
        chunks.append(data)
    os.close(r)
    if chunks:
        print(f"mlx_server_daemon: could not start {args.command[0]}: {b''.join(chunks).decode(errors='replace')}",
              file=sys.stderr)
        return 1
    try:
        with open(args.pidfile) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError) as exc:
        print(f"mlx_server_daemon: started, but the pidfile {args.pidfile} is unreadable: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"pid": pid, "pidfile": args.pidfile, "log": args.log, "argv": args.command}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
