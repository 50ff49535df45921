"""The simulated Mac cluster: network namespaces as Macs, veth pairs as Thunderbolt cables.

    cluster = SimCluster("mesh4", "/tmp/mlxsim/mesh4")
    cluster.up()
    subprocess.run(["ansible-playbook", "-i", cluster.inventory_path, ...], env=cluster.env())
    subprocess.run(["mlx.distributed_config", ...], env=cluster.harness_env())  # tools compared with
    cluster.down()

Topology built by `up()` (every name carries the prefix `mlxsim-<hash of the state dir>`):

- `<prefix>-ctl`: the controller's side of the management LAN: a Linux bridge `mgmt0` with
  the first address of `management.cidr`. Nothing of the cluster has an address in the
  root namespace: ssh reaches the Macs through `ip netns exec <prefix>-ctl relay.py`
  (ProxyCommand in the generated ssh_config, for the LAN's addresses only).
- `<prefix>-<host>` per Mac: `en0` (veth to mgmt0), one veth per Thunderbolt receptacle
  (`en2`... for receptacle 1...), `bridge0` (a Linux bridge standing in for the Thunderbolt
  Bridge), sshd and everything the Mac runs (PID 1 = hostinit.py).
- `<prefix>-wire`: the cables. Each cable is two veths, one into each Mac, joined by a
  two-port bridge here; unplugging a cable takes its wire-side ends down, so both Macs see
  the carrier drop while their own interface settings stay what they were.

Every process the harness starts has the state directory on its command line; teardown
only ends processes that do (verified in /proc/PID/cmdline) and that it recorded or found
inside its own namespaces.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import yaml

from .spec import ClusterSpec, SpecError, load_spec

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SHIMS = HERE / "shims"
METAL = HERE / "metal"
SHIM_COMMANDS = [
    "system_profiler",
    "ps",
    "networksetup",
    "ifconfig",
    "route",
    "netstat",
    "ipconfig",
    "ibv_devices",
    "ibv_devinfo",
    "rdma_ctl",
    "sw_vers",
    "sysctl",
    "ping",
    "sudo",
    "rsync",
    "scutil",
    "pmset",
    "defaults",
    "socketfilterfw",
    "launchctl",
    "xcode-select",
    "softwareupdate",
]
RDMA_COMMANDS = {"rdma_ctl", "ibv_devices", "ibv_devinfo"}  # macOS 26.2 and later only
NS_PREFIX = "mlxsim-"
MOUNTPOINT = "/srv"  # every Mac sees its own home here
LIBRARY = "/Library"  # every Mac sees its own /Library (preferences) here
HOME = f"{MOUNTPOINT}/admin"
ROOT_HOME = f"{MOUNTPOINT}/root"
DEFAULT_STATE_ROOT = Path("/tmp/mlxsim")
LIVE_KEYS = {
    "rdma",
    "macos",
    "build",
    "tb_version",
    "model",
    "model_id",
    "chip",
    "memory_gb",
    "ncpu",
    "wired_limit_mb",
    "require_sudo",
    "sudo_password",
    "sudo_commands",
    "rdma_port_down",
    "die_on",
    "hang",
    "slow",
    "firewall",
    "command_line_tools",
    "pythons",
    "local_network_denied_to_daemons",
}
# The message of /usr/bin/python3 on a Mac without the Command Line Tools, over ssh (no UI to
# ask for them): xcode-select's, as public reports quote it (samdoran/ansible-collection-macos
# #1, geerlingguy/ansible-role-homebrew #137).
CLT_STUB_MESSAGE = (
    "xcode-select: error: no developer tools were found, and no install could be requested "
    "(perhaps no UI is present), please install manually from 'developer.apple.com'."
)
PYTHON_ORG = "Library/Frameworks/Python.framework/Versions"
# What the site-packages of a Mac's /usr/bin/python3 (the Command Line Tools' Python 3.9) holds,
# as `/usr/bin/python3 -m pip list` on macOS prints it (public captures: altgraph, future,
# macholib, pip 21.2.4, setuptools 58.0.4, six, wheel): top-level names, each with its
# dist-info. The Macs get those of them the machine's base interpreter has, and none of its
# other packages (SimCluster.mac_site_packages).
CLT_SITE_PACKAGES = (
    "altgraph",
    "future",
    "macholib",
    "pip",
    "setuptools",
    "pkg_resources",
    "_distutils_hack",
    "distutils-precedence.pth",
    "six",
    "wheel",
)
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/var/log")


def _site_entry_of(entry: str) -> str:
    """The top-level name a site-packages entry belongs to: `six.py`, `six-1.17.0.dist-info`
    and `six` are all "six"; a .pth file is its own name."""
    if entry.endswith(".pth"):
        return entry
    name = entry.removesuffix(".py")
    for suffix in (".dist-info", ".egg-info"):
        if name.endswith(suffix):
            return name.removesuffix(suffix).split("-", 1)[0]
    return name


# The login shell of a Mac's user since macOS 10.15: sshd runs each command it is given (ssh's
# remote command, mlx.launch's script, a key's forced command) with `zsh -c`, and zsh is not sh
# (an unmatched glob is an error, an unquoted $var is not split, echo reads backslashes).
LOGIN_SHELL = "/bin/zsh"


class SimError(RuntimeError):
    """The simulated cluster cannot be built or used; the message says why."""


def _which(name, extra=("/usr/sbin", "/sbin", "/usr/bin", "/bin")):
    path = shutil.which(name) or shutil.which(name, path=":".join(extra))
    return path


def unavailable_reason() -> str | None:
    """One line saying why the simulation cannot run here, or None."""
    if os.geteuid() != 0:
        return "simulated Mac cluster needs root (network namespaces, mounts)"
    ip = _which("ip")
    if ip is None:
        return "simulated Mac cluster needs iproute2 (`ip`)"
    if _which("sshd") is None:
        return "simulated Mac cluster needs OpenSSH's sshd (apt-get install openssh-server)"
    if not os.access(LOGIN_SHELL, os.X_OK):
        return f"simulated Mac cluster needs zsh at {LOGIN_SHELL}, a Mac's login shell (apt-get install zsh)"
    try:
        overlay = "overlay" in Path("/proc/filesystems").read_text().split()
    except OSError:
        overlay = False
    if not overlay:
        return "simulated Mac cluster needs the kernel's overlayfs (each Mac's /usr/bin is laid over this machine's)"
    for tool in ("unshare", "nsenter", "ssh", "ssh-keygen"):
        if _which(tool) is None:
            return f"simulated Mac cluster needs `{tool}`"
    name = f"mlxsim-probe-{os.getpid()}"
    r = subprocess.run([ip, "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return f"`ip netns` is unavailable: {r.stderr.strip() or r.returncode}"
    subprocess.run([ip, "netns", "del", name], capture_output=True)
    if not os.path.isdir(MOUNTPOINT):
        return f"{MOUNTPOINT} (the Macs' home mount point) does not exist"
    return None


def prefix_for(state_dir) -> str:
    return NS_PREFIX + hashlib.sha1(str(Path(state_dir).resolve()).encode()).hexdigest()[:8]


def _cmdline(pid) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    words = []
    for arg in raw.split(b"\0"):
        words += arg.decode(errors="replace").split()
    return words


def mentions(pid, state) -> bool:
    """True when the process's command line names the state dir (or a path in it)."""
    s = str(state)
    return any(w == s or w.startswith(s + "/") for w in _cmdline(pid))


def _alive(pid) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _kill_verified(pid, state, sig=signal.SIGKILL) -> bool:
    if pid and _alive(pid) and mentions(pid, state):
        try:
            os.kill(pid, sig)
            return True
        except ProcessLookupError:
            return False
    return False


def _wait_gone(pids, timeout=10.0):
    deadline = time.monotonic() + timeout
    pending = [p for p in pids if p]
    while pending and time.monotonic() < deadline:
        pending = [p for p in pending if _alive(p)]
        if pending:
            time.sleep(0.02)
    return pending


def _ip():
    ip = _which("ip")
    if ip is None:
        raise SimError("`ip` (iproute2) is not installed")
    return ip


