"""Run the real playbooks over real SSH against a simulated cluster (ansible_runner)."""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import ansible_runner

ROOT = Path(__file__).resolve().parents[2]

MUTATING = (
    ("networksetup", "-setmanual"),
    ("networksetup", "-createnetworkservice"),
    ("networksetup", "-setnetworkserviceenabled"),
    ("networksetup", "-removenetworkservice"),
    ("networksetup", "-setdhcp"),
    ("ifconfig", "deletem"),
    ("ifconfig", "addm"),
    ("ifconfig", "inet"),
    ("ifconfig", "down"),
    ("ifconfig", "up"),
    ("route", "add"),
    ("route", "change"),
    ("route", "delete"),
    ("rdma_ctl", "enable"),
    ("rdma_ctl", "disable"),
    ("scutil", "--prefs"),
    ("defaults", "write"),
    ("launchctl", "bootstrap"),
    ("launchctl", "bootout"),
)


def is_mutating(argv):
    """True for a macOS command line that changes the host (the shims log every argv)."""
    if not argv:
        return False
    names = [os.path.basename(a) for a in argv]
    if "pmset" in names:  # (sudo ...) pmset: anything but a getter (-g ...) sets something
        rest = argv[names.index("pmset") + 1 :]
        return bool(rest) and rest[0] != "-g"
    # sudo X ... -> judge X
    while argv and os.path.basename(argv[0]) == "sudo":
        argv = [a for a in argv[1:] if not a.startswith("-")]
    if not argv:
        return False
    cmd = os.path.basename(argv[0])
    if cmd == "sysctl":  # `sysctl name=value` writes
        return any("=" in a for a in argv[1:])
    return any(cmd == c and flag in argv[1:] for c, flag in MUTATING)


@dataclass
class Run:
    rc: int
    status: str
    stats: dict
    events: list = field(repr=False)
    stdout: str = field(repr=False, default="")

    def changed(self):
        """Changes the run made, less the report files it writes for people: the findings of
        preflight (preflight.json), the versions the env stage read (versions.json) and the
        cluster report (report.html) follow what the run saw, so a second run after a first
        that fixed what the first saw rewrites them, honestly `changed`, while the cluster
        itself is unchanged (report_changes() counts them)."""
        return sum((self.stats or {}).get("changed", {}).values()) - self.report_changes()

    def _report_writes(self):
        """The changed results (event_data) that only rewrote the report files."""
        # imported here: scripts/demo.sh imports this module without Ansible's collection loader
        from ansible_collections.mlx.cluster.plugins.plugin_utils import report

        names = {report.REPORT_NAME, report.PREFLIGHT_NAME, report.VERSIONS_NAME}
        for e in self.events:
            res = (e.get("event_data") or {}).get("res") or {}
            if e.get("event") != "runner_on_ok" or not res.get("changed"):
                continue
            paths = [res.get("path")] + [f.get("path") for f in res.get("files") or [] if isinstance(f, dict)]
            written = [p for p in paths if isinstance(p, str)]
            if written and all(os.path.basename(p) in names for p in written):
                yield e["event_data"]

    def report_changes(self):
        """Task results that rewrote the report files (preflight.json, versions.json, report.html)."""
        return sum(1 for _ in self._report_writes())

    def changed_plays(self):
        """The names of the plays with a changed task result, less the report files' writes
        (as changed()): a run of several tags says which of its stages changed something."""
        reports = {id(d) for d in self._report_writes()}
        return {
            e["event_data"].get("play")
            for e in self.events
            if e.get("event") == "runner_on_ok"
            and ((e.get("event_data") or {}).get("res") or {}).get("changed")
            and id(e["event_data"]) not in reports
        }

    def failures(self):
        """[(host, task, msg)] of failed / unreachable task results (or the output's tail)."""
        out = []
        if self.rc != 0 and not any(
            e.get("event") in ("runner_on_failed", "runner_on_unreachable") for e in self.events
        ):
            out.append((None, None, self.stdout[-3000:]))
        for e in self.events:
            if e.get("event") in ("runner_on_failed", "runner_on_unreachable"):
                d = e["event_data"]
                res = d.get("res") or {}
                msg = res.get("msg") or json.dumps(res)[:500]
                items = [r.get("msg") for r in res.get("results") or [] if isinstance(r, dict) and r.get("failed")]
                if items:  # a loop: what each failed item said
                    msg = "; ".join([msg] + [str(m) for m in items if m])
                out.append((d.get("host"), d.get("task"), msg))
        return out

    def preflight_summary(self):
        """The preflight summary lines (warnings included), from the run's events."""
        for e in self.events:
            d = e.get("event_data", {})
            if e.get("event") == "runner_on_ok" and d.get("task") == "Show the preflight summary":
                return "\n".join(d["res"].get("msg") or [])
        return ""

    def results(self, task_name):
        return [
            e["event_data"]
            for e in self.events
            if e.get("event") in ("runner_on_ok", "runner_on_failed") and e["event_data"].get("task") == task_name
        ]


