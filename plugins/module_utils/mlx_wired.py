# -*- coding: utf-8 -*-
"""The GPU's wired-memory limit (`iogpu.wired_limit_mb`): how much a Mac's GPU may wire, the
safe value to raise it to, and the LaunchDaemon that sets it again at every boot.

Pure: no command runs here. The module `mac_wired_limit` reads and changes the Mac; the
controller's memory fit (plugin_utils/preflight.py) uses the same numbers.

What macOS does (sources; unverified points are listed in tests/simcluster/README.md):
- `sysctl iogpu.wired_limit_mb` is the most memory, in MB, the GPU driver may wire (keep
  resident). 0, the value at every boot, means macOS's own default. Metal reports the limit in
  force as `recommendedMaxWorkingSetSize` (MLX's `device_info()["max_recommended_working_set_size"]`):
  macOS's default while the sysctl is 0, the sysctl's value once it is set (measured on an M3
  16 GB and an M5 Max 128 GB: AlexsJones/llmfit PR #754, antirez/ds4 PR #893). The env stage
  reads it through the venv's MLX (roles/python_env/files/mlx_versions.py) and the memory
  check uses it (`gpu_working_set_mb` in discovery's `hw` facts).
- Where nothing could read it (no venv yet), the default is estimated, and it changed between
  macOS versions: 2/3 of memory up to 36 GB and 3/4 above on macOS 13-15 (llama.cpp's and
  exo's logs: 21,845 MB of 32 GB, 10.67 of 16 GB), higher on macOS 26 (11.84 of 16 GB, 74 %;
  107.52 of 128 GiB, 84 %). The memory check estimates low (it refuses rather than let a rank
  run out of memory); the most this toolkit sets estimates high (it never sets a limit below
  what macOS would give on its own).
- `sudo sysctl iogpu.wired_limit_mb=N` raises it now (MLX's `mx.set_wired_limit` docs); it
  needs root and lasts until the next restart. /etc/sysctl.conf is not a dependable way to keep
  it (reports of it being ignored on Apple silicon; the iogpu oid belongs to the GPU driver, not
  the kernel's early boot), so the value is set again at each boot by a LaunchDaemon:
  /Library/LaunchDaemons/<label>.plist, owned by root:wheel, not writable by group or others
  (`man launchctl`), `RunAtLoad` running `/usr/sbin/sysctl iogpu.wired_limit_mb=N`; launchd
  loads every plist of /Library/LaunchDaemons at boot. `KeepAlive: {SuccessfulExit: false}`
  makes launchd run it again (every `ThrottleInterval` seconds) while it fails, in case the
  oid is not there yet when launchd starts it.
- A safe value leaves macOS room: MLX says the limit must stay strictly below the memory size;
  guides and tools keep 5 to 16 GB back (exo's configure_mlx.sh: max(80 %, memory - 5 GB);
  oMLX's "safe" tier keeps ~20 %, 6 to 16 GB). This toolkit keeps 1/8 of memory back, at
  least 6 GB and at most 16 GB, and never goes below macOS's own default: that value is both
  `auto` and the most it will set.
"""

from __future__ import annotations

import hashlib
import plistlib

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_host import WIRED_LIMIT_OID

GIB = 2**30
MIB = 2**20
# macOS's own limit when iogpu.wired_limit_mb is 0, estimated (see above): the lowest share
# reported, for the memory check, and the highest, for the most this toolkit sets
DEFAULT_GPU_SHARE_SMALL, DEFAULT_GPU_SHARE_LARGE, SMALL_MEMORY = 2 / 3, 3 / 4, 36 * GIB
HIGHEST_GPU_SHARE_SMALL, HIGHEST_GPU_SHARE_LARGE = 3 / 4, 0.84
# what a raised limit leaves to macOS: 1/8 of memory, within these bounds
RESERVE_FRACTION, RESERVE_MIN, RESERVE_MAX = 1 / 8, 6 * GIB, 16 * GIB

