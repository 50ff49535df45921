# -*- coding: utf-8 -*-
"""Pure helpers for the MLX server role (no I/O): importable and testable without Ansible.

- `rank_of()` / `launch_env()`: a Mac's rank in the hostfile and the environment plus files
  `mlx.launch` would give that rank (ring: MLX_RANK + MLX_HOSTFILE; jaccl and jaccl-ring:
  MLX_RANK + MLX_IBV_DEVICES + MLX_JACCL_COORDINATOR [+ MLX_JACCL_RING]), so a rank started
  by launchd or as a detached process joins exactly as under `mlx.launch`.
- `settings_hash()`: what identifies a server's settings; equal hashes mean "leave it alone".
- `rank_files()`: the names of a rank's files in the run directory (one place for them).
- `server_argv()`: the rank's command line; `keeper_argv()`: its supervisor's
  (files/mlx_server_daemon.py: runs the rank, kills it when stalled, restarts it, bounded).
- `launchd_plist()`: the LaunchDaemon's plist, the one writer of it (the server's ranks, and
  the port probe's job that connects as they will).
- `parse_launchctl_print()`: state and PID of a launchd job from `launchctl print`.
- `process_matches()`: is a recorded PID still our rank (its command line names our run
  directory and run id)? PIDs are never looked up by process name.
- `problems()`: why a rank does not count as "running with these settings".
- `stall_verdict()` / `progress_report()`: the serving loop's heartbeat (rank<N>.json
  "progress") read as the status view shows it, "stalled" included.
- `setting_problem()`: the label and paths the role hands over, against the toolkit's one
  rule for names that reach root paths or a shell (module_utils/mlx_files.py).
- `become_owner()` / `reading_as_owner()`: root going on as the run directory's owner, for
  good (the stop) or for a block of reads (the status).
- `ranks_in()`: which rank(s) a Mac's run directory holds files of (stop and status find
  them there, so they need neither the hostfile nor the model).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import unsafe_label, unsafe_path
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_launch import BACKENDS

# mlx.launch's defaults (mlx/_distributed_utils/launch.py): one connection per address.
# where a server runs, as the three server modules take it (spec, status, stop): its run
# directory, the rank on this Mac, the supervisor and the LaunchDaemon's label
SUPERVISORS = ("launchd", "process")
DEFAULT_LABEL = "org.mlx-cluster.server"
SERVER_SPEC = dict(
    run_dir=dict(type="path", required=True),
    supervisor=dict(type="str", choices=list(SUPERVISORS), default="launchd"),
    label=dict(type="str", default=DEFAULT_LABEL),
)

RING_FILE = "ring_hosts.json"
IBV_FILE = "ibv_devices.json"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SpecError(ValueError):
    """The hostfile or the settings cannot give a rank its launch environment."""


def setting_problem(label, paths):
    """None, or why the launchd `label` (mlx_server_label: it names a plist root writes and
    removes) or one of `paths` ({setting: path}, e.g. the run directory root reads before it
    drops to the user) cannot be used."""
    return unsafe_label(label, "mlx_server_label") or next(
        (why for why in (unsafe_path(path, setting) for setting, path in paths.items()) if why), None
    )


def hostfile_hosts(hostfile):
    hosts = hostfile.get("hosts") if isinstance(hostfile, dict) else hostfile
    if not isinstance(hosts, list) or not hosts:
        raise SpecError("the hostfile lists no hosts")
    for i, h in enumerate(hosts):
        if not isinstance(h, dict) or not isinstance(h.get("ssh"), str):
            raise SpecError(f"hostfile entry {i} has no 'ssh' name")
    return hosts


def rank_of(hostfile, host):
    """The rank of inventory host `host`: its position in the hostfile (ssh names)."""
    names = [h["ssh"] for h in hostfile_hosts(hostfile)]
    if host not in names:
        raise SpecError(f"{host} is not in the hostfile ({', '.join(names)}): re-run the hostfile stage")
    if names.count(host) > 1:
        raise SpecError(f"{host} appears {names.count(host)} times in the hostfile; one rank per Mac")
    return names.index(host)


def split_env(items, what="environment"):
    """["KEY=VALUE", ...] -> {KEY: VALUE}, in order; a bad name is an error (mlx.launch skips it)."""
    out = {}
    for item in items or []:
        key, sep, value = str(item).partition("=")
        if not sep or not ENV_NAME.fullmatch(key):
            raise SpecError(f"{what} entry {item!r} is not KEY=VALUE with a valid variable name")
        out[key] = value
    return out


HIDDEN = "(set; in the 0600 env file)"


def shown_env(env, extra_env=()):
    """`env` as results and diffs show it: the values of the variables given in `extra_env`
    (mlx_server_env: a token may be among them) replaced by HIDDEN. They live only in the
    rank's 0600 env file, which the supervisor reads; the toolkit's own MLX_* values show."""
    given = set(split_env(extra_env))
    return {k: (HIDDEN if k in given else v) for k, v in env.items()}


def launch_env(hostfile, rank, run_dir, port, extra_env=()):
    """-> (env {name: value}, files {file name in run_dir: content}) for one rank.

    Mirrors mlx.launch: the hostfile's envs, then the extra ones, then the backend's
    variables; the backend's data files hold exactly what mlx.launch writes into its mktemp
    files (json.dumps of the ring addresses / RDMA device matrix, plus the newline `echo`
    adds). `port` is mlx.launch's --starting-port.
    """
    hosts = hostfile_hosts(hostfile)
    backend = hostfile.get("backend") if isinstance(hostfile, dict) else None
    if backend not in BACKENDS:
        raise SpecError(f"backend {backend!r}: the server starts ranks for {', '.join(BACKENDS)} only")
    if not 0 <= rank < len(hosts):
        raise SpecError(f"rank {rank} is outside the hostfile's {len(hosts)} host(s)")
    if not 0 < int(port) < 65536 - 64:
        raise SpecError(f"port {port} is not a usable starting port")
    env = split_env(hostfile.get("envs") or [], "hostfile envs")
    env.update(split_env(extra_env, "mlx_server_env"))
    files = {}
    run_dir = str(run_dir).rstrip("/")
    if backend == "ring":
        if any(not h.get("ips") for h in hosts):
            raise SpecError("the ring backend needs addresses ('ips') for every host in the hostfile")
        p, ring = int(port), []
        for h in hosts:
            node = []
            for ip in h["ips"]:
                node.append(f"{ip}:{p}")
                p += 1
            ring.append(node)
        # mlx.launch writes "" for a single host (and `echo` adds the newline either way)
        files[RING_FILE] = (json.dumps(ring) if len(ring) > 1 else "") + "\n"
        env["MLX_HOSTFILE"] = f"{run_dir}/{RING_FILE}"
    else:
        if not hosts[0].get("ips"):
            raise SpecError("jaccl needs rank 0's coordinator address ('ips') in the hostfile")
        n = len(hosts)
        rdma = [h.get("rdma") or [] for h in hosts]
        if any(len(r) != n for r in rdma):
            raise SpecError("the hostfile is malformed: number of RDMA devices does not match hosts")
        if any(r[i] is not None for i, r in enumerate(rdma)):
            raise SpecError("the hostfile is malformed: RDMA device of self should be null")
        ring = backend == "jaccl-ring"
        missing = [
            (i, j)
            for i in range(n)
            for j in (((i - 1) % n, (i + 1) % n) if ring else range(n))
            if i != j and rdma[i][j] is None
        ]
        if missing:
            raise SpecError(
                "the hostfile is malformed: no RDMA device is listed for "
                + ", ".join(f"{hosts[i]['ssh']} to {hosts[j]['ssh']}" for i, j in missing[:3])
            )
        env["MLX_JACCL_COORDINATOR"] = f"{hosts[0]['ips'][0]}:{int(port)}"
        if ring:
            env["MLX_JACCL_RING"] = "1"
        files[IBV_FILE] = json.dumps(rdma) + "\n"
        env["MLX_IBV_DEVICES"] = f"{run_dir}/{IBV_FILE}"
    env["MLX_RANK"] = str(rank)
    return env, files


def init_backend(hostfile_backend):
    """mx.distributed.init's name for a hostfile backend (jaccl-ring is jaccl + MLX_JACCL_RING)."""
    return "jaccl" if str(hostfile_backend).startswith("jaccl") else str(hostfile_backend)