def existing_vars():
    """The env stage's other option, `existing`: the Macs run an interpreter that already has
    mlx (here the controller's, which the simulated Macs can reach), pinned to what it has.
    For the tests of that option, the tools compared with (bench/) and tests that need the
    ranks' interpreter to be a known path; run_site's default is the default path (venv)."""
    return {
        "python_env_mode": "existing",
        "python_env_interpreter": sys.executable,
        "python_env_mlx_version": metadata.version("mlx"),
        "python_env_mlx_lm_version": metadata.version("mlx-lm"),
    }


def lab_requirements():
    """The simulated Macs' pins: the role's three, and, because they run Linux, mlx's CPU back end,
    which Linux's mlx wheel leaves to a package of its own (mlx[cpu]; on macOS the mlx wheel has
    Metal)."""
    pins = defaults("python_env")
    mlx = pins["python_env_mlx_version"]
    return [
        f"mlx=={mlx}",
        f"mlx-lm=={pins['python_env_mlx_lm_version']}",
        f"prometheus-client=={pins['python_env_prometheus_client_version']}",
        f"mlx-cpu=={mlx}",
    ]


def lab_lock(cluster):
    """The lock for the simulated Macs' wheels, made as a lab makes one for its mirror:
    scripts/lock_requirements.py --wheels over the wheels the mirror serves (the role's own
    lock is for macOS's wheels). Its path, for python_env_lock_file."""
    reqs = lab_requirements()
    house = cluster.wheelhouse(reqs)
    lock = house / "requirements.lock"
    if not lock.exists():
        tmp = house / "requirements.lock.tmp"
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "scripts" / "lock_requirements.py"),
                "--wheels",
                str(house),
                "--extra",
                reqs[3],
                "-o",
                str(tmp),
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        os.replace(tmp, lock)
    return str(lock)


@contextmanager
def host_vars(cluster, **texts):
    """Host variables as a user writes them beside the inventory: host_vars/<mac>.yml with the
    text given for each Mac (`m2="ansible_python_interpreter: auto\n"`), removed on leaving."""
    where = cluster.inventory_path.parent / "host_vars"
    where.mkdir(exist_ok=True)
    written = []
    try:
        for host, text in texts.items():
            written.append(where / f"{host}.yml")
            written[-1].write_text(text)
        yield
    finally:
        for path in written:
            path.unlink(missing_ok=True)


def lab_vars(cluster):
    """What a lab whose Macs reach no package index but its own mirror sets, for the env
    stage's default path (venv): the mirror (the simulation's, serving the pinned wheels on the
    LAN), its lock (lab_lock) and mlx's CPU back end (lab_requirements)."""
    reqs = lab_requirements()
    url = cluster.serve_packages(reqs)
    return {
        "python_env_pip_index_url": url,
        "python_env_extra_packages": reqs[3:],
        "python_env_lock_file": lab_lock(cluster),
    }


def defaults(role):
    """A role's defaults, as its defaults/main.yml says (the one place they are written)."""
    import yaml

    return yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())


def env_vars(cluster, python_env):
    """The env stage's settings for a run: "venv" (the default path, as the inventory's defaults
    take it, from the lab's mirror: lab_vars), "existing" (existing_vars, for the tests of that
    option and the tools compared with), or None (nothing: a new user's defaults, no mirror).
    Every wiring takes the default path unless a test says otherwise (until 2026-11-28 only pair
    and mesh4 did: a venv cost about 20 s of CPU per simulated Mac before the install stopped
    byte-compiling, bench/NOTES.md)."""
    if python_env == "venv":
        return lab_vars(cluster)
    if python_env == "existing":
        return existing_vars()
    if python_env is None:
        return {}
    raise ValueError(f"python_env is venv, existing or None, not {python_env!r}")