LABEL = "org.mlx-cluster.wired-limit"
LAUNCH_DAEMONS = "/Library/LaunchDaemons"
PLIST_PATH = f"{LAUNCH_DAEMONS}/{LABEL}.plist"
SERVICE = f"system/{LABEL}"
SYSCTL = "/usr/sbin/sysctl"
# launchd runs a failed (non-zero exit) RunAtLoad job again after this many seconds
THROTTLE_INTERVAL = 10

# the setting: "" = not managed, "off" = removed (macOS's default again), "auto", or MB
AUTO, OFF = "auto", "off"


def default_share(memsize):
    """The lowest fraction of memory macOS has been reported to let the GPU wire when the limit
    is 0 (an estimate: the Mac's own value, when read, replaces it)."""
    return DEFAULT_GPU_SHARE_SMALL if memsize <= SMALL_MEMORY else DEFAULT_GPU_SHARE_LARGE


def default_limit_bytes(memsize):
    """macOS's own GPU limit in bytes for a Mac with `memsize` bytes (iogpu.wired_limit_mb 0),
    estimated low: what the memory check assumes where the Mac's own value is unknown."""
    return int(memsize * default_share(memsize))


def highest_default_bytes(memsize):
    """macOS's own GPU limit for `memsize` bytes, estimated high (the highest share reported,
    macOS 26's): the floor of what this toolkit sets."""
    return int(memsize * (HIGHEST_GPU_SHARE_SMALL if memsize <= SMALL_MEMORY else HIGHEST_GPU_SHARE_LARGE))


def safe_wired_limit_mb(memsize):
    """A wired limit that leaves macOS room: memory less 1/8 of it, at least 6 GB and at most
    16 GB kept back; never below macOS's own default (estimated high: on a Mac under 24 GB the
    default is the larger). `auto`, and the most this toolkit sets."""
    keep = min(max(int(memsize * RESERVE_FRACTION), RESERVE_MIN), RESERVE_MAX)
    return max(memsize - keep, highest_default_bytes(memsize)) // MIB


def resolve_limit(setting, memsize):
    """The limit in MB for `setting` ("auto" or a number of MB) on a Mac with `memsize` bytes.

    Raises ValueError, naming the numbers and the fix, for anything else, for 0 or less, and for
    a value above safe_wired_limit_mb(memsize)."""
    text = str(setting).strip().lower()
    if text == AUTO:
        return safe_wired_limit_mb(memsize)
    if not text.isdecimal():
        raise ValueError(f"the wired limit must be `{AUTO}`, `{OFF}` or a number of MB, not {setting!r}")
    value = int(text)
    top = safe_wired_limit_mb(memsize)
    if value <= 0:
        raise ValueError(f"a wired limit of {value} MB is no limit; use `{OFF}` for macOS's default")
    if value > top:
        raise ValueError(
            f"{value} MB is more than this Mac's {memsize / GIB:.0f} GB of memory can give the GPU "
            f"safely: at most {top} MB ({top / 1024:.1f} GB), which leaves macOS "
            f"{(memsize - top * MIB) / GIB:.1f} GB; use `{AUTO}` or a number up to {top}"
        )
    return value


def sysctl_set_argv(limit_mb, sysctl=SYSCTL):
    """`sysctl iogpu.wired_limit_mb=N`: what the daemon runs at boot and the module runs now."""
    return [sysctl, f"{WIRED_LIMIT_OID}={int(limit_mb)}"]


def daemon(limit_mb):
    """The LaunchDaemon's content as a dict (what plistlib writes)."""
    return {
        "Label": LABEL,
        "ProgramArguments": sysctl_set_argv(limit_mb),
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ThrottleInterval": THROTTLE_INTERVAL,
    }


def daemon_bytes(limit_mb):
    """The LaunchDaemon's plist, XML, keys sorted: the same limit gives the same bytes."""
    return plistlib.dumps(daemon(limit_mb), fmt=plistlib.FMT_XML, sort_keys=True)


