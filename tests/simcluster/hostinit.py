"""PID 1 of one simulated Mac.

The harness starts it as

    ip netns exec <prefix>-<host> unshare --mount --uts --pid --fork --kill-child \
        --mount-proc --propagation private -- <python> hostinit.py <state> <host>

so it runs in the host's network namespace with its own mount, UTS and PID namespaces.
It gives the Mac its private view of the machine, boots its network from the persistent
preferences (shims/macos.py boot), runs sshd and its Bonjour announcement (announce.py), and
reaps orphans until it is killed; when it dies every process of the Mac dies with it (PID
namespace), and the `unshare` parent the harness recorded kills it when killed (--kill-child).

Private view (all mounts live only in this host's mount namespace):
- /srv      <- <state>/hosts/<host>/home   (HOME=/srv/admin, sudo -H HOME=/srv/root)
- /Library  <- <state>/hosts/<host>/Library (Preferences/SystemConfiguration/preferences.plist:
  the network preferences the networksetup shim keeps, in macOS's format; LaunchDaemons/,
  which launchd loads at boot: shims/macos.py launchd_boot)
- /tmp, /var/tmp, /var/log <- per-host directories in the state dir; the paths under them
  the Mac must still see (the state dir, the Python environment, the repository) are
  bound back at the same place, the Python environment read-only
- /run, /dev/shm <- tmpfs (sshd's privilege separation directory is /run/sshd)
- /etc <- <state>/etc, a copy of this machine's taken when the cluster is made (a file of
  the machine's /etc replaced later, as useradd replaces /etc/passwd, does not reach the Macs)
- /etc/group <- a copy where gid 0 is `wheel` (macOS's name for it; no group `root`)
- /etc/passwd <- a copy with the Mac's `admin` user (uid 0, home /srv/admin) first and
  root's home at /srv/root, so sshd starts sessions in the Mac's home and ~ means the same
  to the shell, ssh and Python
- /etc/resolv.conf <- no DNS server (lookups fail at once instead of timing out)
- /opt <- <state>/hosts/<host>/opt (Homebrew's /opt/homebrew/bin/python3.N when the spec says)
- /usr/bin <- the machine's, read-only, under <state>/hosts/<host>/usr_bin: python3 the Command
  Line Tools' Python, or their stub (a copy of usr_bin_python3), and no python3.N; the base
  interpreter's site-packages <- <state>/mac_site_packages (what the Command Line Tools' Python
  ships: pip, setuptools, six, ...); /etc/pip.conf and /etc/xdg/pip <- empty (none of this
  machine's pip settings)
- /etc/ssh <- <state>/hosts/<host>/etc_ssh (read-only): the machine's client configuration
  and this Mac's own host keys, where macOS keeps them (ssh_host_ed25519_key[.pub])
Nothing here writes outside the state directory.
"""

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def mount(source, target, fstype=None, flags=0, data=None):
    rc = _libc.mount(
        source.encode() if source else None,
        target.encode(),
        fstype.encode() if fstype else None,
        flags,
        data.encode() if data else None,
    )
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {source} on {target}: {os.strerror(e)}")


def bind(source, target, readonly=False):
    mount(source, target, None, MS_BIND | MS_REC)
    if readonly:
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)


def umount(target):
    _libc.umount2(target.encode(), MNT_DETACH)


def under(path, top):
    return path == top or path.startswith(top.rstrip("/") + "/")


def private_dir(top, replacement, keep):
    """Mount `replacement` over `top`, keeping the paths in `keep` that live under it."""
    kept = [(p, ro) for p, ro in keep if under(p, top) and os.path.exists(p)]
    parked = []
    for n, (p, ro) in enumerate(kept):
        spot = f"/run/.mlxsim-keep/{n}"
        os.makedirs(spot, exist_ok=True)
        bind(p, spot)
        parked.append((p, ro, spot))
    os.makedirs(replacement, exist_ok=True)
    bind(replacement, top)
    for p, ro, spot in parked:
        os.makedirs(p, exist_ok=True)
        bind(spot, p, readonly=ro)
        umount(spot)