def _run(argv, check=True, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise SimError(f"{shlex.join(map(str, argv))} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def _batch(lines, netns=None):
    if not lines:
        return
    argv = [_ip()] + (["-n", netns] if netns else []) + ["-batch", "-"]
    r = subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True, text=True)
    if r.returncode != 0:
        raise SimError(f"ip {'-n ' + netns + ' ' if netns else ''}-batch failed: {r.stderr.strip()}")


def _tc_batch(lines, netns):
    if not lines:
        return
    tc = _which("tc")
    if tc is None:
        raise SimError("`tc` (iproute2) is not installed")
    r = subprocess.run([tc, "-n", netns, "-batch", "-"], input="\n".join(lines) + "\n", capture_output=True, text=True)
    if r.returncode != 0:
        raise SimError(f"tc -n {netns} -batch failed: {r.stderr.strip()}")


def list_namespaces() -> list[str]:
    r = _run([_ip(), "netns", "list"], check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def namespace_label(ns) -> str | None:
    """The state dir a harness namespace belongs to (the alias of its `lo`)."""
    r = _run([_ip(), "-n", ns, "-j", "link", "show", "lo"], check=False)
    try:
        return json.loads(r.stdout)[0].get("ifalias")
    except (ValueError, IndexError, KeyError):
        return None


def namespace_pids(ns) -> list[int]:
    r = _run([_ip(), "netns", "pids", ns], check=False)
    return [int(x) for x in r.stdout.split() if x.isdigit()]


def _teardown_namespaces(namespaces, state) -> list[int]:
    """End the harness processes inside `namespaces` (PID 1 of each Mac takes the rest
    with it), then delete the namespaces. Returns PIDs that would not go."""
    victims = []
    for ns in namespaces:
        for pid in namespace_pids(ns):
            if _kill_verified(pid, state):
                victims.append(pid)
    left = _wait_gone(victims)
    for ns in namespaces:
        # processes that entered without naming the state dir (sessions, ranks) are in
        # the Macs' PID namespaces and died with PID 1; anything else stays and is reported
        _run([_ip(), "netns", "del", ns], check=False)
    return left


def cleanup(dry_run=False, include_unlabeled=True) -> list[str]:
    """Remove every harness namespace (name starts with `mlxsim-`) whose state dir is gone,
    and end the harness processes in it. Returns the namespaces removed.

    A namespace is labelled with its state dir a few milliseconds after it is created;
    `include_unlabeled=False` leaves unlabelled ones alone (another harness may be in the
    middle of `up`)."""
    removed = []
    groups: dict[str, list[str]] = {}
    for ns in list_namespaces():
        if not ns.startswith(NS_PREFIX):
            continue
        label = namespace_label(ns)
        if label and Path(label).joinpath("harness.json").exists():
            continue  # a live (or at least still described) cluster: `down` it instead
        groups.setdefault(label or "", []).append(ns)
    for label, namespaces in groups.items():
        if not label:
            # created but never labelled (a crash within the first milliseconds of `up`):
            # only take those with nothing running inside
            if not include_unlabeled:
                continue
            namespaces = [ns for ns in namespaces if not namespace_pids(ns)]
        if dry_run:
            removed += namespaces
            continue
        if label:
            _teardown_namespaces(namespaces, label)
        else:
            for ns in namespaces:
                _run([_ip(), "netns", "del", ns], check=False)
        removed += namespaces
    return removed


def _snapshot_etc(dest):
    """Copy /etc into `dest` (made again): directories, regular files and symbolic links as they
    are; sockets, pipes and devices left out (none is read through /etc on a Mac)."""

    def not_plain(top, names):
        out = []
        for name in names:
            try:
                mode = os.lstat(os.path.join(top, name)).st_mode
            except FileNotFoundError:  # gone since it was listed
                mode = 0
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                out.append(name)
        return out

    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree("/etc", dest, symlinks=True, ignore=not_plain)


class SimCluster:
    """A simulated cluster of Macs described by a wiring spec, in a state directory."""

    def __init__(self, spec, state_dir=None, python=None, user="admin"):
        self.spec: ClusterSpec = spec if isinstance(spec, ClusterSpec) else load_spec(spec)
        state = Path(state_dir) if state_dir else DEFAULT_STATE_ROOT / self.spec.name
        self.state_dir = state.resolve()
        self.prefix = prefix_for(self.state_dir)
        self.python = python or sys.executable
        if user not in ("admin", "root"):
            raise SimError(f"user must be 'admin' or 'root', not {user!r}")
        self.user = user
        self._procs: dict[str, subprocess.Popen] = {}

    @classmethod
    def from_state(cls, state_dir, **kwargs) -> SimCluster:
        """The cluster a state dir was built for (its copy of the spec)."""
        spec = Path(state_dir) / "spec.yml"
        if not spec.exists():
            raise SimError(f"{state_dir} holds no spec.yml: name the spec too")
        return cls(load_spec(spec), state_dir, **kwargs)

    # ---- paths -------------------------------------------------------------------------
    @property
    def inventory_path(self) -> Path:
        return self.state_dir / "inventory.yml"

    @property
    def ssh_config_path(self) -> Path:
        return self.state_dir / "ssh_config"

    @property
    def known_hosts_path(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def key_path(self) -> Path:
        return self.state_dir / "ssh" / "id_ed25519"

    @property
    def harness_ssh_config_path(self) -> Path:
        return self.state_dir / "harness_ssh_config"

    @property
    def bin_dir(self) -> Path:
        return self.state_dir / "bin"

    @property
    def hosts(self) -> list[str]:
        return [h.name for h in self.spec.hosts]

    def host_dir(self, host) -> Path:
        self.spec.host(host)
        return self.state_dir / "hosts" / host

    def home(self, host) -> Path:
        """The Mac's home directory on the machine's disk (the Mac sees it as /srv/admin, or
        /srv/<home> when the spec gives the host another home)."""
        return self.host_dir(host) / "home" / self.spec.host(host).home

    def root_home(self, host) -> Path:
        return self.host_dir(host) / "home" / "root"

    def ns(self, host) -> str:
        self.spec.host(host)
        return f"{self.prefix}-{host}"

    @property
    def ctl_ns(self) -> str:
        return f"{self.prefix}-ctl"

    @property
    def wire_ns(self) -> str:
        return f"{self.prefix}-wire"

    @property
    def namespaces(self) -> list[str]:
        return [self.ctl_ns, self.wire_ns] + [self.ns(h) for h in self.hosts]

    def mgmt_address(self, host) -> str:
        return self.spec.mgmt_address(host)

    def session_home(self, host) -> str:
        """HOME of an SSH session on a Mac, as the Mac sees it (/srv/admin, /srv/<home>)."""
        return f"{MOUNTPOINT}/{self.spec.host(host).home}" if self.user == "admin" else ROOT_HOME

    def host_path_env(self, host) -> str:
        # the shims, then the system's directories: no Python of the controller's (a Mac's PATH
        # over ssh is /usr/bin:/bin:/usr/sbin:/sbin)
        return ":".join(
            [
                str(self.host_dir(host) / "bin"),
                "/usr/local/sbin",
                "/usr/local/bin",
                "/usr/sbin",
                "/usr/bin",
                "/sbin",
                "/bin",
            ]
        )

    def env(self, base=None) -> dict:
        """Environment for the toolkit's own runs (ansible-playbook): the controller as a user
        has it, nothing of the harness on PATH. The inventory says how to reach each Mac."""
        return dict(os.environ if base is None else base)

    def harness_env(self, base=None) -> dict:
        """Environment for the harness's own tools and for the tools the toolkit is compared
        with (mlx.distributed_config, mlx.launch by hand): PATH starts with bin_dir, whose
        ssh/scp/sftp use harness_ssh_config (the Macs by name, with user and key)."""
        env = dict(os.environ if base is None else base)
        env["PATH"] = f"{self.bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
        return env

    # ---- lifecycle ---------------------------------------------------------------------
    def _lock(self):
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state_dir / ".harness.lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def _check_paths(self):
        if any(ch.isspace() for ch in str(self.state_dir)):
            raise SimError(
                f"the state directory {str(self.state_dir)!r} contains whitespace; the harness "
                f"recognises its processes by the state dir on their command line"
            )
        for what, path in (
            ("the repository", REPO),
            ("the Python environment", Path(sys.prefix)),
            ("the state directory", self.state_dir),
        ):
            p = str(Path(path).resolve())
            if p == MOUNTPOINT or p.startswith(MOUNTPOINT + "/"):
                raise SimError(
                    f"{what} ({p}) lives under {MOUNTPOINT}, which every simulated Mac "
                    f"covers with its own home: move it elsewhere"
                )
        if not Path(MOUNTPOINT).is_dir():
            raise SimError(f"{MOUNTPOINT} must exist (an empty directory the Macs mount their homes on)")
        if not Path(LIBRARY).is_dir():
            # the mount point of every Mac's own /Library (its network preferences file): an
            # empty directory, made once on this machine and left for the next run
            try:
                os.mkdir(LIBRARY, 0o755)
            except OSError as exc:
                raise SimError(
                    f"{LIBRARY} must exist (an empty directory the Macs mount their /Library on): {exc.strerror}"
                ) from exc

    def _harness(self) -> dict:
        try:
            return json.loads((self.state_dir / "harness.json").read_text())
        except (OSError, ValueError):
            return {}

    def _save_harness(self, data):
        tmp = self.state_dir / "harness.json.tmp"
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, self.state_dir / "harness.json")

    def _teardown(self) -> list[int]:
        """End everything this state dir owns: recorded PIDs, then whatever of ours runs in
        our namespaces (relays in ctl, hosts' PID 1), then the namespaces."""
        recorded = self._harness().get("pids", {})
        victims = [pid for pid in recorded.values() if _kill_verified(pid, self.state_dir)]
        for proc in self._procs.values():
            if proc.poll() is None and _kill_verified(proc.pid, self.state_dir):
                victims.append(proc.pid)
        left = _wait_gone(victims)
        for proc in self._procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._procs.clear()
        ours = [ns for ns in list_namespaces() if ns.startswith(self.prefix + "-")]
        left += _teardown_namespaces(ours, self.state_dir)
        return left

    def up(self, extra_vars=None, timeout=60.0) -> SimCluster:
        """Build the cluster (cleaning leftovers of this state dir first). Idempotent
        in effect: a second `up` rebuilds fresh Macs."""
        reason = unavailable_reason()
        if reason:
            raise SimError(reason)
        self._check_paths()
        t0 = time.monotonic()
        fd = self._lock()
        try:
            self._teardown()
            self._prepare_files(extra_vars or {})
            self._save_harness(
                {
                    "state_dir": str(self.state_dir),
                    "prefix": self.prefix,
                    "spec": self.spec.name,
                    "namespaces": self.namespaces,
                    "pids": {},
                    "status": "starting",
                    "started": time.time(),
                }
            )
            self._build_network()
            self._start_hosts(timeout)
            h = self._harness()
            h["status"] = "up"
            h["up_seconds"] = round(time.monotonic() - t0, 3)
            self._save_harness(h)
        except BaseException:
            try:
                self._teardown()
            finally:
                os.close(fd)
            raise
        os.close(fd)
        self.up_seconds = time.monotonic() - t0
        return self

    def down(self) -> list[int]:
        """Tear everything down (processes, veths, namespaces); the state dir's files stay
        (logs, argv logs) and harness.json records the cluster as down."""
        fd = self._lock()
        try:
            left = self._teardown()
            h = self._harness()
            if h:
                h["status"] = "down"
                h["pids"] = {}
                self._save_harness(h)
        finally:
            os.close(fd)
        return left

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()

    # ---- building ----------------------------------------------------------------------
    def _prepare_files(self, extra_vars):
        st = self.state_dir
        hosts_dir = st / "hosts"
        if hosts_dir.exists():
            shutil.rmtree(hosts_dir)
        for sub in ("ssh", "bin"):
            (st / sub).mkdir(parents=True, exist_ok=True)
        keep = [[str(st), False], [str(Path(sys.prefix).resolve()), True], [str(REPO), True]]
        keep = [k for k in keep if any(k[0] == d or k[0].startswith(d + "/") for d in PRIVATE_DIRS)]
        cluster = self.spec.to_json()
        cluster.update(
            {
                "state_dir": str(st),
                "prefix": self.prefix,
                "mountpoint": MOUNTPOINT,
                "library": LIBRARY,
                "home": HOME,
                "root_home": ROOT_HOME,
                "keep_paths": keep,
                "shim": str(SHIMS / "macos.py"),
                "sshd": _which("sshd"),
                "python": self.python,
                "site_packages": self.mac_site_packages(st / "mac_site_packages"),
            }
        )
        (st / "cluster.json").write_text(json.dumps(cluster, indent=2) + "\n")
        # Every shim runs through this launcher, with the harness's Python named here: a Mac's
        # PATH holds no Python of the controller's, and its /usr/bin/python3 may be the stub.
        (st / "shim").write_text(
            f"#!{self.python} -S\n# simulated macOS commands (tests/simcluster/shims/shim)\n"
            f"import sys\nsys.path.insert(0, {str(SHIMS)!r})\nimport macos\nmacos.run()\n"
        )
        (st / "shim").chmod(0o755)
        # What hides this machine's pip configuration (its local wheel directories and indexes)
        # from the Macs: an empty file and an empty directory.
        (st / "empty.conf").write_text("")
        (st / "empty.d").mkdir(exist_ok=True)
        # The shims' bytecode, compiled here by the Macs' Python: inside a Mac the checkout
        # may be read-only, and without the cache every command would compile macos.py again.
        subprocess.run([self.python, "-m", "py_compile", str(SHIMS / "macos.py")], capture_output=True, check=False)
        source = Path(self.spec.source) if self.spec.source else None
        if source is not None and source.exists() and source.resolve() != (st / "spec.yml").resolve():
            shutil.copyfile(source, st / "spec.yml")  # `down`/`status` by state dir alone
        self._write_live({"hosts": {}, "cables": {c.id: {"plugged": True} for c in self.spec.cables}})

        # keys: one client key (controller and every Mac), one host key per Mac
        for p in (self.key_path, Path(f"{self.key_path}.pub")):
            if p.exists():
                p.unlink()
        jobs = [
            [
                _which("ssh-keygen"),
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                f"mlxsim@{self.spec.name}",
                "-f",
                str(self.key_path),
            ]
        ]
        for h in self.hosts:
            hd = self.host_dir(h)
            for sub in ("bin", f"home/{self.spec.host(h).home}/.ssh", "home/root", "tmp", "var_tmp", "var_log"):
                (hd / sub).mkdir(parents=True, exist_ok=True)
            jobs.append(
                [
                    _which("ssh-keygen"),
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    f"root@{h}",
                    "-f",
                    str(hd / "ssh_host_ed25519_key"),
                ]
            )
        procs = [subprocess.Popen(j, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for j in jobs]
        for p in procs:
            if p.wait() != 0:
                raise SimError(f"ssh-keygen failed: {p.stderr.read().decode().strip()}")

        # passwd seen by the Macs: `admin` is the Mac's administrator (uid 0 on this machine,
        # listed first so uid 0 is called admin, as the session user of a Mac would be);
        # root's home is the Mac's root home (what `sudo -H` uses)
        lines = [f"admin:x:0:0:Mac administrator (simulated):{HOME}:{LOGIN_SHELL}"]
        for line in Path("/etc/passwd").read_text().splitlines():
            f = line.split(":")
            if len(f) == 7 and f[0] == "admin":
                continue
            if len(f) == 7 and f[0] == "root":
                f[5] = ROOT_HOME
                f[6] = "/bin/sh"  # root's shell on a Mac
            lines.append(":".join(f))
        (st / "passwd").write_text("\n".join(lines) + "\n")
        os.chmod(st / "passwd", 0o644)
        # a Mac whose admin user has another home gets its own copy (hostinit binds it)
        for h in self.hosts:
            home = f"{MOUNTPOINT}/{self.spec.host(h).home}"
            if home != HOME:
                (self.host_dir(h) / "passwd").write_text("\n".join([lines[0].replace(HOME, home)] + lines[1:]) + "\n")
                os.chmod(self.host_dir(h) / "passwd", 0o644)
        # group seen by the Macs: gid 0 is macOS's `wheel` (there is no group `root` on a Mac:
        # `chgrp root` fails there, `chgrp wheel` works); the machine's other groups stay
        groups = []
        for line in Path("/etc/group").read_text().splitlines():
            f = line.split(":")
            if len(f) == 4 and f[0] == "wheel":
                continue
            if len(f) == 4 and f[2] == "0":
                f[0] = "wheel"
            groups.append(":".join(f))
        (st / "group").write_text("\n".join(groups) + "\n")
        os.chmod(st / "group", 0o644)
        # no DNS server on the cluster LAN: lookups fail at once (nothing on 127.0.0.1:53)
        (st / "resolv.conf").write_text(
            "# simulated Mac cluster: no DNS server on this LAN\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
        )
        # the Macs' /etc: a copy of this machine's, taken now (hostinit binds it as a directory,
        # then the files above over its entries): a file of this machine's /etc replaced while
        # the cluster is up (useradd renames a new /etc/passwd over the old one) leaves the Macs'
        # view as it was, where a file bound straight over /etc/passwd would be lost
        _snapshot_etc(st / "etc")

        # The controller's side, as a real user's machine has it after README step 1: the
        # Macs' host keys accepted under the addresses it reaches them by (`ssh admin@ADDR
        # true` once each), and a route to the management LAN (here: a ProxyCommand into the
        # controller namespace). Nothing else: no aliases for the inventory names (they do not
        # resolve), no user, no key, no batch mode. The inventory says the rest, as a user's
        # inventory does, and everything the toolkit runs over ssh must take it from there.
        known = []
        for h in self.hosts:
            key = (self.host_dir(h) / "ssh_host_ed25519_key.pub").read_text().split()
            known.append(f"{self.mgmt_address(h)} {key[0]} {key[1]}")
        self.known_hosts_path.write_text("\n".join(known) + "\n")

        ip = _ip()
        proxy = (
            " ".join(
                shlex.quote(str(x)) for x in (ip, "netns", "exec", self.ctl_ns, self.python, HERE / "relay.py", st)
            )
            + " %h %p"
        )
        lan = " ".join(self.mgmt_address(h) for h in self.hosts)
        if self.spec.cidr.prefixlen in (8, 16, 24):
            octets = str(self.spec.cidr.network_address).split(".")[: self.spec.cidr.prefixlen // 8]
            lan = ".".join(octets + ["*"])
        self.ssh_config_path.write_text(
            "\n".join(
                [
                    f"# Generated by tests/simcluster for spec {self.spec.name}; state {st}.",
                    "# What the network gives the controller: the Macs' LAN (through the relay) and the",
                    "# host keys its user accepted, by address. Names, user and key come from the inventory.",
                    "",
                    f"Host {lan}",
                    f"    ProxyCommand {proxy}",
                    f"    UserKnownHostsFile {shlex.quote(str(self.known_hosts_path))}",
                    "    GlobalKnownHostsFile /dev/null",
                    "    StrictHostKeyChecking yes",
                    "",
                ]
            )
        )

        # The harness's own way in (tests inspecting a Mac, the tools compared with, runs "by
        # hand"): the Macs by name, with user and key. Never given to the toolkit's runs.
        cfg = [
            f"# Generated by tests/simcluster for spec {self.spec.name}; state {st}.",
            "# The harness's view: reach a simulated Mac with  ssh -F THIS_FILE m1",
            "",
        ]
        for h in self.hosts:
            cfg += [f"Host {h}", f"    HostName {self.mgmt_address(h)}", ""]
        cfg += [
            f"Host {' '.join(self.hosts)} {lan}",
            f"    User {self.user}",
            f"    IdentityFile {shlex.quote(str(self.key_path))}",
            "    IdentitiesOnly yes",
            "    BatchMode yes",
            "    ConnectTimeout 15",
            # as in ssh_config: a Host line matches the name given, so `m1` needs them too
            f"    ProxyCommand {proxy}",
            f"    UserKnownHostsFile {shlex.quote(str(self.known_hosts_path))}",
            "    GlobalKnownHostsFile /dev/null",
            "    StrictHostKeyChecking yes",
            "",
        ]
        self.harness_ssh_config_path.write_text("\n".join(cfg))

        for tool in ("ssh", "scp", "sftp"):
            w = self.bin_dir / tool
            w.write_text(
                f"#!/bin/sh\n# simulated Mac cluster {self.spec.name}: {tool} with the harness's ssh_config\n"
                f'exec /usr/bin/{tool} -F {shlex.quote(str(self.harness_ssh_config_path))} "$@"\n'
            )
            w.chmod(0o755)

        # The inventory as a user writes one: each Mac by an inventory name that does not
        # resolve, reached at ansible_host, logged into as a user that is not the controller's,
        # with the key and the ssh options given here.
        inv_vars = {
            "ansible_user": self.user,
            "ansible_ssh_private_key_file": str(self.key_path),
            "ansible_ssh_common_args": f"-F {self.ssh_config_path}",
            # as inventory/mac_cluster's group_vars: the Command Line Tools' Python
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_pipelining": True,
        }
        inv_vars.update(extra_vars)
        inventory = {
            "mac_cluster": {"hosts": {h: {"ansible_host": self.mgmt_address(h)} for h in self.hosts}, "vars": inv_vars}
        }
        self.inventory_path.write_text(
            f"# Generated by tests/simcluster for spec {self.spec.name} (state {st}).\n"
            + yaml.safe_dump(inventory, sort_keys=False, default_flow_style=False)
        )

        # Each Mac: Remote Login with the controller's key in the login user's authorized_keys
        # (README step 1) and nothing else in ~/.ssh: no private key, no known_hosts, no config.
        # Its host keys are where macOS keeps them, /etc/ssh (its own view of that directory).
        for h in self.hosts:
            hd = self.host_dir(h)
            self._factory_ssh_dir(h)
            etc_ssh = hd / "etc_ssh"
            if etc_ssh.exists():
                shutil.rmtree(etc_ssh)
            etc_ssh.mkdir()
            for name in ("ssh_config", "ssh_config.d", "moduli"):
                src = Path("/etc/ssh") / name
                if src.is_dir():
                    shutil.copytree(src, etc_ssh / name)
                elif src.is_file():
                    shutil.copyfile(src, etc_ssh / name)
            for suffix in ("", ".pub"):
                shutil.copyfile(hd / f"ssh_host_ed25519_key{suffix}", etc_ssh / f"ssh_host_ed25519_key{suffix}")
            os.chmod(etc_ssh / "ssh_host_ed25519_key", 0o600)
            self._link_shims(h, self.spec.host(h).macos)
            path = self.host_path_env(h)
            sshd = [
                f"# sshd of simulated Mac {h} (spec {self.spec.name})",
                "ListenAddress 0.0.0.0:22",  # like Remote Login on a Mac: every interface
                f'HostKey "{hd / "ssh_host_ed25519_key"}"',
                f'PidFile "{hd / "sshd.pid"}"',
                "StrictModes no",
                "UsePAM no",
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "AllowAgentForwarding no",
                "AllowTcpForwarding no",
                "X11Forwarding no",
                "PermitUserEnvironment no",
                "PrintMotd no",
                "PrintLastLog no",
                "UseDNS no",
                "LogLevel VERBOSE",
                # macOS's /etc/ssh/sshd_config sets neither: OpenSSH's defaults, written out
                "MaxStartups 10:30:100",
                "MaxSessions 10",
                "AcceptEnv LANG LC_*",
                # the harness's: the Mac's Metal device as MLX reports it (metal/sitecustomize.py)
                f'SetEnv "PATH={path}" "HOME={self.session_home(h)}" "PYTHONPATH={METAL}"',
                "Subsystem sftp /usr/lib/openssh/sftp-server",
                "",
            ]
            (hd / "sshd_config").write_text("\n".join(sshd))

    def _factory_ssh_dir(self, host):
        """The login user's ~/.ssh as README step 1 leaves it: the controller's key in
        authorized_keys, nothing else (whatever a run put there is gone)."""
        ssh_dir = (self.home(host) if self.user == "admin" else self.root_home(host)) / ".ssh"
        if ssh_dir.exists():
            shutil.rmtree(ssh_dir)
        ssh_dir.mkdir(parents=True, mode=0o700)
        (ssh_dir / "authorized_keys").write_text(Path(f"{self.key_path}.pub").read_text())
        os.chmod(ssh_dir / "authorized_keys", 0o600)

    def _link_shims(self, host, macos):
        bindir = self.host_dir(host) / "bin"
        rdma_tools = tuple(int(x) for x in (str(macos).split(".") + ["0", "0"])[:2]) >= (26, 2)
        for cmd in SHIM_COMMANDS:
            link = bindir / cmd
            want = cmd not in RDMA_COMMANDS or rdma_tools
            if link.is_symlink() or link.exists():
                link.unlink()
            if want:
                link.symlink_to(self.state_dir / "shim")

    def _write_live(self, live):
        tmp = self.state_dir / "live.json.tmp"
        tmp.write_text(json.dumps(live, indent=2) + "\n")
        os.replace(tmp, self.state_dir / "live.json")

    def _live(self) -> dict:
        return json.loads((self.state_dir / "live.json").read_text())

    def _build_network(self):
        ip = _ip()
        st = str(self.state_dir)
        _batch([f"netns add {ns}" for ns in self.namespaces])
        # label every namespace with its state dir (cleanup finds orphans by it)
        jobs = [[ip, "-n", ns, "link", "set", "lo", "alias", st] for ns in self.namespaces]
        for ns in (self.ctl_ns, self.wire_ns):
            # the controller side routes nothing anywhere; with forwarding on and an
            # `unreachable` default route, traffic a Mac sends off the LAN fails at once
            # (ICMP unreachable) instead of vanishing into a black hole
            fwd = "echo 1 > /proc/sys/net/ipv4/ip_forward; " if ns == self.ctl_ns else ""
            jobs.append(
                [
                    ip,
                    "netns",
                    "exec",
                    ns,
                    "/bin/sh",
                    "-c",
                    fwd + "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; "
                    "echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6",
                ]
            )
        procs = [subprocess.Popen(j, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for j in jobs]
        for j, p in zip(jobs, procs):
            if p.wait() != 0:
                raise SimError(f"{shlex.join(j)}: {p.stderr.read().strip()}")
        links, ctl, wire = (
            [],
            [
                "link set lo up",
                "link add name mgmt0 type bridge stp_state 0",
                f"addr add {self.spec.gateway}/{self.spec.cidr.prefixlen} dev mgmt0",
                "link set mgmt0 up",
                "route add unreachable default",
            ],
            ["link set lo up"],
        )
        data = self.spec.to_json()
        for i, h in enumerate(self.hosts):
            hcfg = data["hosts"][h]
            links.append(
                f"link add name en0 address {hcfg['en0_mac']} netns {self.ns(h)} "
                f"type veth peer name h{i} netns {self.ctl_ns}"
            )
            ctl += [f"link set h{i} master mgmt0", f"link set h{i} up"]
        for c in self.spec.cables:
            for side, end in (("a", c.a), ("b", c.b)):
                mac = data["hosts"][end.host]["ports"][str(end.receptacle)]["mac"]
                links.append(
                    f"link add name {end.iface} address {mac} netns {self.ns(end.host)} "
                    f"type veth peer name c{c.index}{side} netns {self.wire_ns}"
                )
            wire += [
                f"link add name w{c.index} type bridge stp_state 0",
                f"link set c{c.index}a master w{c.index}",
                f"link set c{c.index}b master w{c.index}",
                f"link set w{c.index} up",
                f"link set c{c.index}a up",
                f"link set c{c.index}b up",
            ]
        # unconnected receptacles still have their interface (an empty port)
        for hi, h in enumerate(self.spec.hosts):
            cabled = self.spec.cables_of(h.name)
            for k in range(1, h.tb_ports + 1):
                iface = h.iface(k)
                if iface not in cabled:
                    mac = data["hosts"][h.name]["ports"][str(k)]["mac"]
                    links.append(
                        f"link add name {iface} address {mac} netns {self.ns(h.name)} "
                        f"type veth peer name x{hi}_{k} netns {self.wire_ns}"
                    )
        _batch(links)
        _batch(ctl, self.ctl_ns)
        _batch(wire, self.wire_ns)

    def _host_cmd(self, host):
        return [
            _ip(),
            "netns",
            "exec",
            self.ns(host),
            _which("unshare"),
            "--mount",
            "--uts",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--propagation",
            "private",
            "--",
            self.python,
            str(HERE / "hostinit.py"),
            str(self.state_dir),
            host,
        ]

    # ---- a package index on the LAN, as a lab's mirror -------------------------------------
    INDEX_PORT = 3141  # devpi's

    def wheelhouse(self, requirements) -> Path:
        """Wheels for `requirements` (pip requirement strings) and all they need, for the Macs'
        Python, downloaded once per machine (pip's registry) into ~/.cache/mlxsim/wheels/<key>."""
        key = hashlib.sha256("\n".join(sorted(requirements) + [self.python_minor()]).encode()).hexdigest()[:16]
        out = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlxsim" / "wheels" / key
        if (out / ".complete").exists():
            return out
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        r = subprocess.run(
            [self.python, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(tmp), *requirements],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if r.returncode != 0:
            raise SimError(f"pip download {' '.join(requirements)} failed: {r.stderr.strip()[-1500:]}")
        (tmp / ".complete").write_text("\n".join(requirements) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
        return out

    def serve_packages(self, requirements) -> str:
        """Serve the wheels of `requirements` as a package index (PEP 503's simple API, a page
        of links per project) on the controller's LAN address, as a lab's mirror would (the
        Macs reach nothing else); returns its URL for python_env_pip_index_url. Idempotent;
        the server ends with the cluster (its command line names the state dir)."""
        url = f"http://{self.spec.gateway}:{self.INDEX_PORT}/simple/"
        root = self.state_dir / "pypi"
        h = self._harness()
        pid = h.get("services", {}).get("index")
        if pid and _alive(pid) and mentions(pid, self.state_dir):
            return url
        house = self.wheelhouse(requirements)
        shutil.rmtree(root, ignore_errors=True)
        for whl in house.glob("*.whl"):
            project = re.sub(r"[-_.]+", "-", whl.name.split("-")[0]).lower()
            (root / "simple" / project).mkdir(parents=True, exist_ok=True)
            (root / "simple" / project / whl.name).symlink_to(whl)
        log = open(self.state_dir / "pypi.log", "ab")
        proc = subprocess.Popen(
            [
                _ip(),
                "netns",
                "exec",
                self.ctl_ns,
                self.python,
                "-m",
                "http.server",
                "--bind",
                str(self.spec.gateway),
                "--directory",
                str(root),
                str(self.INDEX_PORT),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            cwd="/",
        )
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = _run(
                [
                    _ip(),
                    "netns",
                    "exec",
                    self.ctl_ns,
                    self.python,
                    "-c",
                    "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 1)",
                    str(self.spec.gateway),
                    str(self.INDEX_PORT),
                ],
                check=False,
            )
            if r.returncode == 0:
                break
            if proc.poll() is not None:
                raise SimError(f"the package index did not start: {(self.state_dir / 'pypi.log').read_text()[-500:]}")
            time.sleep(0.2)
        h = self._harness()
        h.setdefault("services", {})["index"] = proc.pid
        self._save_harness(h)
        return url

    def base_python(self) -> Path:
        """The machine's own interpreter behind the harness's (a venv's base), which plays each
        Mac's Pythons: the Command Line Tools' /usr/bin/python3 and a Homebrew or python.org
        python3.N. It can make venvs and has none of the controller's packages in them."""
        return Path(getattr(sys, "_base_executable", None) or sys.executable)

    def mac_site_packages(self, into: Path) -> dict:
        """The site-packages a Mac's Python sees: `into`, filled with the packages a Mac's
        /usr/bin/python3 ships (CLT_SITE_PACKAGES) that the machine's base interpreter has,
        copied (with their bytecode); hostinit binds it over the base interpreter's own
        site-packages, and an empty directory over its other site directories. So a module of
        the toolkit that imports what a Mac's Python lacks (PyYAML, requests, packaging, ...)
        fails here as on a Mac, and no .pth file of this machine runs at each Python start.
        When the base has no setuptools (Python 3.12 and later ship none), the harness's own is
        copied: a Mac's /usr/bin/python3 has setuptools' pkg_resources.
        Returns {"replace": {site dir: directory bound over it}} for hostinit."""
        found = subprocess.run(
            [str(self.base_python()), "-S", "-c", "import json, site; print(json.dumps(site.getsitepackages()))"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        sites = [d for d in json.loads(found.stdout) if os.path.isdir(d)]
        harness = [d for d in sys.path if d.endswith("-packages") and os.path.isdir(d) and d not in sites]
        if into.exists():
            shutil.rmtree(into)
        into.mkdir(parents=True)
        for name in CLT_SITE_PACKAGES:
            for source in sites + (harness if name in ("setuptools", "pkg_resources", "_distutils_hack") else []):
                entries = [e for e in Path(source).iterdir() if _site_entry_of(e.name) == name]
                if not entries:
                    continue
                for e in entries:
                    (shutil.copytree if e.is_dir() else shutil.copy2)(e, into / e.name)
                break
        empty = self.state_dir / "empty.d"
        empty.mkdir(parents=True, exist_ok=True)
        return {"replace": {d: str(into if i == 0 else empty) for i, d in enumerate(sites)}}

    def _usr_bin_layer(self, host, script):
        """The layer hostinit lays over the machine's /usr/bin on `host` (read-only): python3 a
        copy of `script` (the Command Line Tools' Python or their stub), and a whiteout for each
        of the machine's /usr/bin/python3.N, which a Mac does not have (its /usr/bin holds
        python3 alone). So Ansible's interpreter discovery, for an inventory that sets no
        ansible_python_interpreter (`command -v python3.N` for each N, then /usr/bin/python3),
        takes /usr/bin/python3 there as on a Mac. An interpreter the simulation runs on (the
        shims', the Macs' Pythons' base) is left, should one of them be such a file."""
        layer = self.host_dir(host) / "usr_bin"
        shutil.rmtree(layer, ignore_errors=True)
        layer.mkdir()
        shutil.copyfile(script, layer / "python3")
        (layer / "python3").chmod(0o755)
        keep = {os.path.realpath(p) for p in (self.python, self.base_python())}
        for path in sorted(Path("/usr/bin").glob("python3.*")):
            if re.fullmatch(r"python3\.\d+", path.name) and os.path.realpath(path) not in keep:
                os.mknod(layer / path.name, stat.S_IFCHR | 0o600, os.makedev(0, 0))

    def python_minor(self) -> str:
        return "%d.%d" % sys.version_info[:2]

    def _lay_pythons(self, host):
        """A Mac's Pythons, from the spec and live overrides: /usr/bin/python3 (hostinit binds
        usr_bin_python3 over it: the Command Line Tools' Python, or their stub when they are
        missing), /opt/homebrew/bin/python3.N and python.org's framework python3.N (spec
        `pythons`), each with site-packages of its own (_own_site_packages). Applied at once:
        the links and the marker are read on every run."""
        hd = self.host_dir(host)
        live = self._live().get("hosts", {}).get(host, {})
        spec = self.spec.host(host)
        # installed by `softwareupdate --install` (shims/macos.py): for good, until reset()
        clt = live.get("command_line_tools", spec.command_line_tools) or (hd / "command_line_tools.installed").exists()
        pythons = live.get("pythons", spec.pythons)
        marker = hd / "no_command_line_tools"
        if clt:
            marker.unlink(missing_ok=True)
        else:
            marker.write_text("")
        script = hd / "usr_bin_python3"
        script.write_text(
            "#!/bin/sh\n# /usr/bin/python3 of simulated Mac %s: the Command Line Tools' Python, or their stub\n"
            'if [ -e %s ]; then\n    echo %s >&2\n    exit 1\nfi\nexec %s "$@"\n'
            % (host, shlex.quote(str(marker)), shlex.quote(CLT_STUB_MESSAGE), shlex.quote(str(self.base_python())))
        )
        script.chmod(0o755)
        minor = self.python_minor()
        places = {
            "homebrew": hd / "opt" / "homebrew" / "bin" / f"python{minor}",
            "python.org": hd / PYTHON_ORG / minor / "bin" / f"python{minor}",
        }
        (hd / "opt").mkdir(exist_ok=True)
        for source, link in places.items():
            if link.is_symlink() or link.exists():
                link.unlink()
            prefix = link.parent.parent
            shutil.rmtree(prefix / "lib", ignore_errors=True)
            (prefix / "pyvenv.cfg").unlink(missing_ok=True)
            if source in pythons:
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(self.base_python())
                self._own_site_packages(prefix, minor)

    def _own_site_packages(self, prefix, minor):
        """Homebrew's and python.org's python3.N have site-packages of their own, holding pip
        alone (neither ships setuptools since 3.12; Homebrew's are /opt/homebrew/lib/python3.N/
        site-packages, python.org's under the framework's version): a pyvenv.cfg in the prefix
        makes the link to the machine's interpreter take <prefix>/lib/python3.N/site-packages
        as its own, and that holds the Mac's pip (from mac_site_packages) and nothing else."""
        (prefix / "pyvenv.cfg").write_text(
            f"home = {self.base_python().parent}\ninclude-system-site-packages = false\nversion = {minor}\n"
        )
        site = prefix / "lib" / f"python{minor}" / "site-packages"
        site.mkdir(parents=True, exist_ok=True)
        for entry in (self.state_dir / "mac_site_packages").iterdir():
            if _site_entry_of(entry.name) == "pip":
                (site / entry.name).symlink_to(entry)

    def _spawn_host(self, host):
        hd = self.host_dir(host)
        self._lay_pythons(host)
        # at boot only: the script reads its marker on every run, and a layer is not changed
        # under a mounted overlay
        self._usr_bin_layer(host, hd / "usr_bin_python3")
        for f in ("init.status", "sshd.pid", "announcing", "registering"):
            (hd / f).unlink(missing_ok=True)
        log = open(hd / "init.log", "ab")
        proc = subprocess.Popen(
            self._host_cmd(host), stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, cwd="/"
        )
        log.close()
        self._procs[host] = proc
        h = self._harness()
        h.setdefault("pids", {})[host] = proc.pid
        self._save_harness(h)
        return proc

    def _wait_hosts(self, hosts, timeout):
        deadline = time.monotonic() + timeout
        pending = set(hosts)
        while pending:
            for h in sorted(pending):
                hd = self.host_dir(h)
                status = (hd / "init.status").read_text().strip() if (hd / "init.status").exists() else ""
                if status.startswith("error"):
                    raise SimError(
                        f"simulated Mac {h} failed to boot: {status}\n"
                        f"{self._tail(hd / 'init.log')}{self._tail(hd / 'sshd.log')}"
                    )
                if status == "booted" and (hd / "sshd.pid").exists():
                    pending.discard(h)
                    continue
                proc = self._procs.get(h)
                if proc is not None and proc.poll() is not None:
                    raise SimError(
                        f"simulated Mac {h} exited ({proc.returncode}) while booting\n"
                        f"{self._tail(hd / 'init.log')}{self._tail(hd / 'sshd.log')}"
                    )
            if pending and time.monotonic() > deadline:
                raise SimError(f"simulated Macs {sorted(pending)} did not start sshd within {timeout}s")
            if pending:
                time.sleep(0.01)

    @staticmethod
    def _tail(path, n=20):
        try:
            lines = Path(path).read_text(errors="replace").splitlines()[-n:]
        except OSError:
            return ""
        return f"--- {path}:\n" + "\n".join(lines) + "\n" if lines else ""

    def _start_hosts(self, timeout):
        for h in self.hosts:
            self._spawn_host(h)
        self._wait_hosts(self.hosts, timeout)

    # ---- per-host process control --------------------------------------------------------
    def _init_pid(self, host) -> int:
        """Global PID of the Mac's PID 1 (hostinit.py): the child of the recorded unshare."""
        parent = self._harness().get("pids", {}).get(host)
        if not parent or not _alive(parent):
            raise SimError(f"simulated Mac {host} is not running")
        try:
            kids = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            kids = []
        for k in kids:
            if mentions(int(k), self.state_dir):
                return int(k)
        raise SimError(f"simulated Mac {host}: PID 1 not found under {parent}")

    def _sshd_pid(self, host) -> int | None:
        init = self._init_pid(host)
        cfg = str(self.host_dir(host) / "sshd_config")
        try:
            kids = Path(f"/proc/{init}/task/{init}/children").read_text().split()
        except OSError:
            return None
        for k in map(int, kids):
            words = _cmdline(k)
            if words and "sshd" in words[0] + (words[1] if len(words) > 1 else "") and cfg in words and _alive(k):
                return k
        return None

    def exec(
        self, host, argv, input=None, timeout=60, env=None, cwd=None, check=False, sudo=False
    ) -> subprocess.CompletedProcess:
        """Run argv on the simulated Mac (inside all its namespaces), with the environment an
        SSH session there gets. `sudo=True` prefixes the simulated sudo."""
        init = self._init_pid(host)
        e = {
            "PATH": self.host_path_env(host),
            "HOME": self.session_home(host),
            "USER": self.user,
            "LOGNAME": self.user,
            "SHELL": LOGIN_SHELL,
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(METAL),
        }
        if env:
            e.update(env)
        argv = [str(a) for a in argv]
        if sudo:
            argv = ["sudo", *argv]
        cmd = [
            _which("nsenter"),
            "-t",
            str(init),
            "-m",
            "-u",
            "-n",
            "-p",
            f"--wdns={cwd or self.session_home(host)}",
            "--",
            *argv,
        ]
        r = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout, env=e)
        if check and r.returncode != 0:
            raise SimError(f"{host}: {shlex.join(argv)} exited {r.returncode}: {r.stderr.strip()}")
        return r

    def on_lan(self, argv) -> list[str]:
        """argv run in the controller's namespace (`<prefix>-ctl`, on the Macs' LAN: mgmt0), where
        a controller that browses the LAN with multicast DNS must run to hear the Macs."""
        return [_ip(), "netns", "exec", self.ctl_ns, *[str(a) for a in argv]]

    def ssh(self, host, command, timeout=60, **kw) -> subprocess.CompletedProcess:
        """Run a command over real SSH as the harness (harness_ssh_config: by name, user, key)."""
        argv = ["/usr/bin/ssh", "-F", str(self.harness_ssh_config_path), host]
        argv += [command] if isinstance(command, str) else list(command)
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=self.harness_env(), **kw)

    def stop_sshd(self, host, timeout=5.0):
        """Remote Login off: sshd ends, and the Mac's Bonjour announcement of ssh is withdrawn
        (announce.py follows sshd) before this returns."""
        pid = self._sshd_pid(host)
        if pid is None:
            return
        _kill_verified(pid, self.state_dir, signal.SIGTERM)
        if _wait_gone([pid], 5):
            _kill_verified(pid, self.state_dir, signal.SIGKILL)
            _wait_gone([pid], 5)
        (self.host_dir(host) / "sshd.pid").unlink(missing_ok=True)
        deadline = time.monotonic() + timeout
        hd = self.host_dir(host)
        while self.is_up(host) and ((hd / "announcing").exists() or (hd / "registering").exists()):
            if time.monotonic() > deadline:
                raise SimError(f"{host} still announces ssh over Bonjour {timeout}s after sshd stopped")
            time.sleep(0.02)

    def announcing(self, host) -> bool:
        """Whether the Mac announces ssh over Bonjour now (announce.py: while its sshd runs; a Mac
        that is off announces nothing)."""
        return (self.host_dir(host) / "announcing").exists() and self.is_up(host)

    def start_sshd(self, host, timeout=10):
        if self._sshd_pid(host) is not None:
            return
        hd = self.host_dir(host)
        (hd / "sshd.pid").unlink(missing_ok=True)
        init = self._init_pid(host)
        # without -D sshd forks into the background; the daemon is adopted by the Mac's PID 1
        _run(
            [
                _which("nsenter"),
                "-t",
                str(init),
                "-m",
                "-u",
                "-n",
                "-p",
                "--wdns=/",
                "--",
                _which("sshd"),
                "-f",
                str(hd / "sshd_config"),
                "-E",
                str(hd / "sshd.log"),
            ],
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "MLXSIM_HOST": host},
        )
        deadline = time.monotonic() + timeout
        while not (hd / "sshd.pid").exists():
            if time.monotonic() > deadline:
                raise SimError(f"sshd of {host} did not start\n{self._tail(hd / 'sshd.log')}")
            time.sleep(0.01)

    def _wait_host_gone(self, host, timeout=10.0):
        """Everything in the Mac's PID namespace dies with its PID 1; wait until it has (an
        old sshd still holding port 22 would keep the new one from starting)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not [p for p in namespace_pids(self.ns(host)) if mentions(p, self.state_dir)]:
                return
            time.sleep(0.01)
        raise SimError(f"processes of {host} did not end within {timeout}s")

    def _port_wires(self, host, live=None):
        """[(wire-side veth, plugged)] of the cables at `host` now (moved ends followed)."""
        live = live or self._live()
        out = []
        for c in self.spec.cables:
            ends = self._ends(live, c)
            if any(ends[s]["host"] == host for s in "ab"):
                plugged = bool(live.get("cables", {}).get(c.id, {}).get("plugged", True))
                out += [(self._wire_end(ends[s]["host"], ends[s]["iface"]), plugged) for s in "ab"]
        return out

    def power_off(self, host):
        """Cut the Mac's power: its cables and its LAN port go dark first (its peers lose
        carrier; open TCP connections to it get no FIN and just go silent, as with a real
        power cut), then every process of the Mac ends. `reboot(host)` powers it on."""
        fd = self._lock()
        try:
            i = self.hosts.index(host)
            _batch([f"link set h{i} down"], self.ctl_ns)
            _batch([f"link set {w} down" for w, _ in self._port_wires(host)], self.wire_ns)
            parent = self._harness().get("pids", {}).get(host)
            if parent:
                _kill_verified(parent, self.state_dir)
                _wait_gone([parent])
            proc = self._procs.pop(host, None)
            if proc is not None:
                proc.wait(timeout=5)
            self._wait_host_gone(host)
        finally:
            os.close(fd)

    @contextmanager
    def die_on(self, host, argv, nth=1, mode="sshd"):
        """Within the block, the `nth` run on `host` of the command `argv` (its name, then
        words its argv must hold) kills sshd with every process it started (mode "sshd"),
        or cuts the Mac's power (mode "power", done by a watcher thread here when the shim
        asks for it). Yields a dict that gets "fired" (monotonic time) when it happened.
        The rule fires once; the repair (start_sshd / reboot) is the caller's."""
        request = self.host_dir(host) / "die_request"
        request.unlink(missing_ok=True)
        count = self.host_dir(host) / "die_on.count"
        count.unlink(missing_ok=True)
        event = {"fired": None}
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                if mode == "power" and request.exists():
                    event["fired"] = time.monotonic()
                    request.unlink(missing_ok=True)
                    self.power_off(host)
                    return
                if mode != "power" and count.exists() and count.read_text().strip() == str(nth):
                    event["fired"] = time.monotonic()
                    return
                stop.wait(0.02)

        self.set_host(host, die_on={"argv": list(argv), "nth": nth, "mode": mode})
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            yield event
        finally:
            stop.set()
            watcher.join(timeout=30)
            self.set_host(host, die_on=None)
            request.unlink(missing_ok=True)

    def reboot(self, host, timeout=30):
        """Restart one Mac: every process ends, /tmp and /run are emptied, runtime network
        state (addresses, host routes, bridge membership) is dropped, bridge0 is rebuilt from
        its definition in the persistent preferences as configd does (up, with every listed
        member, whether or not its service is enabled: shims/macos.py boot) and the enabled
        services are applied again. A Mac whose
        power was cut gets its cables and LAN port back (plugged cables only)."""
        fd = self._lock()
        try:
            i = self.hosts.index(host)
            _batch([f"link set h{i} up"], self.ctl_ns)
            wires = [w for w, plugged in self._port_wires(host) if plugged]
            if wires:
                _batch([f"link set {w} up" for w in wires], self.wire_ns)
            parent = self._harness().get("pids", {}).get(host)
            if parent:
                _kill_verified(parent, self.state_dir)
                left = _wait_gone([parent])
                if left:
                    raise SimError(f"{host} did not stop (pid {parent})")
            proc = self._procs.pop(host, None)
            if proc is not None:
                proc.wait(timeout=5)
            self._wait_host_gone(host)
            hd = self.host_dir(host)
            (hd / "runtime.json").unlink(missing_ok=True)
            tmp = hd / "tmp"
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir()
            self._spawn_host(host)
            self._wait_hosts([host], timeout)
        finally:
            os.close(fd)

    def reset(self, timeout=60):
        """Back to freshly booted Macs without rebuilding the network: every cable plugged,
        live overrides dropped, persistent network preferences, power settings,
        SoftwareUpdate preferences and LaunchDaemons back to the factory state (the spec's),
        runtime state and /tmp emptied, no packet filter or shaping left (tc), ~/.ssh as set up
        for the controller alone, every Mac restarted; the controller's artifacts of earlier
        runs (the inventory's `artifacts/`: plan, preflight, report, results) removed, so no
        test reads another's. The rest of the homes (and argv logs) stay."""
        fd = self._lock()
        try:
            shutil.rmtree(self.inventory_path.parent / "artifacts", ignore_errors=True)
            parents = [p for p in self._harness().get("pids", {}).values() if _kill_verified(p, self.state_dir)]
            if _wait_gone(parents):
                raise SimError(f"{self.spec.name}: Macs did not stop for the reset")
            for proc in self._procs.values():
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            self._procs.clear()
            for h in self.hosts:
                self._wait_host_gone(h)
            for h in self.hosts:  # block_ports()' filter and any shaping a test left (tc tbf)
                self._clear_root_qdiscs(h)
            self._write_live({"hosts": {}, "cables": {c.id: {"plugged": True} for c in self.spec.cables}})
            # the wiring of the spec again (moved cables back), every cable up, empty ports dark
            wire = []
            for c in self.spec.cables:
                wire += [f"link set c{c.index}{s} master w{c.index}" for s in "ab"]
                wire += [f"link set c{c.index}{s} up" for s in "ab"]
            for h in self.spec.hosts:
                cabled = self.spec.cables_of(h.name)
                wire += [
                    f"link set {self._wire_end(h.name, h.iface(k))} nomaster"
                    for k in range(1, h.tb_ports + 1)
                    if h.iface(k) not in cabled
                ]
                wire += [
                    f"link set {self._wire_end(h.name, h.iface(k))} down"
                    for k in range(1, h.tb_ports + 1)
                    if h.iface(k) not in cabled
                ]
            _batch(wire, self.wire_ns)
            _batch([f"link set h{i} up" for i in range(len(self.hosts))], self.ctl_ns)  # power cuts
            for h in self.hosts:
                hd = self.host_dir(h)
                (hd / "die_on.count").unlink(missing_ok=True)
                # persistent settings back to the spec's: network, power (pmset), SoftwareUpdate
                for f in (
                    "netprefs.json",
                    "runtime.json",
                    "pmset.json",
                    "software_update.json",
                    "firewall.json",
                    "kernel.json",
                    "launchd.json",
                    "command_line_tools.installed",
                ):
                    (hd / f).unlink(missing_ok=True)
                shutil.rmtree(hd / "Library", ignore_errors=True)  # boot writes the preferences again
                if (hd / "tmp").exists():
                    shutil.rmtree(hd / "tmp")
                (hd / "tmp").mkdir()
                self._factory_ssh_dir(h)
                self._link_shims(h, self.spec.host(h).macos)
                self._spawn_host(h)
            self._wait_hosts(self.hosts, timeout)
        finally:
            os.close(fd)

    # ---- faults and live changes ---------------------------------------------------------
    def unplug(self, cable):
        self._set_plugged(cable, False)

    def plug(self, cable):
        self._set_plugged(cable, True)

    def _set_plugged(self, ref, plugged):
        try:
            c = self.spec.cable(ref)
        except SpecError as exc:
            raise SimError(str(exc)) from None
        state = "up" if plugged else "down"
        live = self._live()
        ends = self._ends(live, c)
        _batch([f"link set {self._wire_end(ends[s]['host'], ends[s]['iface'])} {state}" for s in "ab"], self.wire_ns)
        live.setdefault("cables", {}).setdefault(c.id, {})["plugged"] = plugged
        self._write_live(live)

    def _wire_end(self, host, iface) -> str:
        """The wire-side name of the veth behind host:iface (fixed by the spec)."""
        h = self.spec.host(host)
        for c in self.spec.cables:
            for side, end in (("a", c.a), ("b", c.b)):
                if (end.host, end.iface) == (host, iface):
                    return f"c{c.index}{side}"
        for k in range(1, h.tb_ports + 1):
            if h.iface(k) == iface:
                return f"x{[x.name for x in self.spec.hosts].index(host)}_{k}"
        raise SimError(f"{host} has no Thunderbolt port {iface} (it has en2..en{h.tb_ports + 1})")

    def _ends(self, live, c) -> dict:
        cur = live.get("cables", {}).get(c.id, {})
        return {
            s: cur.get(s) or {"host": e.host, "receptacle": e.receptacle, "iface": e.iface}
            for s, e in (("a", c.a), ("b", c.b))
        }

    def move(self, frm, to):
        """Move one end of a cable: `frm` is where that end is plugged now (`m1:en2`), `to` an
        empty Thunderbolt port of the same or another Mac (`m1:en5`, `m3:en5`). The old port
        goes dark, the new one carries the cable (real carrier; system_profiler sees the new
        peers on both sides). `reset()` puts every cable back where the spec has it."""
        fd = self._lock()
        try:
            live = self._live()
            fh, _, fi = str(frm).partition(":")
            th, _, ti = str(to).partition(":")
            thost = self.spec.host(th)
            trec = next((k for k in range(1, thost.tb_ports + 1) if thost.iface(k) == ti), None)
            if trec is None:
                raise SimError(f"move: {th} has no Thunderbolt port {ti!r}")
            found = None
            for c in self.spec.cables:
                ends = self._ends(live, c)
                for s in "ab":
                    if (ends[s]["host"], ends[s]["iface"]) == (fh, fi):
                        found = (c, s, ends)
                    if (ends[s]["host"], ends[s]["iface"]) == (th, ti):
                        raise SimError(f"move: {to} is not empty (cable {c.id})")
            if found is None:
                raise SimError(f"move: no cable is plugged into {frm}")
            c, side, ends = found
            old_wire = self._wire_end(fh, fi)
            new_wire = self._wire_end(th, ti)
            _batch(
                [
                    f"link set {old_wire} nomaster",
                    f"link set {old_wire} down",
                    f"link set {new_wire} master w{c.index}",
                    f"link set {new_wire} up",
                ],
                self.wire_ns,
            )
            ends[side] = {"host": th, "receptacle": trec, "iface": ti}
            live.setdefault("cables", {}).setdefault(c.id, {"plugged": True}).update(ends)
            self._write_live(live)
        finally:
            os.close(fd)

    def is_up(self, host) -> bool:
        """True while the Mac runs (its PID 1 is alive); a Mac killed by `die_on` is down
        until `reboot(host)` starts it again."""
        try:
            self._init_pid(host)
        except SimError:
            return False
        return True

    def set_host(self, host, **overrides):
        """Change what a Mac reports, live (rdma, macos, build, tb_version, model, model_id,
        chip, memory_gb, ncpu, wired_limit_mb (iogpu.wired_limit_mb now and at boot), require_sudo,
        sudo_password (the login user's sudo asks for this password: no NOPASSWD; see shims/macos.py
        _sudo_authenticate), sudo_commands: [path] (the login user may run only these commands
        with sudo, without a password; any other asks for the password, then is refused: see
        shims/macos.py _sudo_not_allowed), rdma_port_down: [iface], die_on: {"argv": [cmd,
        word...], "nth": n} (the Mac dies when the product runs that command; see
        shims/macos.py maybe_die), hang: [command or "command word..."] (those runs never
        answer: they sleep until SIGKILL), slow: {command or "command word...": seconds}
        (those runs answer that much later; see shims/macos.py maybe_stall), firewall:
        {enabled, block_all, stealth, allow_signed, allow_signed_downloaded, apps: {path:
        "blocked"|"permitted"}} (what socketfilterfw answers; the traffic is block_ports()'s)). macOS before
        26.2 has no rdma_ctl/ibv_* at all. command_line_tools (false: /usr/bin/python3 is their stub,
        until `softwareupdate --install` of their label) and pythons (["homebrew", "python.org"]:
        which python3.N the Mac has besides /usr/bin/python3) apply at once.
        local_network_denied_to_daemons (true: macOS Local Network privacy refuses the programs
        the Mac's launchd starts: their Python's connects to non-loopback addresses fail with
        EHOSTUNREACH, from their next start on; see local_network/sitecustomize.py). reset() drops
        every override."""
        self.spec.host(host)
        bad = set(overrides) - LIVE_KEYS
        if bad:
            raise SimError(f"set_host: unknown keys {sorted(bad)} (known: {sorted(LIVE_KEYS)})")
        if not isinstance(overrides.get("hang", []), (list, tuple)):
            raise SimError('set_host: hang is a list of commands ("ibv_devinfo", "networksetup -getinfo")')
        if not isinstance(overrides.get("slow", {}), dict):
            raise SimError('set_host: slow maps commands to seconds ({"system_profiler": 5})')
        live = self._live()
        cur = live.setdefault("hosts", {}).setdefault(host, {})
        cur.update(overrides)
        self._write_live(live)
        if "wired_limit_mb" in overrides:
            # the value the kernel holds now: what `sysctl iogpu.wired_limit_mb=N` wrote goes
            (self.host_dir(host) / "kernel.json").unlink(missing_ok=True)
        macos = cur.get("macos", self.spec.host(host).macos)
        self._link_shims(host, macos)
        if {"command_line_tools", "pythons"} & set(overrides):
            self._lay_pythons(host)

    # ---- a packet filter on one Mac ----------------------------------------------------------
    # This kernel has tc's u32 classifier, htb and fifo qdiscs but no drop action (act_gact) and
    # no nftables/iptables in use here: the filter sends what the Mac would answer from a blocked
    # port (its SYN-ACK, or its RST) into a fifo of length 0 on every interface of its namespace.
    # The connecting Mac then hears nothing until its connect times out, as from a Mac whose
    # application firewall in stealth mode drops the connection attempt.
    def _filtered_ifaces(self, host):
        return sorted(i for i in self.links(host) if i != "lo")

    def block_ports(self, host, ports):
        """Drop, silently, incoming TCP connections to `ports` (a list of port numbers) on
        `host`, or with "all" to every port but ssh's (22), on every interface of the Mac.
        Replaces an earlier block of the same Mac; kept across reboot(), undone by
        unblock_ports() and reset()."""
        self.spec.host(host)
        if ports != "all" and (
            not isinstance(ports, (list, tuple))
            or not ports
            or not all(isinstance(p, int) and 0 < p < 65536 for p in ports)
        ):
            raise SimError('block_ports: a list of TCP ports, or "all" (every port but 22)')
        self.unblock_ports(host)
        other = {d: q for d, q in self._root_qdiscs(host).items() if d in self._filtered_ifaces(host)}
        if other:
            raise SimError(f"block_ports: {host} has a root qdisc already (a shaping left on?): {other}")
        lines = []
        for dev in self._filtered_ifaces(host):
            lines += [
                f"qdisc add dev {dev} root handle 1: htb default 10 r2q 100000",
                f"class add dev {dev} parent 1: classid 1:10 htb rate 100gbit",
                f"class add dev {dev} parent 1: classid 1:20 htb rate 1mbit",
                f"qdisc add dev {dev} parent 1:20 handle 20: pfifo limit 0",
            ]
            if ports == "all":
                # ssh's answers pass; every other SYN-ACK (IP header 20 bytes, TCP flags at 33) goes
                lines += [
                    f"filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip protocol 6 0xff "
                    f"match ip sport 22 0xffff flowid 1:10",
                    f"filter add dev {dev} parent 1: protocol ip prio 2 u32 match ip protocol 6 0xff "
                    f"match u8 0x12 0x12 at 33 flowid 1:20",
                ]
            else:
                lines += [
                    f"filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip protocol 6 0xff "
                    f"match ip sport {p} 0xffff flowid 1:20"
                    for p in ports
                ]
        _tc_batch(lines, self.ns(host))
        live = self._live()
        live.setdefault("hosts", {}).setdefault(host, {})["blocked_ports"] = ports if ports == "all" else list(ports)
        self._write_live(live)

    def _root_qdiscs(self, host) -> dict:
        """{interface: `tc qdisc show` line} of the root qdiscs added in `host`'s namespace (a
        kernel default, handle 0:, is not listed)."""
        r = _run([_which("tc"), "-n", self.ns(host), "qdisc", "show"])
        found = {}
        for line in r.stdout.splitlines():
            m = re.match(r"qdisc (\S+) (\S+) dev (\S+) root\b", line)
            if m and m.group(2) != "0:":
                found[m.group(3)] = line.strip()
        return found

    def _clear_root_qdiscs(self, host):
        """Remove every root qdisc added on `host`'s interfaces: no packet filter, no shaping."""
        _tc_batch([f"qdisc del dev {dev} root" for dev in sorted(self._root_qdiscs(host))], self.ns(host))

    def unblock_ports(self, host):
        """Remove the packet filter of block_ports() from `host`."""
        ns = self.ns(host)
        tc = _which("tc")
        for dev in self._filtered_ifaces(host):
            r = _run([tc, "-n", ns, "qdisc", "show", "dev", dev], check=False)
            if "htb 1: root" in r.stdout:
                _run([tc, "-n", ns, "qdisc", "del", "dev", dev, "root"])
        live = self._live()
        live.get("hosts", {}).get(host, {}).pop("blocked_ports", None)
        self._write_live(live)

    # ---- inspection -----------------------------------------------------------------------
    def argv_records(self, host) -> list[dict]:
        path = self.host_dir(host) / "argv.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def argv_log(self, host) -> list[list[str]]:
        return [r["argv"] for r in self.argv_records(host)]

    def clear_argv_logs(self):
        for h in self.hosts:
            p = self.host_dir(h) / "argv.log"
            if p.exists():
                p.write_text("")

    def sshd_log(self, host) -> str:
        p = self.host_dir(host) / "sshd.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def netprefs(self, host) -> dict:
        return json.loads((self.host_dir(host) / "netprefs.json").read_text())

    def links(self, host) -> dict:
        """The Mac's interfaces as `ip -j -d addr` sees them (name -> json)."""
        r = _run([_ip(), "-n", self.ns(host), "-j", "-d", "addr", "show"])
        return {d["ifname"]: d for d in json.loads(r.stdout or "[]")}

    def status(self) -> dict:
        h = self._harness()
        pids = h.get("pids", {})
        existing = set(list_namespaces())
        hosts = {}
        for name in self.hosts:
            pid = pids.get(name)
            alive = bool(pid and _alive(pid) and mentions(pid, self.state_dir))
            entry = {
                "namespace": self.ns(name),
                "namespace_exists": self.ns(name) in existing,
                "pid": pid,
                "alive": alive,
                "mgmt_address": self.mgmt_address(name),
                "sshd_pid": None,
                "sshd_alive": False,
                "announcing": False,
                "interfaces": {},
            }
            if alive:
                try:
                    sp = self._sshd_pid(name)
                    entry["sshd_pid"], entry["sshd_alive"] = sp, sp is not None
                    entry["announcing"] = (self.host_dir(name) / "announcing").exists()
                except SimError:
                    pass
            if entry["namespace_exists"]:
                for ifname, d in self.links(name).items():
                    entry["interfaces"][ifname] = {
                        "up": "UP" in d.get("flags", []),
                        "carrier": "LOWER_UP" in d.get("flags", []),
                        "master": d.get("master"),
                        "ipv4": [
                            f"{a['local']}/{a['prefixlen']}"
                            for a in d.get("addr_info", [])
                            if a.get("family") == "inet"
                        ],
                    }
            hosts[name] = entry
        live = {}
        try:
            live = self._live().get("cables", {})
        except (OSError, ValueError):
            pass
        cables = {}
        for c in self.spec.cables:
            ends = {}
            for side, e in (("a", c.a), ("b", c.b)):
                i = hosts[e.host]["interfaces"].get(e.iface, {})
                ends[side] = {"host": e.host, "iface": e.iface, "carrier": i.get("carrier"), "ipv4": i.get("ipv4", [])}
            cables[c.id] = {
                "plugged": live.get(c.id, {}).get("plugged", True),
                **ends,
                "speed": c.speed,
                "dock": c.dock.name if c.dock else None,
            }
        return {
            "name": self.spec.name,
            "state_dir": str(self.state_dir),
            "prefix": self.prefix,
            "status": h.get("status", "absent"),
            "inventory": str(self.inventory_path),
            "ssh_config": str(self.ssh_config_path),
            "hosts": hosts,
            "cables": cables,
        }