def daemon_limit(content):
    """The limit a LaunchDaemon plist (bytes) of this toolkit sets, or None when `content` is
    None, not a plist, or not ours (another label or program)."""
    if content is None:
        return None
    try:
        data = plistlib.loads(content)
    except Exception:  # noqa: BLE001 - plistlib raises several types for bad input
        return None
    if not isinstance(data, dict) or data.get("Label") != LABEL:
        return None
    argv = data.get("ProgramArguments")
    if not isinstance(argv, list) or len(argv) != 2 or argv[0] != SYSCTL:
        return None
    name, sep, value = str(argv[1]).partition("=")
    if name != WIRED_LIMIT_OID or not sep or not value.isdecimal():
        return None
    return int(value)


def file_problem(stat):
    """Why launchd would refuse the plist with this os.stat() result, or None: a LaunchDaemon
    must be owned by root (group wheel) and not writable by group or others (`man launchctl`)."""
    if stat is None:
        return None
    if stat.st_uid != 0 or stat.st_gid != 0:
        return f"owned by uid {stat.st_uid} gid {stat.st_gid}, not root:wheel"
    if stat.st_mode & 0o022:
        return f"mode {stat.st_mode & 0o777:04o} lets group or others write it"
    return None


def plan_wired(limit_mb, live_mb, content, problem, loaded):
    """What must change on a Mac for `limit_mb` (None: remove, back to macOS's default).

    `live_mb`: iogpu.wired_limit_mb now; `content`: the daemon's plist bytes (None: absent);
    `problem`: file_problem() of it; `loaded`: launchd has the job. Returns {"write",
    "remove", "bootout", "bootstrap" (bools), "live": the value to set now or None, "changes":
    [what changes, in words]}; an empty "changes" means nothing to do."""
    plan = {"write": False, "remove": False, "bootout": False, "bootstrap": False, "live": None, "changes": []}
    if limit_mb is None:
        if loaded:
            plan["bootout"] = True
            plan["changes"].append(f"unload the LaunchDaemon {LABEL}")
        if content is not None:
            plan["remove"] = True
            plan["changes"].append(f"remove {PLIST_PATH}")
        if live_mb != 0:
            plan["live"] = 0
            plan["changes"].append(f"{WIRED_LIMIT_OID} {live_mb} -> 0 (macOS's default)")
        return plan
    if content != daemon_bytes(limit_mb) or problem:
        plan["write"] = True
        plan["changes"].append(f"write {PLIST_PATH} ({WIRED_LIMIT_OID}={limit_mb} at every boot)")
        plan["bootout"] = bool(loaded)  # launchd keeps the definition it loaded: load it again
    if plan["write"] or not loaded:
        plan["bootstrap"] = True
        plan["changes"].append(f"load the LaunchDaemon {LABEL} (launchctl bootstrap system)")
    if live_mb != limit_mb:
        plan["live"] = limit_mb
        plan["changes"].append(f"{WIRED_LIMIT_OID} {live_mb} -> {limit_mb}")
    return plan


# what discovery's `read_files` gives for a right plist (besides its sha256): its mode
PLIST_MODE = "0644"


def discovered_in_place(setting, hw, files):
    """True when discovery's facts show a Mac already as `setting` asks: the live value
    (`hw.wired_limit_mb`) and the daemon's plist (`files`, discovery's read_files: sha256 and
    mode). Any doubt (the plist not read, the value unknown, a bad setting) is False: the
    module then runs, reads everything itself and says what is wrong. The plist's owner and
    launchd's job are not in the facts: a plist put right by this toolkit is root's, and
    launchd loads it at every boot."""
    files = files or {}
    live = (hw or {}).get("wired_limit_mb")
    if PLIST_PATH not in files or live is None:
        return False
    info = files[PLIST_PATH]
    text = str(setting).strip().lower()
    if text == OFF:
        return live == 0 and info is None
    try:
        target = resolve_limit(text, (hw or {}).get("memsize") or 0)
    except ValueError:
        return False
    return live == target and info == {"sha256": hashlib.sha256(daemon_bytes(target)).hexdigest(), "mode": PLIST_MODE}


def state_text(live_mb, content):
    """The managed state as --diff shows it: the live value and the daemon's plist."""
    plist = content.decode("utf-8", errors="replace") if content is not None else "(absent)\n"
    return f"{WIRED_LIMIT_OID} = {live_mb}\n{PLIST_PATH}:\n{plist}"