def settings_hash(settings):
    """sha256 of the settings as canonical JSON (sorted keys, no spaces): key order and
    formatting never change it, any value does."""
    blob = json.dumps(settings, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


# The API key clients must send (mlx_server_api_key), when one is set: a file of the run
# directory, the user's alone (0600), read by rank 0 at start (--api-key-file).
API_KEY_FILE = "api_key"


def rank_files(run_dir, rank):
    """{kind: path} of one rank's files in the run directory: what the rank writes (pid, state
    with its heartbeat, log, the stopped start's state), what the spec writes (env), and its
    supervisor's own (keeper_pid, keeper)."""
    d = str(run_dir).rstrip("/") or ""
    return {
        "api_key": f"{d}/{API_KEY_FILE}",
        "pid": f"{d}/rank{rank}.pid",
        "state": f"{d}/rank{rank}.json",
        "log": f"{d}/rank{rank}.log",
        "last": f"{d}/rank{rank}.last.json",
        "env": f"{d}/rank{rank}.env.json",
        "keeper_pid": f"{d}/keeper{rank}.pid",
        "keeper": f"{d}/keeper{rank}.json",
        "keeper_last": f"{d}/keeper{rank}.last.json",
    }


def server_argv(
    python,
    script,
    *,
    model,
    run_dir,
    mode,
    world,
    backend,
    host,
    port,
    model_id,
    max_tokens,
    poll_interval,
    request_timeout,
    init_timeout,
    queue_size,
    stall_timeout,
    settings_hash_value,
    allowed_hosts=(),
    api_key_file=None,
):
    """The rank's command line (without --run-id, which each start adds)."""
    allowed = [w for name in allowed_hosts for w in ("--allowed-host", name)]
    key = ["--api-key-file", api_key_file] if api_key_file else []
    return [
        python,
        script,
        "--model",
        model,
        "--run-dir",
        run_dir,
        "--mode",
        mode,
        "--expect-world",
        str(world),
        "--init-timeout",
        _num(init_timeout),
        "--backend",
        init_backend(backend),
        "--host",
        host,
        "--port",
        str(port),
        "--model-id",
        model_id,
        "--max-tokens",
        str(max_tokens),
        "--poll-interval",
        _num(poll_interval),
        "--request-timeout",
        _num(request_timeout),
        "--queue-size",
        str(queue_size),
        "--stall-timeout",
        _num(stall_timeout),
        *allowed,
        *key,
        "--settings-hash",
        settings_hash_value,
    ]


def keeper_argv(python, keeper, *, run_dir, rank, supervisor, max_restarts):
    """The rank's supervisor's command line, up to (without) the `--` before the rank's own.
    launchd keeps it in the foreground; the process supervisor runs it detached."""
    f = rank_files(run_dir, rank)
    argv = [
        python,
        keeper,
        "--pidfile",
        f["pid"],
        "--own-pidfile",
        f["keeper_pid"],
        "--state",
        f["keeper"],
        "--heartbeat",
        f["state"],
        "--log",
        f["log"],
        "--env-file",
        f["env"],
        "--cwd",
        str(run_dir).rstrip("/") or "/",
        "--max-restarts",
        str(max_restarts),
    ]
    return argv + (["--detach"] if supervisor == "process" else [])


# ---- the LaunchDaemon ------------------------------------------------------------------------


def launchd_plist(label, argv, *, user, home, workdir, log, exit_timeout, keep_alive=True, comment=""):
    """A LaunchDaemon's plist (XML text) for a program run the way the server's ranks run: the
    rank's supervisor (role mlx_server, through the filter mlx_launchd_plist), and the port
    probe's connecting side (mlx_port_probe `launchd_user`), which must meet what a rank meets.
    Loaded with `launchctl bootstrap system <plist>` (root: the plist root:wheel, 0644), ended
    with `launchctl bootout system/<label>`.

    - `argv`: the program and its arguments, as they are (no shell). No environment but HOME:
      the plist is readable by every user, so a rank's environment stays in its 0600 env file
      (the supervisor's --env-file).
    - `user` (UserName): the job runs as this user, with `home` as HOME, in `workdir`, its
      output and errors appended to `log`, umask 077.
    - `keep_alive`: the server's supervisor restarts the rank itself (spaced, bounded) and exits
      0 when it stops on purpose or gives up, so launchd starts it again only after a crash
      (KeepAlive: {SuccessfulExit: false}, ThrottleInterval 10 s), and at boot (RunAtLoad).
      False: the job runs once, at load, and is never started again.
    - `exit_timeout` (ExitTimeOut): seconds between SIGTERM and SIGKILL at bootout (the server:
      time to finish a generation).
    - `comment`: an XML comment at the top, for whoever reads the file on the Mac."""
    import plistlib  # only the LaunchDaemon's writers pay for it

    if "--" in comment or comment.endswith("-"):
        raise ValueError("an XML comment may not hold '--' nor end with '-'")
    job = {
        "Label": str(label),
        "ProgramArguments": [str(a) for a in argv],
        "EnvironmentVariables": {"HOME": str(home)},
        "UserName": str(user),
        "WorkingDirectory": str(workdir),
        "StandardOutPath": str(log),
        "StandardErrorPath": str(log),
        "Umask": 0o077,
        "RunAtLoad": True,
    }
    if keep_alive:
        job.update(KeepAlive={"SuccessfulExit": False}, ThrottleInterval=10)
    job.update(ExitTimeOut=int(exit_timeout), ProcessType="Interactive")
    text = plistlib.dumps(job, fmt=plistlib.FMT_XML, sort_keys=False).decode("utf-8")
    if comment:
        text = text.replace('<plist version="1.0">', f'<!-- {comment} -->\n<plist version="1.0">', 1)
    return text


def _num(x):
    x = float(x)
    return str(int(x)) if x.is_integer() else repr(x)


LAUNCHCTL_KEY = re.compile(r"^\t(state|pid|last exit code|path|program) = (.*)$")


def parse_launchctl_print(text):
    """`launchctl print system/<label>` -> {"loaded", "state", "pid", "last_exit_code", "path"}.

    Only the job's own top-level keys (one tab deep) are read; nested blocks (environment,
    endpoints) are indented further and ignored. An empty text means "not loaded"."""
    out = {"loaded": bool((text or "").strip()), "state": None, "pid": None, "last_exit_code": None, "path": None}
    for line in (text or "").splitlines():
        m = LAUNCHCTL_KEY.match(line)
        if not m:
            continue
        key, value = m.group(1), m.group(2).strip()
        if key == "pid":
            out["pid"] = int(value) if value.isdigit() else None
        elif key == "last exit code":
            out["last_exit_code"] = int(value) if re.fullmatch(r"-?\d+", value) else value
        elif key in ("state", "path"):
            out[key] = value
    return out


def process_matches(ps_line, pid, run_dir, run_id=None):
    """True when `ps -ww -p PID -o pid=,args=` shows PID running our rank: its arguments name
    `--run-dir <run_dir>` and, when known, `--run-id <run_id>`. A reused PID fails this."""
    for line in (ps_line or "").splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) != 2 or not parts[0].isdigit() or int(parts[0]) != int(pid):
            continue
        words = parts[1].split()
        if not _has_option(words, "--run-dir", str(run_dir)):
            return False
        return not run_id or _has_option(words, "--run-id", run_id)
    return False