# The venvs the env stage made in this test run, by where a Mac sees them: a venv is made once
# per run (by whichever pytest-xdist worker's env stage makes it first) and copied to the Macs of
# every later cluster with the same home and base Python, before that cluster's first run (a
# Mac on which an earlier run of the stage made it). The stage's making of a venv is the tests'
# of test_first_run (python_env=None: never copied to). The cache belongs to the run's
# controlling process (the workers' parent), which removes it when the session ends
# (tests/conftest.py); a run without workers removes its own at exit.
def venv_cache(owner):
    return Path(tempfile.gettempdir()) / f"mlxc-venvs-{owner}"


VENV_CACHE = venv_cache(os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid())
VENV = "mlx-cluster/venv"  # below the Mac's home: python_env's default, <cluster dir>/venv
if not os.environ.get("PYTEST_XDIST_WORKER"):
    atexit.register(shutil.rmtree, VENV_CACHE, ignore_errors=True)
# the env stage's task that installs the pins: exit 0 on a host = that host's venv holds every pin
INSTALL_TASK = "Install the pinned mlx and mlx-lm into the venv"


def _venv_key(cluster, host):
    return f"srv-{cluster.spec.host(host).home}"


def _venv_base(venv):
    """The base Python a venv was made from, or None: where its bin/python link leads, through
    the links within bin/ (venv makes python -> python3.11 -> /opt/homebrew/bin/python3.11)."""
    link = venv / "bin" / "python"
    for _ in range(8):
        try:
            target = os.readlink(link)
        except OSError:
            return None
        if os.path.isabs(target):
            return target
        link = link.parent / target
    return None


def seed_venvs(cluster):
    """Copy this worker's venv to every Mac of the cluster that has none at the same path and
    has the venv's base Python (the env stage then finds it in place and leaves it alone)."""
    for host in cluster.hosts:
        cached = VENV_CACHE / _venv_key(cluster, host)
        dest = cluster.home(host) / VENV
        base = _venv_base(cached)
        if base is None or dest.exists():
            continue
        if cluster.exec(host, ["test", "-x", base]).returncode != 0:
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", str(cached), str(dest)], check=True)


def keep_venv(cluster, run):
    """After a run whose env stage made a Mac's venv (its install exited 0 there, whatever the
    rest of the run did): keep one (per home) for the next clusters. Two workers may keep the
    same one at once: each copies to a name of its own, the first rename wins."""
    made_on = {d.get("host") for d in run.results(INSTALL_TASK) if (d.get("res") or {}).get("rc") == 0}
    for host in cluster.hosts:
        cached = VENV_CACHE / _venv_key(cluster, host)
        made = cluster.home(host) / VENV
        if host not in made_on or cached.exists() or _venv_base(made) is None:
            continue
        tmp = cached.with_name(f"{cached.name}.part-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", str(made), str(tmp)], check=True)
        try:
            tmp.rename(cached)
        except OSError:  # another worker kept it first
            shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def venv_turn(cluster, makes):
    """While a run that may make a venv the cache lacks (`makes`: the env stage runs, its
    default path, not in check mode) is under way, a run of another worker that may make one
    too waits, then takes the copy the first kept (seed_venvs), instead of building the same
    venv beside it on the same cores (at a suite's start both workers' first runs would)."""
    lacking = [
        h
        for h in cluster.hosts
        if not (VENV_CACHE / _venv_key(cluster, h)).exists() and not (cluster.home(h) / VENV).exists()
    ]
    if not makes or not lacking:
        yield
        return
    VENV_CACHE.mkdir(parents=True, exist_ok=True)
    with open(VENV_CACHE / "making.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes, after keep_venv()
        yield


def _profile(cluster, playbook, tags, check, started, events):
    """With MLXC_PROFILE=<file>: one JSON line per playbook run (the test, the wiring, the run's
    wall time, each task's time summed over its hosts), to find where the suite's time goes
    (bench/NOTES.md, "Where the suite's time goes"). Off by default; never read by a test."""
    path = os.environ.get("MLXC_PROFILE")
    if not path:
        return
    tasks = {}
    for ev in events:
        data = ev.get("event_data") or {}
        if ev.get("event", "").startswith("runner_on_") and isinstance(data.get("duration"), (int, float)):
            key = "%s | %s" % (data.get("role") or "-", data.get("task") or "?")
            tasks[key] = tasks.get(key, 0.0) + data["duration"]
    line = {
        "test": os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0],
        "spec": getattr(getattr(cluster, "spec", None), "name", "?"),
        "playbook": playbook,
        "tags": tags,
        "check": check,
        "seconds": round(time.monotonic() - started, 2),
        "tasks": {k: round(v, 2) for k, v in tasks.items()},
    }
    with open(path, "a") as fh:
        fh.write(json.dumps(line) + "\n")