def setup(state, host, cfg):
    hostdir = os.path.join(state, "hosts", host)
    mount("tmpfs", "/run", "tmpfs", 0, "mode=0755")
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    mount("tmpfs", "/dev/shm", "tmpfs", 0, "mode=1777")
    keep = [(p, ro) for p, ro in cfg["keep_paths"]]
    private_dir("/tmp", os.path.join(hostdir, "tmp"), keep)
    private_dir("/var/tmp", os.path.join(hostdir, "var_tmp"), keep)
    private_dir("/var/log", os.path.join(hostdir, "var_log"), keep)
    bind(os.path.join(hostdir, "home"), cfg["mountpoint"])
    library = cfg.get("library")
    if library and os.path.isdir(library):
        os.makedirs(os.path.join(hostdir, "Library", "Preferences", "SystemConfiguration"), exist_ok=True)
        os.makedirs(os.path.join(hostdir, "Library", "LaunchDaemons"), mode=0o755, exist_ok=True)
        bind(os.path.join(hostdir, "Library"), library)
    # A Mac's Pythons, none of this machine's: /opt is the Mac's own (Homebrew's prefix,
    # /opt/homebrew, when the spec gives it one), /usr/bin/python3 the Command Line Tools' or
    # their stub (the harness's usr_bin_python3), and pip's machine-wide configuration (this
    # machine's local wheel directories and indexes) is not there.
    if os.path.isdir("/opt") and os.path.isdir(os.path.join(hostdir, "opt")):
        bind(os.path.join(hostdir, "opt"), "/opt")
    # /usr/bin as a Mac's (SimCluster._usr_bin_layer): this machine's, read-only, under a layer
    # holding python3 (the Command Line Tools' Python or their stub, a file where this machine
    # may have a link) and a whiteout for each of this machine's python3.N.
    layer = os.path.join(hostdir, "usr_bin")
    if os.path.isdir(layer):
        mount("overlay", "/usr/bin", "overlay", MS_RDONLY, f"lowerdir={layer}:/usr/bin")
    # ... and their site-packages only what a Mac's /usr/bin/python3 ships (SimCluster
    # mac_site_packages): none of this machine's packages nor its .pth files
    for site_dir, replacement in cfg.get("site_packages", {}).get("replace", {}).items():
        if os.path.isdir(site_dir) and os.path.isdir(replacement):
            bind(replacement, site_dir, readonly=True)
    # /etc: the cluster's copy of this machine's (SimCluster._snapshot_etc), so the files bound
    # below sit on the copy's entries, which nothing renames over while the cluster is up
    if os.path.isdir(os.path.join(state, "etc")):
        bind(os.path.join(state, "etc"), "/etc")
    if os.path.isfile("/etc/pip.conf"):
        bind(os.path.join(state, "empty.conf"), "/etc/pip.conf", readonly=True)
    if os.path.isdir("/etc/xdg/pip"):
        bind(os.path.join(state, "empty.d"), "/etc/xdg/pip", readonly=True)
    own = os.path.join(hostdir, "passwd")  # this Mac's admin user has another home
    bind(own if os.path.exists(own) else os.path.join(state, "passwd"), "/etc/passwd", readonly=True)
    if os.path.exists(os.path.join(state, "group")):
        bind(os.path.join(state, "group"), "/etc/group", readonly=True)  # gid 0 is `wheel`, as on a Mac
    etc_ssh = os.path.join(hostdir, "etc_ssh")
    if os.path.isdir(etc_ssh) and os.path.isdir("/etc/ssh"):
        bind(etc_ssh, "/etc/ssh", readonly=True)
    if os.path.exists("/etc/resolv.conf") and not os.path.islink("/etc/resolv.conf"):
        bind(os.path.join(state, "resolv.conf"), "/etc/resolv.conf", readonly=True)
    socket.sethostname(host)
    sysctl = {
        # no IPv6 chatter on the simulated links (macOS would have link-local IPv6; the
        # shims derive the fe80:: addresses they print from the MAC instead)
        "net/ipv6/conf/all/disable_ipv6": "1",
        "net/ipv6/conf/default/disable_ipv6": "1",
        # answer ARP only for addresses of the receiving interface, as BSD does; without
        # it Linux answers on bridge0 for an address that sits on a bridged port
        "net/ipv4/conf/all/arp_ignore": "1",
        "net/ipv4/conf/all/arp_announce": "2",
        "net/ipv4/conf/all/rp_filter": "0",
        "net/ipv4/conf/default/rp_filter": "0",
    }
    for key, value in sysctl.items():
        with open(f"/proc/sys/{key}", "w") as f:
            f.write(value)


def main():
    state, host = os.path.abspath(sys.argv[1]), sys.argv[2]
    hostdir = os.path.join(state, "hosts", host)
    status = os.path.join(hostdir, "init.status")
    with open(os.path.join(state, "cluster.json")) as f:
        cfg = json.load(f)
    children = set()

    def stop(signum, frame):
        # PID 1: take every process of this Mac down, then leave
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        setup(state, host, cfg)
        r = subprocess.run(
            [sys.executable, cfg["shim"], "boot", state, host], capture_output=True, text=True, timeout=60
        )
        if r.returncode != 0:
            raise RuntimeError(f"boot failed ({r.returncode}): {r.stderr.strip()}")
        pidfile = os.path.join(hostdir, "sshd.pid")
        if os.path.exists(pidfile):
            os.unlink(pidfile)
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
            "MLXSIM_HOST": host,
            "MLXSIM_NOTE": "simulated Mac (tests/simcluster)",
        }
        sshd = subprocess.Popen(
            [cfg["sshd"], "-f", os.path.join(hostdir, "sshd_config"), "-E", os.path.join(hostdir, "sshd.log"), "-D"],
            env=env,
            stdin=subprocess.DEVNULL,
            cwd="/",
        )
        children.add(sshd.pid)
        # Remote Login's Bonjour announcement, while sshd runs (announce.py)
        with open(os.path.join(hostdir, "announce.log"), "ab") as log:
            announce = subprocess.Popen(
                [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "announce.py"), state, host],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd="/",
            )
        children.add(announce.pid)
    except Exception as exc:  # noqa: BLE001 - reported to the harness, then exit
        with open(status, "w") as f:
            f.write(f"error: {exc}\n")
        print(f"hostinit {host}: {exc}", file=sys.stderr, flush=True)
        return 1
    with open(status, "w") as f:
        f.write("booted\n")
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(0.5)
        except InterruptedError:
            pass


if __name__ == "__main__":
    sys.exit(main())