def _has_option(words, flag, value):
    return (
        any(w == flag and i + 1 < len(words) and words[i + 1] == value for i, w in enumerate(words))
        or f"{flag}={value}" in words
    )


def problems(status, want_hash, supervisor):
    """Why one rank does not count as running with the wanted settings ([] = it does)."""
    out = []
    if not status.get("running"):
        what = status.get("phase") or "never started"
        msg = status.get("message")
        out.append(f"rank {status.get('rank')} is not running ({what}{': ' + msg if msg else ''})")
        return out
    if (status.get("progress") or {}).get("stalled"):
        out.append(f"rank {status.get('rank')} is stalled: {status['progress']['stalled']}")
    if status.get("supervisor") is not None and not status["supervisor"].get("running"):
        out.append(f"rank {status.get('rank')} runs without its supervisor (no watchdog, no restart)")
    if status.get("settings_hash") != want_hash:
        out.append(
            f"rank {status.get('rank')} runs other settings "
            f"({(status.get('settings_hash') or 'unknown')[:12]}, want {want_hash[:12]})"
        )
    if supervisor == "launchd" and not (status.get("launchd") or {}).get("loaded"):
        out.append(f"rank {status.get('rank')} is not a loaded launchd job")
    if status.get("phase") == "failed":
        out.append(f"rank {status.get('rank')} reports failure: {status.get('message')}")
    return out