def run_site(
    cluster,
    tags=None,
    check=False,
    diff=False,
    extravars=None,
    playbook="site.yml",
    timeout=600,
    python_env="venv",
    controller_bin=None,
):
    """Run `playbook` against the cluster's inventory; return a Run. The env stage takes its
    default path (a venv, from the lab's mirror) unless `python_env` says "existing", or None
    for nothing but the inventory and `extravars` (a new user's defaults). With the default
    path, a Mac without the venv gets the one this run's env stage made already (seed_venvs).
    controller_bin: the directory of the ansible-playbook to run (another venv's bin), else
    $MLXC_CONTROLLER_BIN when set (any part of the suite against another ansible-core, e.g.
    `MLXC_CONTROLLER_BIN=/tmp/v221/bin bash scripts/test.sh tests/e2e/test_faults.py`), else
    this suite's own."""
    controller_bin = controller_bin or os.environ.get("MLXC_CONTROLLER_BIN") or None
    keeps = python_env == "venv" and not check and not any(k.startswith("python_env_") for k in extravars or {})
    with venv_turn(cluster, keeps and (not tags or bool({"env", "all"} & set(tags)))):
        if python_env == "venv":
            seed_venvs(cluster)
        run = _run_site(cluster, tags, check, diff, extravars, playbook, timeout, python_env, controller_bin)
        if keeps:
            keep_venv(cluster, run)
    return run


def _run_site(cluster, tags, check, diff, extravars, playbook, timeout, python_env, controller_bin):
    work = Path(tempfile.mkdtemp(prefix="mlxc-runner-"))
    env = {
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_HOME": str(work / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(work / "tmp"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(work / "cp"),
        "ANSIBLE_NOCOLOR": "1",
        # ansible-runner turns host-key checking OFF unless told otherwise: keep ours on.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        # the tests read a module's arguments from its result (`invocation`), which ansible-core
        # 2.21 leaves out unless told (INJECT_INVOCATION; before 2.21 always there, this unread)
        "ANSIBLE_INJECT_INVOCATION": "True",
        "PATH": os.pathsep.join([str(controller_bin or Path(sys.executable).parent), cluster.env()["PATH"]]),
    }
    cmdline = []
    if check:
        cmdline.append("--check")
    if diff:
        cmdline.append("--diff")
    started = time.monotonic()
    r = ansible_runner.run(
        private_data_dir=str(work),
        project_dir=str(ROOT),
        playbook=str(ROOT / playbook),
        inventory=str(cluster.inventory_path),
        envvars=env,
        extravars={**env_vars(cluster, python_env), **(extravars or {})},
        tags=",".join(tags) if tags else None,
        cmdline=" ".join(cmdline) or None,
        quiet=True,
        timeout=timeout,
    )
    # (r.events reads the run's event files from disk on every use: read once)
    run = Run(
        rc=r.rc, status=r.status, stats=r.stats or {}, events=list(r.events), stdout=r.stdout.read() if r.stdout else ""
    )
    # the run's private data (its event files, ansible's temp and control sockets): read, and
    # about 400 KB a run, 200 runs a suite, in /tmp for good otherwise
    shutil.rmtree(work, ignore_errors=True)
    # every setting the suite gives (the lab's, the env stage's, each test's own) is one a role
    # reads: validate's warning for a variable no stage reads would be a false one here
    unread = [line for line in run.stdout.splitlines() if "is not a setting of mlx-cluster" in line]
    assert not unread, f"validate warned about a setting the suite gives: {unread}"
    # a deprecation ansible-core warns about is a run that breaks on a later ansible-core (2.20
    # warned about every stage reading facts as top-level variables): none in any run
    deprecated = [line for line in run.stdout.splitlines() if "[DEPRECATION WARNING]" in line]
    assert not deprecated, f"ansible-core warned of deprecated use: {deprecated}"
    _profile(cluster, playbook, tags, check, started, run.events)
    return run