RANK_FILE = re.compile(r"^rank(\d+)\.(pid|json|last\.json|log)$")


def ranks_in(names):
    """Ranks that have files among `names` (a run directory's listing), most recent kind
    first: ranks with a PID file, then with a state file, then with only old files or a log."""
    score = {}
    for name in names:
        m = RANK_FILE.match(name)
        if m:
            r, kind = int(m.group(1)), m.group(2)
            score[r] = min(score.get(r, 3), {"pid": 0, "json": 1}.get(kind, 2))
    return sorted(score, key=lambda r: (score[r], r))


# ---- the run directory's files, as the status and stop modules read them ---------------

# The run id of a start, as the role makes it (restart.yml: 24 lowercase letters and digits).
# One read from a file of the run directory is used only when it has this form: the stop ends
# what carries it, and a word the user wrote there (a name every process shares) must not do.
RUN_ID_RE = re.compile(r"^[a-z0-9]{24}$")


def open_nofollow(path, mode="r"):
    """A file of a directory the user owns, opened by root for reading: never through a
    symbolic link (root reads nothing the user pointed it at), never blocking on a FIFO the user
    left there, nothing but a regular file (else OSError). The run directory's files, and the
    port probe's launchd job's (mlx_port_probe)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return os.fdopen(fd, mode)


def read_json(path):
    """A JSON object file of the run directory; {} when missing, a link, or not an object."""
    try:
        with open_nofollow(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def read_pid(path):
    """The PID in a pid file; None when missing, a link, or not a number."""
    try:
        with open_nofollow(path) as f:
            text = f.read().strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None


def _other_owner(path):
    """The lstat of the directory `path` when this process is root and another user owns it;
    None when there is nothing to drop to (not root, or root's own directory). A link, or a
    path that is no directory, raises OSError."""
    if os.geteuid() != 0:
        return None
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):  # (lstat: a symbolic link is not a directory here)
        raise OSError(f"{path} is not a directory (or is a symbolic link)")
    return None if st.st_uid == 0 else st


def become_owner(path):
    """Run as root: go on as the user who owns the directory `path` (the login user's run
    directory) for the rest of this process, so that what is read there and every signal sent
    is that user's; -> that uid, or None when nothing changed (not root, or the directory is
    root's own). A link, or a path that is no directory, raises OSError."""
    st = _other_owner(path)
    if st is None:
        return None
    import pwd

    try:
        name = pwd.getpwuid(st.st_uid).pw_name
        os.initgroups(name, st.st_gid)
    except (KeyError, OSError):
        os.setgroups([])
    os.setgid(st.st_gid)
    os.setuid(st.st_uid)
    return st.st_uid


@contextlib.contextmanager
def reading_as_owner(path):
    """Run as root: within the block, read as the user who owns the directory `path` (effective
    user, group and groups; root comes back after it), so a module that needs root for one
    command (`launchctl print`) reads the user's files with the user's rights only. Not root,
    or root's own directory: nothing changes (yields None). A link, or a path that is no
    directory, raises OSError before anything changes."""
    st = _other_owner(path)
    if st is None:
        yield None
        return
    import pwd

    try:
        groups = os.getgrouplist(pwd.getpwuid(st.st_uid).pw_name, st.st_gid)
    except (KeyError, OSError):
        groups = [st.st_gid]
    saved = (os.getegid(), os.getgroups())
    os.setgroups(groups)
    os.setegid(st.st_gid)
    os.seteuid(st.st_uid)
    try:
        yield st.st_uid
    finally:
        os.seteuid(0)
        os.setegid(saved[0])
        os.setgroups(saved[1])


# ---- the serving loop's heartbeat --------------------------------------------------------


def stall_verdict(progress, now_mono):
    """Why a ready rank's serving loop counts as stalled ("" = it does not): no turn and no
    token for progress["stall_timeout"] seconds (0 = never). The same rule is in
    roles/mlx_cluster/files/mlx_cluster_startup.py, deployed beside the server and its
    supervisor (which act on it); one table tests both (tests/unit/server/test_server_health.py)."""
    bound = float(progress.get("stall_timeout") or 0)
    mono = progress.get("progress_mono")
    if bound <= 0 or mono is None:
        return ""
    idle = now_mono - float(mono)
    if idle <= bound:
        return ""
    if progress.get("generating"):
        return (
            f"generation stalled: no token for {idle:.0f}s (bound {bound:g}s) with a request in "
            f"flight ({progress.get('tokens', 0)} token(s) so far)"
        )
    return f"serving loop stalled: no turn for {idle:.0f}s (bound {bound:g}s) while idle"


def progress_report(info, now_mono, now_wall):
    """The heartbeat of a rank's state file (rank<N>.json), as the status view shows it:
    {"generating", "tokens", "requests_done", "queue_depth", "last_turn_at", "last_token_at",
    "seconds_since_progress", "stall_timeout", "stalled"} (stalled: "" or why), or None before
    the rank serves. A rank that is not ready is never "stalled" (it is loading, or gone)."""
    prog = info.get("progress") if isinstance(info, dict) else None
    if not isinstance(prog, dict):
        return None
    since = None
    if prog.get("progress_mono") is not None:
        since = round(max(0.0, now_mono - float(prog["progress_mono"])), 1)
    return {
        "generating": bool(prog.get("generating")),
        "tokens": prog.get("tokens", 0),
        "requests_done": prog.get("requests_done", 0),
        "queue_depth": prog.get("queue_depth", 0),
        "last_turn_at": prog.get("last_turn_at"),
        "last_token_at": prog.get("last_token_at"),
        "seconds_since_progress": since,
        "stall_timeout": prog.get("stall_timeout"),
        "stalled": stall_verdict(prog, now_mono) if info.get("phase") == "ready" else "",
    }


def progress_line(report):
    """One line for people: "3 request(s) done, generating (45 tokens, last 0.2s ago)"."""
    if not report:
        return ""
    if report["stalled"]:
        return f"STALLED: {report['stalled']}"
    ago = report["seconds_since_progress"]
    now = (
        f"generating ({report['tokens']} token(s), last progress {ago}s ago)"
        if report["generating"]
        else f"idle (last turn {ago}s ago)"
    )
    queue = f", {report['queue_depth']} waiting" if report.get("queue_depth") else ""
    return f"{report['requests_done']} request(s) done, {now}{queue}"
