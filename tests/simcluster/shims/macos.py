#!/usr/bin/env python3
"""macOS command shims for the simulated Mac cluster (tests/simcluster).

One program, many names: every macOS command the product runs is a symlink to `shim`,
which runs this module (byte-compiled once, not on every command), and the command is
chosen by the basename of argv[0]. The harness puts the links in
`<state>/hosts/<host>/bin/` (first on PATH in every SSH session of that host), so the
state directory is found from the path the shim was run by; the host is the UTS
hostname of the simulated Mac the shim runs in.

Every run appends {"ts", "argv", "cwd", "pid"} to `<state>/hosts/<host>/argv.log`.

The answers come from the wiring spec (`<state>/cluster.json`), the live overrides the
tests set (`<state>/live.json`), the persistent network preferences of the host
(`netprefs.json`, the SystemConfiguration preferences of a real Mac) and the REAL state
of the host's network namespace (`ip -j ...`). Setters change the namespace for real.
Output formats follow what macOS prints (see tests/fixtures/ for captures).

Only the Python standard library is used: the shims run under whatever python3 is first
on the simulated Mac's PATH.
"""

import _json
import fcntl
import os
import sys
import time

# hashlib and uuid are imported where used (system_profiler); ipaddress, subprocess, re, signal
# and json on first use (below); JSON is read and written by json's own C half (_json, below),
# and `ip` runs without subprocess (run_argv). Every shim run starts a Python and the product
# runs many of them: json, re and signal (their imports pull in enum, functools and re's
# compiler) were half of what a shim cost in CPU, ipaddress and subprocess a fifth before that.


class _OnFirstUse:
    """A module imported when one of its names is first used (then it replaces this stand-in)."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        module = __import__(self._name)
        globals()[self._name] = module
        return getattr(module, attr)


ipaddress = _OnFirstUse("ipaddress")
subprocess = _OnFirstUse("subprocess")
re = _OnFirstUse("re")
signal = _OnFirstUse("signal")
json = _OnFirstUse("json")  # only where the output must look like json's (indent, separators)


class _JSONContext:
    """What json's C scanner reads from a JSONDecoder: json.loads' defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}.__getitem__


_JSON_SCAN = _json.make_scanner(_JSONContext())
_JSON_WS = " \t\n\r"


def json_loads(text):
    """json.loads(text) for a str, without importing json. ValueError when it is not JSON."""
    start = len(text) - len(text.lstrip(_JSON_WS))
    try:
        value, end = _JSON_SCAN(text, start)
    except StopIteration as exc:
        raise ValueError(f"not JSON (at character {exc.value})") from None
    if text[end:].strip(_JSON_WS):
        raise ValueError(f"not JSON (extra data at character {end})")
    return value


def _json_default(value):
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def json_dumps(value, sort_keys=False):
    """json.dumps(value, sort_keys=sort_keys) without importing json (one line, ASCII)."""
    encode = _json.make_encoder(
        {}, _json_default, _json.encode_basestring_ascii, None, ": ", ", ", sort_keys, False, True
    )
    return "".join(encode(value, 0))


CMD = os.path.basename(sys.argv[0])
IP = next((p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip") if os.path.exists(p)), "ip")
PING = next((p for p in ("/usr/bin/ping", "/bin/ping", "/usr/sbin/ping") if os.path.exists(p)), None)
UUID_NS = "6a1f6f2e-3c59-4f0e-9a43-5e1c2d7b8a10"
TB_BRIDGE_SERVICE = "Thunderbolt Bridge"
# macOS names the Thunderbolt Bridge's hardware port, and the service it makes for it, in the
# language the Mac was set up in (SystemConfiguration's localized interface names; the
# translations as a public table of them lists: tests/simcluster/README.md). The Thunderbolt
# ports keep "Thunderbolt N" in the languages whose name for Thunderbolt is "Thunderbolt";
# Chinese (zh) names both with Apple's Chinese name for Thunderbolt, 雷雳 (assumed: no capture
# of a Mac set up in Chinese was found), so a Mac there is found only by its ports' identity.
BRIDGE_NAMES = {
    "en": TB_BRIDGE_SERVICE,
    "de": "Thunderbolt-Brücke",
    "fr": "Pont Thunderbolt",
    "ja": "Thunderbolt ブリッジ",
    "zh": "雷雳网桥",
}
TB_PORT_NAMES = {"zh": "雷雳 {}"}
# What `ifconfig -v` says a port is (a public capture: "type: IP over Thunderbolt").
IFCONFIG_TYPES = {"en0": "Ethernet"}
TB_IFCONFIG_TYPE = "IP over Thunderbolt"


def bridge_name(ctx):
    return BRIDGE_NAMES[ctx.cfg.get("language") or "en"]


def tb_port_name(ctx, k):
    """The hardware port of Thunderbolt receptacle k, in the Mac's language."""
    return TB_PORT_NAMES.get(ctx.cfg.get("language") or "en", "Thunderbolt {}").format(k)


BRIDGE = "bridge0"
# The file the command names link to (it imports this module; see its docstring).
SHIM_ENTRY = os.path.join(os.path.dirname(os.path.realpath(__file__)), "shim")


class ShimExit(Exception):
    def __init__(self, rc):
        self.rc = rc


def out(text=""):
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def err(text):
    sys.stderr.write(text if text.endswith("\n") else text + "\n")


def die(text, rc=1):
    err(text)
    raise ShimExit(rc)


# ---------------------------------------------------------------------------------------
# Context: which cluster, which host
# ---------------------------------------------------------------------------------------


class Ctx:
    def __init__(self, state, host):
        self.state = state
        self.host = host
        self.hostdir = os.path.join(state, "hosts", host)
        with open(os.path.join(state, "cluster.json")) as f:
            self.cluster = json_loads(f.read())
        if host not in self.cluster["hosts"]:
            die(f"{CMD}: this machine ({host}) is not a host of the simulated cluster {self.cluster.get('name')}", 70)
        self.live = _read_json(os.path.join(state, "live.json"), {"hosts": {}, "cables": {}})
        self.cfg = dict(self.cluster["hosts"][host])
        self.cfg.update(self.live.get("hosts", {}).get(host, {}))
        self.mountpoint = self.cluster.get("mountpoint", "/srv")

    # -- spec views --------------------------------------------------------------------
    def hostcfg(self, name):
        cfg = dict(self.cluster["hosts"][name])
        cfg.update(self.live.get("hosts", {}).get(name, {}))
        return cfg

    def plugged(self, cable_id):
        return bool(self.live.get("cables", {}).get(cable_id, {}).get("plugged", True))

    def cable(self, cable_id):
        """A cable of the spec with its live ends (a moved cable has other ends)."""
        cable = dict(self.cluster["cables"][cable_id])
        for side in ("a", "b"):
            end = self.live.get("cables", {}).get(cable_id, {}).get(side)
            if end:
                cable[side] = end
        return cable

    def cable_at(self, receptacle, host=None):
        """(cable id, cable) plugged into host:receptacle now, or (None, None)."""
        host = host or self.host
        for cid in self.cluster["cables"]:
            c = self.cable(cid)
            if any(c[s]["host"] == host and int(c[s]["receptacle"]) == int(receptacle) for s in "ab"):
                return cid, c
        return None, None

    def ports(self):
        """[(receptacle:int, port dict)] sorted by receptacle."""
        return sorted(((int(k), v) for k, v in self.cfg["ports"].items()), key=lambda kv: kv[0])

    def tb_ifaces(self):
        return [p["iface"] for _, p in self.ports()]

    def port_by_iface(self, iface):
        for _, p in self.ports():
            if p["iface"] == iface:
                return p
        return None

    def rdma_supported(self, cfg=None):
        cfg = cfg or self.cfg
        return version_tuple(cfg["macos"]) >= (26, 2) and int(cfg["tb_version"]) >= 5

    def rdma_devices_present(self):
        return bool(self.cfg["rdma"]) and self.rdma_supported()

    def elevated(self):
        """Root as macOS sees it. The simulated Macs are logged into as `admin` (uid 0 on the
        machine, but an unprivileged admin user on the Mac): mutating commands need sudo,
        whose shim sets USER=root and SUDO_USER like the real one. A session logged in as
        root is privileged, as on a Mac with root login. `require_sudo: false` (a live
        override) turns the check off."""
        if not self.cfg.get("require_sudo", True):
            return True
        return os.geteuid() == 0 and (os.environ.get("USER") == "root" or bool(os.environ.get("SUDO_USER")))

    # -- files ---------------------------------------------------------------------------
    def path(self, name):
        return os.path.join(self.hostdir, name)

    def lock(self):
        fd = os.open(self.path(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def prefs(self):
        p = _read_json(self.path("netprefs.json"), None)
        if p is None:
            p = default_prefs(self)
        return p

    def save_prefs(self, prefs):
        _write_json(self.path("netprefs.json"), prefs)
        write_sc_preferences(self, prefs)

    def runtime(self):
        return _read_json(self.path("runtime.json"), {"bridge_members": []})

    def save_runtime(self, rt):
        _write_json(self.path("runtime.json"), rt)


def _read_json(path, default):
    try:
        with open(path) as f:
            return json_loads(f.read())
    except (OSError, ValueError):
        return default


def _write_json(path, data):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(json_dumps(data, sort_keys=True) + "\n")
    os.replace(tmp, path)


def version_tuple(v):
    parts = []
    for x in str(v).split("."):
        try:
            parts.append(int(x))
        except ValueError:
            parts.append(0)
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts[:3])


def find_state():
    """<state>/hosts/<host>/bin/<cmd> -> <state>."""
    here = os.path.abspath(sys.argv[0])
    bindir = os.path.dirname(here)
    state = os.path.dirname(os.path.dirname(os.path.dirname(bindir)))
    if os.path.basename(os.path.dirname(os.path.dirname(bindir))) == "hosts" and os.path.exists(
        os.path.join(state, "cluster.json")
    ):
        return state
    return None


def log_argv(ctx):
    rec = {"ts": round(time.time(), 6), "argv": [CMD, *sys.argv[1:]], "cwd": _cwd(), "pid": os.getpid()}
    line = (json_dumps(rec) + "\n").encode()
    fd = os.open(ctx.path("argv.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _cwd():
    try:
        return os.getcwd()
    except OSError:
        return None


# ---------------------------------------------------------------------------------------
# The real namespace
# ---------------------------------------------------------------------------------------


class Ran:
    """What run_argv() returns: returncode, stdout and stderr (text), as subprocess.run's."""

    __slots__ = ("returncode", "stdout", "stderr")

    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _read_all(fd):
    chunks = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            os.close(fd)
            return b"".join(chunks).decode(errors="replace")
        chunks.append(chunk)


def run_argv(argv):
    """Run argv (stdin inherited), its output captured: subprocess.run(argv, capture_output=True,
    text=True) without importing subprocess. stdout is read to its end before stderr: fine
    for `ip`, whose error output is a line or two (a pipe holds 64 KiB)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    actions = [(os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)]
    spawn = os.posix_spawn if os.path.isabs(argv[0]) else os.posix_spawnp
    try:
        pid = spawn(argv[0], argv, os.environ, file_actions=actions)
    finally:
        os.close(out_w)
        os.close(err_w)
    out, errors = _read_all(out_r), _read_all(err_r)
    _, status = os.waitpid(pid, 0)
    return Ran(os.waitstatus_to_exitcode(status), out, errors)


def ip(*args, check=True):
    r = run_argv([IP, *args])
    if check and r.returncode != 0:
        raise IPError(args, r.stderr.strip())
    return r


class IPError(Exception):
    def __init__(self, args, msg):
        super().__init__(f"ip {' '.join(args)}: {msg}")
        self.msg = msg


def links():
    """{linux ifname: link json (with addr_info)}."""
    data = json_loads(ip("-j", "-d", "addr", "show").stdout or "[]")
    return {d["ifname"]: d for d in data}


def ipv4s(link):
    return [a for a in link.get("addr_info", []) if a.get("family") == "inet"]


def mac_name(linux):
    return "lo0" if linux == "lo" else linux


def linux_name(mac):
    return "lo" if mac == "lo0" else mac


def is_up(link):
    return "UP" in link.get("flags", [])


def has_carrier(link):
    flags = link.get("flags", [])
    return "UP" in flags and "LOWER_UP" in flags


def master(link):
    return link.get("master")


def prefix_to_mask(prefix):
    return str(ipaddress.IPv4Network(f"0.0.0.0/{prefix}").netmask)


def mask_to_prefix(mask):
    mask = mask.strip()
    if mask.lower().startswith("0x"):
        value = int(mask, 16)
        mask = str(ipaddress.IPv4Address(value))
    return ipaddress.IPv4Network(f"0.0.0.0/{mask}").prefixlen


def classful_prefix(addr):
    first = int(str(addr).split(".")[0])
    return 8 if first < 128 else 16 if first < 192 else 24


def eui64(mac, flip=True):
    octets = [int(x, 16) for x in mac.split(":")]
    if flip:
        octets[0] ^= 0x02
    e = octets[:3] + [0xFF, 0xFE] + octets[3:]
    return [f"{e[i]:02x}{e[i + 1]:02x}" for i in range(0, 8, 2)]


def link_local(mac):
    return str(ipaddress.IPv6Address("fe80::" + ":".join(eui64(mac))))


# --- bridge handling (Linux bridge emulating the Thunderbolt Bridge) -----------------------


def forget_neighbours(iface):
    """ARP entries of an interface go when its addresses or bridge membership change (as
    on macOS, where they hang off the interface's routes). Linux would keep a half-resolved
    entry and drop the next packets queued on it."""
    ip("neigh", "flush", "dev", iface, check=False)


def enslave(iface):
    forget_neighbours(iface)
    ip("link", "set", "dev", iface, "master", BRIDGE)
    # Isolated ports: no forwarding between the Thunderbolt ports of one Mac. A real
    # bridge0 in a full mesh forwards (and storms); ours only delivers to the host, so
    # a loop of bridges cannot melt the machine that runs the simulation.
    ip("link", "set", "dev", iface, "type", "bridge_slave", "isolated", "on", "learning", "on")


def release(iface, lk):
    if iface in lk and master(lk[iface]) == BRIDGE:
        ip("link", "set", "dev", iface, "nomaster")
        forget_neighbours(iface)


def sync_bridge(ctx, rt=None, lk=None):
    """Make the Linux bridge match the nominal members: enslaved when bridge0 is up,
    released when it is down (macOS lets member ports carry their own addresses then)."""
    lk = lk if lk is not None else links()
    rt = rt if rt is not None else ctx.runtime()
    br = lk.get(BRIDGE)
    members = [m for m in rt.get("bridge_members", []) if m in lk]
    for name, link in lk.items():
        if master(link) == BRIDGE and (br is None or not is_up(br) or name not in members):
            ip("link", "set", "dev", name, "nomaster")
            forget_neighbours(name)
    if br is not None and is_up(br):
        for m in members:
            if master(lk[m]) != BRIDGE:
                enslave(m)


def create_bridge(ctx):
    ip("link", "add", "name", BRIDGE, "type", "bridge", "stp_state", "0")
    ip("link", "set", "dev", BRIDGE, "address", ctx.cfg["bridge_mac"])


# ---------------------------------------------------------------------------------------
# Persistent network preferences (the SystemConfiguration preferences of the Mac)
# ---------------------------------------------------------------------------------------


def hardware_ports(ctx, prefs=None, lk=None):
    """[(hardware port, device, MAC)] in the order networksetup lists them."""
    prefs = prefs or ctx.prefs()
    ports = [("Ethernet", "en0", ctx.cfg["en0_mac"])]
    if BRIDGE in prefs.get("bridges", {}):
        ports.append((bridge_name(ctx), BRIDGE, ctx.cfg["bridge_mac"]))
    for k, p in ctx.ports():
        ports.append((tb_port_name(ctx, k), p["iface"], p["mac"]))
    return ports


SC_PREFERENCES = ("Library", "Preferences", "SystemConfiguration", "preferences.plist")


def sc_preferences_doc(ctx, prefs):
    """The network preferences of `prefs` as macOS structures them: one set, "Automatic",
    holding every service in order; disabled services marked __INACTIVE__; the bridges'
    definitions (members and options)."""
    services, order = {}, []
    for svc in prefs["services"]:
        key = _svc_uuid(ctx.host, "network-service", svc["name"])
        v4 = dict(svc.get("ipv4") or {})
        ipv4 = {"ConfigMethod": v4.get("method") or "DHCP"}
        if ipv4["ConfigMethod"] == "Manual":
            ipv4.update(Addresses=[v4.get("address")], SubnetMasks=[v4.get("subnet") or "255.255.255.0"])
        if v4.get("router"):
            ipv4["Router"] = v4["router"]
        entry = {
            "DNS": {},
            "IPv4": ipv4,
            "IPv6": {"ConfigMethod": svc.get("ipv6") or "Automatic"},
            "Interface": {
                "DeviceName": svc["device"],
                "Hardware": "Bridge" if svc["device"] == BRIDGE else "Ethernet",
                "Type": "Bridge" if svc["device"] == BRIDGE else "Ethernet",
                "UserDefinedName": svc.get("hardware_port") or svc["name"],
            },
            "Proxies": {"ExceptionsList": ["*.local", "169.254/16"], "FTPPassive": 1},
            "SMB": {},
            "UserDefinedName": svc["name"],
        }
        if not svc.get("enabled", True):
            entry["__INACTIVE__"] = 1
        services[key] = entry
        order.append(key)
    current = _svc_uuid(ctx.host, "set", "Automatic")
    doc = {
        "CurrentSet": f"/Sets/{current}",
        "NetworkServices": services,
        "Sets": {
            current: {
                "Network": {
                    "Global": {"IPv4": {"ServiceOrder": order}},
                    "Service": {k: {"__LINK__": f"/NetworkServices/{k}"} for k in order},
                },
                "UserDefinedName": "Automatic",
            }
        },
        "System": {"Network": {"HostNames": {"LocalHostName": ctx.host}}, "System": {"ComputerName": ctx.host}},
        "VirtualNetworkInterfaces": {
            "Bridge": {name: bridge_definition(b) for name, b in (prefs.get("bridges") or {}).items()}
        },
    }
    return doc


def bridge_definition(b):
    """A bridge as the preferences hold it (/VirtualNetworkInterfaces/Bridge/<name>): the
    auto-created Thunderbolt Bridge has its members and Options.__AUTO__, no name of its own
    (configd SCNetworkSet.c copyAutoBridgeInterface, BridgeConfiguration.c SCBridgeInterfaceCreate)."""
    entry = {"Interfaces": list(b.get("members") or []), "Options": dict(b.get("options") or AUTO_BRIDGE_OPTIONS)}
    entry.update(b.get("extra") or {})
    return entry


AUTO_BRIDGE_OPTIONS = {"__AUTO__": "thunderbolt-bridge"}


def write_sc_preferences(ctx, prefs):
    """The preferences as macOS keeps them (/Library/Preferences/SystemConfiguration/
    preferences.plist, which the Mac sees through its /Library mount): sc_preferences_doc(),
    written whole and renamed into place, as SCPreferences commits."""
    import plistlib

    doc = sc_preferences_doc(ctx, prefs)
    path = os.path.join(ctx.hostdir, *SC_PREFERENCES)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        plistlib.dump(doc, f)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def default_prefs(ctx):
    cfg = ctx.cfg
    mgmt = ctx.cluster["management"]
    bridge_on = bool(cfg.get("thunderbolt_bridge", True))
    return {
        "services": [
            {
                "name": "Ethernet",
                "hardware_port": "Ethernet",
                "device": "en0",
                "enabled": True,
                "ipv4": {
                    "method": "Manual",
                    "address": cfg["mgmt_address"],
                    "subnet": prefix_to_mask(mgmt["prefix"]),
                    "router": mgmt["gateway"],
                },
                "ipv6": "Automatic",
            },
            {
                "name": bridge_name(ctx),
                "hardware_port": bridge_name(ctx),
                "device": BRIDGE,
                "enabled": bridge_on,
                "ipv4": {"method": "DHCP"},
                "ipv6": "Automatic",
            },
        ],
        "bridges": {BRIDGE: {"members": ctx.tb_ifaces() if bridge_on else []}},
    }


def service(prefs, name):
    return next((s for s in prefs["services"] if s["name"] == name), None)


def flush_v4(dev, lk):
    if dev in lk:
        ip("-4", "addr", "flush", "dev", dev, check=False)
        ip("-4", "route", "flush", "dev", dev, check=False)
        forget_neighbours(dev)


def apply_service(ctx, prefs, svc, lk=None):
    """Runtime effect of one service's configuration (what configd does)."""
    lk = lk if lk is not None else links()
    dev = svc["device"]
    if dev not in lk:
        return
    flush_v4(dev, lk)
    if not svc["enabled"]:
        # IPConfiguration detaches IP from the interface (SIOCPROTODETACH) and leaves its
        # link state alone (bootp ipconfigd.c / ifutil.c): a disabled Thunderbolt Bridge
        # service leaves bridge0 up, forwarding between its members.
        return
    if dev == BRIDGE:
        ip("link", "set", "dev", BRIDGE, "up")  # inet_attach_interface(..., set_iff_up=TRUE)
        sync_bridge(ctx, lk=links())
    if dev != BRIDGE and not is_up(lk[dev]):
        ip("link", "set", "dev", dev, "up")
    v4 = svc.get("ipv4") or {}
    if v4.get("method") == "Manual" and v4.get("address"):
        prefix = mask_to_prefix(v4.get("subnet") or "255.255.255.0")
        ip("addr", "add", f"{v4['address']}/{prefix}", "brd", "+", "dev", dev, check=False)
        router = v4.get("router")
        if router and primary_service(prefs) is svc:
            ip("route", "replace", "default", "via", router, "dev", dev, check=False)


def primary_service(prefs):
    """The first enabled service with a router owns the default route."""
    for s in prefs["services"]:
        if s["enabled"] and (s.get("ipv4") or {}).get("router"):
            return s
    return None


def boot(ctx):
    """What a Mac does at boot: interfaces up, no runtime addresses or host routes on the
    Thunderbolt ports, the bridges rebuilt from their definitions in the preferences, the
    enabled services applied in order; then launchd loads the LaunchDaemons (launchd_boot).

    configd's InterfaceNamer creates every bridge of /VirtualNetworkInterfaces/Bridge, marks
    it up and adds every listed member, whether or not the bridge's network service is
    enabled (BridgeConfiguration.c _SCBridgeInterfaceUpdateConfiguration, __createInterface
    sets IFF_UP); xnu sets each member promiscuous as it joins (if_bridge.c
    bridge_ioctl_add). What `ifconfig bridge0 deletem` did is gone."""
    fd = ctx.lock()
    try:
        prefs = ctx.prefs()
        ctx.save_prefs(prefs)
        lk = links()
        ip("link", "set", "dev", "lo", "up", check=False)
        for dev in ["en0", *ctx.tb_ifaces()]:
            if dev in lk:
                if master(lk[dev]):
                    ip("link", "set", "dev", dev, "nomaster")
                ip("link", "set", "dev", dev, "mtu", "1500", "up")
                flush_v4(dev, lk)
        if BRIDGE in lk:
            ip("link", "del", "dev", BRIDGE)
        ctx.save_runtime({"bridge_members": [], "applied_bridges": {}})
        apply_bridge_definitions(ctx, prefs)
        for svc in prefs["services"]:
            if svc["enabled"]:
                apply_service(ctx, prefs, svc, lk=links())
        # the kernel's values are back to their defaults (what sysctl wrote is gone)
        if os.path.exists(ctx.path(KERNEL_STATE)):
            os.unlink(ctx.path(KERNEL_STATE))
    finally:
        os.close(fd)
    launchd_boot(ctx)


def apply_bridge_definitions(ctx, prefs):
    """configd's reconciliation of the bridges with their definitions, run at boot and when
    an applied change altered a definition (InterfaceNamer caches the definitions it last
    applied and does nothing while they are unchanged): a defined bridge that is missing is
    created and marked up; members not listed leave it, listed members not in it join it; a
    bridge no longer defined is destroyed. Caller holds the host lock."""
    rt = ctx.runtime()
    defined = {name: list(b.get("members") or []) for name, b in (prefs.get("bridges") or {}).items()}
    if rt.get("applied_bridges") == defined:
        return
    lk = links()
    if BRIDGE in defined:
        if BRIDGE not in lk:
            create_bridge(ctx)
        ip("link", "set", "dev", BRIDGE, "up")
        rt["bridge_members"] = [m for m in defined[BRIDGE] if m in lk and m not in ("lo", BRIDGE)]
    elif BRIDGE in lk:
        ip("link", "del", "dev", BRIDGE)
        rt["bridge_members"] = []
    rt["applied_bridges"] = defined
    ctx.save_runtime(rt)
    sync_bridge(ctx, rt=rt)


def busy_member(prefs, dev):
    """The bridge whose definition lists `dev` and does not allow configured members: macOS
    then refuses to create, enable or add a network service on `dev` (configd
    SCNetworkService.c, SCNetworkServiceCreate / SCNetworkServiceSetEnabled,
    __SCNetworkInterfaceIsBusyMember). None when `dev` is free."""
    for name, b in (prefs.get("bridges") or {}).items():
        if dev in (b.get("members") or []) and not (b.get("options") or {}).get("AllowConfiguredMembers"):
            return name
    return None


# ---------------------------------------------------------------------------------------
# networksetup
# ---------------------------------------------------------------------------------------

NS_INVALID = "** Error: The parameters were not valid."
NS_ADMIN = "** Error: Command requires admin privileges."


def ns_unknown_service(name):
    # networksetup prints both lines and, like the real tool, exits 4 (bad parameters)
    out(f"{name} is not a recognized network service.")
    out(NS_INVALID)
    raise ShimExit(4)


def ns_need_admin(ctx):
    if not ctx.elevated():
        out(NS_ADMIN)
        raise ShimExit(14)


def cmd_networksetup(ctx, args):
    if not args:
        out(
            "networksetup Help Information\n-------------------------------\n"
            "Usage: networksetup -listallnetworkservices ..."
        )
        return 0
    op, rest = args[0], args[1:]
    low = op.lower()
    prefs = ctx.prefs()

    if low == "-listallhardwareports":
        text = "\n"
        for port, dev, mac in hardware_ports(ctx, prefs):
            text += f"Hardware Port: {port}\nDevice: {dev}\nEthernet Address: {mac}\n\n"
        text += "VLAN Configurations\n===================\n"
        sys.stdout.write(text)
        return 0

    if low == "-listnetworkserviceorder":
        text = "An asterisk (*) denotes that a network service is disabled.\n"
        n = 0
        for s in prefs["services"]:
            if s["enabled"]:
                n += 1
                tag = f"({n})"
            else:
                tag = "(*)"
            text += f"{tag} {s['name']}\n(Hardware Port: {s['hardware_port']}, Device: {s['device']})\n\n"
        sys.stdout.write(text)
        return 0

    if low == "-listallnetworkservices":
        out("An asterisk (*) denotes that a network service is disabled.")
        for s in prefs["services"]:
            out(("" if s["enabled"] else "*") + s["name"])
        return 0

    if low == "-getinfo":
        if len(rest) != 1:
            out(NS_INVALID)
            return 4
        s = service(prefs, rest[0])
        if s is None:
            ns_unknown_service(rest[0])
        mac = dict((d, m) for _, d, m in hardware_ports(ctx, prefs)).get(s["device"], "N/A")
        v4 = s.get("ipv4") or {}
        method = v4.get("method", "DHCP")
        lines = []
        if method == "Manual":
            lines += [
                "Manual Configuration",
                f"IP address: {v4.get('address')}",
                f"Subnet mask: {v4.get('subnet')}",
                f"Router: {v4.get('router') or '(null)'}",
            ]
        elif method == "DHCP":
            lines += ["DHCP Configuration"]
            lk = links()
            link = lk.get(s["device"])
            addrs = ipv4s(link) if (link and s["enabled"]) else []
            if addrs:
                lines += [
                    f"IP address: {addrs[0]['local']}",
                    f"Subnet mask: {prefix_to_mask(addrs[0]['prefixlen'])}",
                    "Router: (null)",
                ]
            lines += ["Client ID: "]
        elif method == "BOOTP":
            lines += ["BOOTP Configuration"]
        v6 = s.get("ipv6", "Automatic")
        lines += [f"IPv6: {v6}", "IPv6 IP address: none", "IPv6 Router: none", f"Ethernet Address: {mac}"]
        out("\n".join(lines))
        return 0

    if low == "-getnetworkserviceenabled":
        if len(rest) != 1:
            out(NS_INVALID)
            return 4
        s = service(prefs, rest[0])
        if s is None:
            ns_unknown_service(rest[0])
        out("Enabled" if s["enabled"] else "Disabled")
        return 0

    if low == "-getmacaddress":
        if len(rest) != 1:
            out(NS_INVALID)
            return 4
        for port, dev, mac in hardware_ports(ctx, prefs):
            if rest[0] in (port, dev):
                out(f"Ethernet Address: {mac} (Hardware Port: {port})")
                return 0
        out(f"{rest[0]} is not a hardware port or a network service.")
        out(NS_INVALID)
        return 4

    if low == "-detectnewhardware":
        ns_need_admin(ctx)
        return 0

    setters = {
        "-setnetworkserviceenabled",
        "-createnetworkservice",
        "-removenetworkservice",
        "-setmanual",
        "-setdhcp",
        "-setv4off",
        "-setv6off",
        "-setv6automatic",
        "-ordernetworkservices",
        "-renamenetworkservice",
    }
    if low not in setters:
        out(f"** Error: Unknown command {op}. Use networksetup -help for usage.")
        return 4
    ns_need_admin(ctx)
    fd = ctx.lock()
    try:
        prefs = ctx.prefs()
        rc = _ns_set(ctx, prefs, low, rest)
    finally:
        os.close(fd)
    return rc


def _ns_set(ctx, prefs, op, rest):
    def need(n, upto=None):
        if len(rest) < n or (upto is not None and len(rest) > upto):
            out(NS_INVALID)
            raise ShimExit(4)

    def get(name):
        s = service(prefs, name)
        if s is None:
            ns_unknown_service(name)
        return s

    if op == "-setnetworkserviceenabled":
        need(2, 2)
        s = get(rest[0])
        state = rest[1].lower()
        if state not in ("on", "off"):
            out(NS_INVALID)
            return 4
        if state == "on" and not s["enabled"] and busy_member(prefs, s["device"]):
            out(NS_INVALID)  # SCNetworkServiceSetEnabled fails, as for -createnetworkservice
            return 4
        s["enabled"] = state == "on"
        ctx.save_prefs(prefs)
        apply_service(ctx, prefs, s)
        if not s["enabled"] and (s.get("ipv4") or {}).get("router"):
            _reapply_default_route(ctx, prefs)
        return 0

    if op == "-createnetworkservice":
        need(2, 2)
        name, hwport = rest
        ports = {p: d for p, d, _ in hardware_ports(ctx, prefs)}
        if hwport not in ports or service(prefs, name) is not None or not name.strip():
            out(NS_INVALID)
            return 4
        if busy_member(prefs, ports[hwport]):
            # SCNetworkServiceCreate fails (kSCStatusFailed); what networksetup prints then
            # is not known without a Mac: its usual error line and status
            out(NS_INVALID)
            return 4
        s = {
            "name": name,
            "hardware_port": hwport,
            "device": ports[hwport],
            "enabled": True,
            "ipv4": {"method": "DHCP"},
            "ipv6": "Automatic",
        }
        prefs["services"].append(s)
        ctx.save_prefs(prefs)
        apply_service(ctx, prefs, s)
        return 0

    if op == "-removenetworkservice":
        need(1, 1)
        s = get(rest[0])
        prefs["services"].remove(s)
        ctx.save_prefs(prefs)
        lk = links()
        if s["device"] in lk:
            flush_v4(s["device"], lk)  # IP detached; bridge0 stays up with its members
        return 0

    if op == "-setmanual":
        need(3, 4)
        s = get(rest[0])
        try:
            addr = ipaddress.IPv4Address(rest[1])
            mask_to_prefix(rest[2])
            router = str(ipaddress.IPv4Address(rest[3])) if len(rest) == 4 and rest[3] else None
        except ValueError:
            out(NS_INVALID)
            return 4
        s["ipv4"] = {"method": "Manual", "address": str(addr), "subnet": rest[2], "router": router}
        ctx.save_prefs(prefs)
        apply_service(ctx, prefs, s)
        return 0

    if op in ("-setdhcp", "-setv4off"):
        need(1, 2)
        s = get(rest[0])
        s["ipv4"] = {"method": "DHCP" if op == "-setdhcp" else "Off"}
        ctx.save_prefs(prefs)
        apply_service(ctx, prefs, s)
        return 0

    if op in ("-setv6off", "-setv6automatic"):
        need(1, 1)
        s = get(rest[0])
        s["ipv6"] = "Off" if op == "-setv6off" else "Automatic"
        ctx.save_prefs(prefs)
        return 0

    if op == "-ordernetworkservices":
        names = [s["name"] for s in prefs["services"]]
        if sorted(rest) != sorted(names):
            out(NS_INVALID)
            return 4
        prefs["services"] = [service(prefs, n) for n in rest]
        ctx.save_prefs(prefs)
        return 0

    if op == "-renamenetworkservice":
        need(2, 2)
        s = get(rest[0])
        if service(prefs, rest[1]) is not None:
            out(NS_INVALID)
            return 4
        s["name"] = rest[1]
        ctx.save_prefs(prefs)
        return 0
    return 4


def _reapply_default_route(ctx, prefs):
    ip("route", "del", "default", check=False)
    p = primary_service(prefs)
    if p is not None:
        r = p["ipv4"]["router"]
        ip("route", "replace", "default", "via", r, "dev", p["device"], check=False)


# ---------------------------------------------------------------------------------------
# scutil --prefs (SCPreferences: the only command-line editor of a bridge's definition)
# ---------------------------------------------------------------------------------------

SC_ERRORS = {"access": "Permission denied", "nokey": "No such key"}  # SCErrorString()
BRIDGE_PATH = r"^/VirtualNetworkInterfaces/Bridge/([a-z]+[0-9]+)$"


def cmd_scutil(ctx, args):
    """`scutil --prefs`: commands read from standard input, as configd's scutil (scutil.tproj
    prefs.c, dictionary.c) runs them: lock, unlock, get PATH, set PATH, d.init, d.show,
    d.add KEY [*] VALUE..., d.remove KEY, commit, apply, quit/close. A command that fails
    prints why on stdout and the session goes on; scutil always exits 0. Only the bridge
    definitions (/VirtualNetworkInterfaces/Bridge/<name>) can be set here; every other path
    can be read."""
    import shlex

    if args != ["--prefs"]:
        die("scutil: the simulated Mac emulates `scutil --prefs` only (commands on standard input)", 64)
    prefs = ctx.prefs()  # the session's copy, as SCPreferencesCreate reads it
    value, fd, changed = None, None, False
    try:
        for line in sys.stdin:
            try:
                words = shlex.split(line, comments=False)
            except ValueError:
                out("  unbalanced quotes")
                continue
            if not words or words[0].startswith("#"):
                continue
            cmd, rest = words[0], words[1:]
            if cmd in ("quit", "q", "close", "exit"):
                break
            if cmd == "lock":
                if not ctx.elevated():
                    out(SC_ERRORS["access"])
                elif fd is None:
                    fd = ctx.lock()
                    prefs = ctx.prefs()  # locked: nobody changes the file under us now
            elif cmd == "unlock":
                if fd is not None:
                    os.close(fd)
                    fd = None
            elif cmd == "get" and len(rest) == 1:
                node = _sc_path(sc_preferences_doc(ctx, prefs), rest[0])
                if not isinstance(node, dict):
                    out(f"  {SC_ERRORS['nokey']}")
                else:
                    value = {k: v for k, v in node.items() if not isinstance(v, dict)}
            elif cmd == "d.init":
                value = {}
            elif cmd == "d.show":
                out(_sc_show(value))
            elif cmd == "d.add" and len(rest) >= 1:
                if value is None:
                    out("d.add: dictionary must be initialized.")
                    continue
                key, vals, array = rest[0], rest[1:], False
                while vals and vals[0] in ("*", "#", "?", "%", "-"):
                    flag = vals.pop(0)
                    array = array or flag == "*"
                    if flag == "-":
                        break
                    if flag in ("#", "?", "%"):
                        out("  the simulated Mac's scutil takes string values only")
                        vals = None
                        break
                if vals is None:
                    continue
                if not vals and not array:
                    out("d.add: no values.")
                    continue
                value[key] = list(vals) if array or len(vals) > 1 else vals[0]
            elif cmd == "d.remove" and len(rest) == 1:
                if value is not None:
                    value.pop(rest[0], None)
            elif cmd == "set" and len(rest) == 1:
                m = re.match(BRIDGE_PATH, rest[0])
                if not m:
                    out(
                        f"  the simulated Mac's scutil sets /VirtualNetworkInterfaces/Bridge/<name> only, not {rest[0]}"
                    )
                    continue
                members = (value or {}).get("Interfaces", [])
                if not isinstance(members, list):
                    out("  Interfaces must be an array")  # configd would read no member at all
                    continue
                b = prefs.setdefault("bridges", {}).setdefault(m.group(1), {})
                b["members"] = list(members)
                extra = {k: v for k, v in (value or {}).items() if k not in ("Interfaces",)}
                if extra:
                    b["extra"] = extra
                else:
                    b.pop("extra", None)
                changed = True
            elif cmd == "commit":
                if not ctx.elevated():
                    out(SC_ERRORS["access"])
                    continue
                held = fd is not None
                if not held:
                    fd = ctx.lock()  # SCPreferencesCommitChanges locks for itself
                try:
                    ctx.save_prefs(prefs)
                    changed = False
                finally:
                    if not held:
                        os.close(fd)
                        fd = None
            elif cmd == "apply":
                if not ctx.elevated():
                    out(SC_ERRORS["access"])
                    continue
                held = fd is not None
                if not held:
                    fd = ctx.lock()
                try:
                    # configd applies what was committed (the file), not the session's copy
                    apply_bridge_definitions(ctx, ctx.prefs())
                finally:
                    if not held:
                        os.close(fd)
                        fd = None
            else:
                out(f'{cmd}: unknown, type "help" for command info')
    finally:
        if fd is not None:
            os.close(fd)
    if changed:
        out('preferences have been changed, use "commit" to save')  # lost, as scutil loses them
    return 0


def _sc_path(doc, path):
    node = doc
    for part in [p for p in path.split("/") if p]:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _sc_show(value):
    if value is None:
        return "d.show: dictionary must be initialized."
    lines = ["<dictionary> {"]
    for k, v in sorted(value.items()):
        if isinstance(v, list):
            lines.append(f"  {k} : <array> {{")
            lines += [f"    {i} : {x}" for i, x in enumerate(v)]
            lines.append("  }")
        else:
            lines.append(f"  {k} : {v}")
    lines.append("}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# ifconfig
# ---------------------------------------------------------------------------------------

FLAG_BITS = [
    (0x1, "UP"),
    (0x2, "BROADCAST"),
    (0x4, "DEBUG"),
    (0x8, "LOOPBACK"),
    (0x10, "POINTOPOINT"),
    (0x20, "SMART"),
    (0x40, "RUNNING"),
    (0x80, "NOARP"),
    (0x100, "PROMISC"),
    (0x200, "ALLMULTI"),
    (0x400, "OACTIVE"),
    (0x800, "SIMPLEX"),
    (0x1000, "LINK0"),
    (0x2000, "LINK1"),
    (0x4000, "LINK2"),
    (0x8000, "MULTICAST"),
]


def visible(ctx, lk):
    """Interfaces a Mac of this spec has, in `ifconfig` order."""
    names = []
    for n in ["lo", "en0", *ctx.tb_ifaces(), BRIDGE]:
        if n in lk:
            names.append(n)
    return names


def render_iface(ctx, name, lk, rt, verbose=False):
    """One interface as macOS ifconfig prints it; verbose (-v): its index after the mtu and its
    type after the status (the Thunderbolt ports "IP over Thunderbolt", as a public capture)."""
    link = lk[name]
    mname = mac_name(name)
    up = is_up(link)
    members = [m for m in rt.get("bridge_members", []) if m in lk] if name == BRIDGE else []
    bridge = lk.get(BRIDGE)
    nominal_member = name in rt.get("bridge_members", []) and bridge is not None
    if name == "lo":
        bits = 0x8049 if up else 0x8048
    else:
        bits = 0x8822 | ((0x1 | 0x40) if up else 0)
        if nominal_member and up:
            bits |= 0x100  # xnu sets a member promiscuous as it joins (bridge_ioctl_add)
    names = ",".join(n for b, n in FLAG_BITS if bits & b)
    mtu = 16384 if name == "lo" else link.get("mtu", 1500)
    scope = link.get("ifindex", 0)
    lines = [f"{mname}: flags={bits:x}<{names}> mtu {mtu}" + (f" index {scope}" if verbose else "")]
    if name == "lo":
        lines.append("\toptions=1203<RXCSUM,TXCSUM,TXSTATUS,SW_TIMESTAMP>")
    elif name == "en0":
        lines.append("\toptions=50b<RXCSUM,TXCSUM,VLAN_HWTAGGING,AV,CHANNEL_IO>")
    elif name == BRIDGE:
        lines.append("\toptions=63<RXCSUM,TXCSUM,TSO4,TSO6>")
    else:
        lines.append("\toptions=460<TSO4,TSO6,CHANNEL_IO>")
    if name != "lo":
        lines.append(f"\tether {link.get('address', '00:00:00:00:00:00')}")
    v4 = ipv4s(link)
    if name == "lo":
        for a in v4:
            lines.append(f"\tinet {a['local']} netmask 0x{_mask_hex(a['prefixlen'])}")
        lines.append("\tinet6 ::1 prefixlen 128 ")
        lines.append(f"\tinet6 fe80::1%lo0 prefixlen 64 scopeid 0x{scope:x} ")
    else:
        if has_carrier(link) and not (nominal_member and is_up(bridge)):
            secured = " secured" if name == "en0" else ""
            lines.append(f"\tinet6 {link_local(link['address'])}%{mname} prefixlen 64{secured} scopeid 0x{scope:x} ")
        for a in v4:
            line = f"\tinet {a['local']} netmask 0x{_mask_hex(a['prefixlen'])}"
            if a["prefixlen"] < 31:
                bcast = a.get("broadcast") or str(
                    ipaddress.IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False).broadcast_address
                )
                line += f" broadcast {bcast}"
            lines.append(line)
    if name == BRIDGE:
        lines += [
            "\tConfiguration:",
            "\t\tid 0:0:0:0:0:0 priority 0 hellotime 0 fwddelay 0",
            "\t\tmaxage 0 holdcnt 0 proto stp maxaddr 100 timeout 1200",
            "\t\troot id 0:0:0:0:0:0 priority 0 ifcost 0 port 0",
            "\t\tipfilter disabled flags 0x0",
        ]
        for m in members:
            lines.append(f"\tmember: {m} flags=3<LEARNING,DISCOVER>")
            lines.append(f"\t        ifmaxaddr 0 port {lk[m].get('ifindex', 0)} priority 0 path cost 0")
    lines.append("\tnd6 options=201<PERFORMNUD,DAD>")
    if name == "lo":
        return "\n".join(lines)
    if name == "en0":
        lines.append("\tmedia: autoselect (10GbaseT <full-duplex,flow-control>)")
    elif name == BRIDGE:
        lines.append("\tmedia: <unknown type>")
    else:
        lines.append("\tmedia: autoselect <full-duplex>")
    if name == BRIDGE:
        active = up and any(has_carrier(lk[m]) for m in members)
    else:
        active = has_carrier(link)
    lines.append(f"\tstatus: {'active' if active else 'inactive'}")
    if verbose:
        kind = TB_IFCONFIG_TYPE if mname in ctx.tb_ifaces() else IFCONFIG_TYPES.get(mname)
        if kind:
            lines.append(f"\ttype: {kind}")
        lines.append("\tscheduler: FQ_CODEL")
    return "\n".join(lines)


def _mask_hex(prefix):
    return f"{(0xFFFFFFFF << (32 - prefix)) & 0xFFFFFFFF:08x}"


IFCONFIG_WORDS = {
    "inet",
    "inet6",
    "netmask",
    "broadcast",
    "alias",
    "-alias",
    "delete",
    "remove",
    "add",
    "up",
    "down",
    "mtu",
    "addm",
    "deletem",
    "create",
    "destroy",
    "ether",
    "lladdr",
    "prefixlen",
}


def cmd_ifconfig(ctx, args):
    lk = links()
    rt = ctx.runtime()
    if not args or args[0] in ("-a", "-au", "-ad", "-u", "-d", "-v", "-av"):
        flags = args[0] if args else "-a"
        names = visible(ctx, lk)
        if "u" in flags:
            names = [n for n in names if is_up(lk[n])]
        if "d" in flags:
            names = [n for n in names if not is_up(lk[n])]
        out("\n".join(render_iface(ctx, n, lk, rt, verbose="v" in flags) for n in names))
        return 0
    if args[0] in ("-l", "-lu", "-ld"):
        names = visible(ctx, lk)
        if args[0] == "-lu":
            names = [n for n in names if is_up(lk[n])]
        if args[0] == "-ld":
            names = [n for n in names if not is_up(lk[n])]
        out(" ".join(mac_name(n) for n in names))
        return 0
    if args[0].startswith("-"):
        die(
            f"ifconfig: illegal option -- {args[0][1:2]}\n"
            "usage: ifconfig [-C] [-L] interface address_family [address [dest_address]]\n"
            "\t\t[parameters]",
            1,
        )
    mname, rest = args[0], args[1:]
    name = linux_name(mname)
    if rest == ["create"]:
        return _ifconfig_create(ctx, mname, lk)
    if name not in visible(ctx, lk):
        die(f"ifconfig: interface {mname} does not exist", 1)
    if not rest:
        out(render_iface(ctx, name, lk, rt))
        return 0
    if rest in (["inet"], ["-L"], ["inet", "-L"]):
        out(render_iface(ctx, name, lk, rt))
        return 0
    return _ifconfig_set(ctx, name, mname, rest, lk, rt)


def _ifconfig_create(ctx, mname, lk):
    if mname != BRIDGE:
        die("ifconfig: SIOCIFCREATE2: Invalid argument", 1)
    if not ctx.elevated():
        die("ifconfig: SIOCIFCREATE2: Operation not permitted", 1)
    if BRIDGE in lk:
        die("ifconfig: SIOCIFCREATE2: File exists", 1)
    fd = ctx.lock()
    try:
        create_bridge(ctx)
        rt = ctx.runtime()
        rt["bridge_members"] = []
        ctx.save_runtime(rt)
    finally:
        os.close(fd)
    return 0


def _ifconfig_set(ctx, name, mname, rest, lk, rt):
    ops = []
    addr = prefix = None
    mode = "set"  # set (replace the first address) | alias | delete
    i = 0
    while i < len(rest):
        w = rest[i]
        nxt = rest[i + 1] if i + 1 < len(rest) else None
        if w == "inet":
            i += 1
            continue
        if w == "inet6":
            die("ifconfig: inet6 is not emulated by the simulated Mac", 1)
        if w in ("netmask", "broadcast", "mtu", "addm", "deletem", "ether", "lladdr", "prefixlen"):
            if nxt is None:
                die(f"ifconfig: {w}: missing argument", 1)
            if w == "netmask":
                try:
                    prefix = mask_to_prefix(nxt)
                except ValueError:
                    die(f"ifconfig: {nxt}: bad value", 1)
            elif w == "mtu":
                if not nxt.isdigit():
                    die(f"ifconfig: {nxt}: bad value", 1)
                ops.append(("mtu", nxt))
            elif w in ("addm", "deletem"):
                ops.append((w, nxt))
            elif w in ("ether", "lladdr"):
                ops.append(("ether", nxt))
            i += 2
            continue
        if w in ("alias", "add"):
            mode = "alias"
        elif w in ("-alias", "delete", "remove"):
            mode = "delete"
        elif w in ("up", "down"):
            ops.append((w, None))
        elif w == "destroy":
            ops.append(("destroy", None))
        elif addr is None and w not in IFCONFIG_WORDS:
            try:
                if "/" in w:
                    net = ipaddress.IPv4Interface(w)
                    addr, prefix = str(net.ip), net.network.prefixlen
                else:
                    addr = str(ipaddress.IPv4Address(w))
            except ValueError:
                die(f"ifconfig: {w}: bad value", 1)
        else:
            die(f"ifconfig: {w}: bad value", 1)
        i += 1

    if not ctx.elevated():
        what = (
            {"delete": "SIOCDIFADDR"}.get(mode, "SIOCAIFADDR")
            if addr
            else {"addm": "BRDGADD", "deletem": "BRDGDEL"}.get(ops[0][0] if ops else "", "SIOCSIFFLAGS")
        )
        if what in ("BRDGADD", "BRDGDEL"):
            die(f"ifconfig: {what} {ops[0][1]}: Operation not permitted", 1)
        die(f"ifconfig: ioctl ({what}): Operation not permitted", 1)

    fd = ctx.lock()
    try:
        rt = ctx.runtime()
        lk = links()
        link = lk[name]
        if addr is not None:
            current = ipv4s(link)
            if mode == "delete":
                if not any(a["local"] == addr for a in current):
                    die("ifconfig: ioctl (SIOCDIFADDR): Can't assign requested address", 1)
                for a in current:
                    if a["local"] == addr:
                        ip("addr", "del", f"{addr}/{a['prefixlen']}", "dev", name)
            else:
                if prefix is None:
                    same = [a for a in current if a["local"] == addr]
                    prefix = same[0]["prefixlen"] if same else classful_prefix(addr)
                if mode == "set" and current:
                    # BSD ifconfig without `alias` replaces the interface's first address
                    first = current[0]
                    ip("addr", "del", f"{first['local']}/{first['prefixlen']}", "dev", name, check=False)
                ip("addr", "replace", f"{addr}/{prefix}", "brd", "+", "dev", name)
            forget_neighbours(name)
        for op, val in ops:
            if op == "mtu":
                ip("link", "set", "dev", name, "mtu", val)
            elif op == "ether":
                ip("link", "set", "dev", name, "address", val)
            elif op in ("addm", "deletem"):
                _bridge_member(ctx, name, op, val, rt)
            elif op == "destroy":
                if name != BRIDGE:
                    die("ifconfig: SIOCIFDESTROY: Invalid argument", 1)
                for m in rt.get("bridge_members", []):
                    release(m, links())
                ip("link", "del", "dev", BRIDGE)
                rt["bridge_members"] = []
                ctx.save_runtime(rt)
            elif op in ("up", "down"):
                ip("link", "set", "dev", name, op)
                if name == BRIDGE:
                    sync_bridge(ctx, rt=rt)
    finally:
        os.close(fd)
    return 0


def _bridge_member(ctx, name, op, member, rt):
    word = "BRDGADD" if op == "addm" else "BRDGDEL"
    if name != BRIDGE:
        die(f"ifconfig: {word} {member}: Operation not supported", 1)
    lk = links()
    if member not in lk or member in ("lo", BRIDGE):
        die(
            f"ifconfig: {word} {member}: No such file or directory"
            if member not in lk
            else f"ifconfig: {word} {member}: Invalid argument",
            1,
        )
    members = rt.setdefault("bridge_members", [])
    if op == "addm":
        if member in members:
            die(f"ifconfig: {word} {member}: File exists", 1)
        members.append(member)
    else:
        if member not in members:
            die(f"ifconfig: {word} {member}: Invalid argument", 1)
        members.remove(member)
    ctx.save_runtime(rt)
    sync_bridge(ctx, rt=rt, lk=lk)


# ---------------------------------------------------------------------------------------
# route
# ---------------------------------------------------------------------------------------

ROUTE_FLAGS_WITH_ARG = {
    "-netmask",
    "-ifscope",
    "-mtu",
    "-hopcount",
    "-expire",
    "-recvpipe",
    "-sendpipe",
    "-ssthresh",
    "-rtt",
    "-rttvar",
    "-genmask",
    "-ifp",
    "-ifa",
}
ROUTE_FLAGS = {
    "-net",
    "-host",
    "-interface",
    "-iface",
    "-link",
    "-static",
    "-nostatic",
    "-reject",
    "-blackhole",
    "-proto1",
    "-proto2",
    "-cloning",
    "-xresolve",
    "-inet",
    "-llinfo",
}


def _routes():
    return json_loads(ip("-j", "-4", "route", "show", "table", "main").stdout or "[]")


def _route_dst(r):
    d = r.get("dst", "")
    if d == "default":
        return ipaddress.IPv4Network("0.0.0.0/0")
    return ipaddress.IPv4Network(d if "/" in d else f"{d}/32", strict=False)


def _lookup(dest):
    best = None
    for r in _routes():
        net = _route_dst(r)
        if dest in net and (best is None or net.prefixlen > _route_dst(best).prefixlen):
            best = r
    return best


def cmd_route(ctx, args):
    opts = []
    while args and args[0].startswith("-") and args[0] not in ROUTE_FLAGS:
        opts.append(args[0])
        args = args[1:]
    if not args:
        die("usage: route [-dnqtv] command [[modifiers] args]", 64)
    verb, rest = args[0], args[1:]
    pos, flags, kv = [], set(), {}
    i = 0
    while i < len(rest):
        w = rest[i]
        if w in ROUTE_FLAGS_WITH_ARG:
            if i + 1 >= len(rest):
                die(f"route: {w}: missing argument", 64)
            kv[w] = rest[i + 1]
            i += 2
            continue
        if w in ROUTE_FLAGS:
            flags.add(w)
        else:
            pos.append(w)
        i += 1
    if verb == "get":
        return _route_get(ctx, pos)
    if verb not in ("add", "delete", "change", "flush"):
        die(f"route: {verb}: bad command", 64)
    if not ctx.elevated():
        die("route: must be root to alter routing table", 1)
    if verb == "flush":
        ip("-4", "route", "flush", "table", "main", check=False)
        return 0
    if not pos:
        die("route: no destination", 64)
    dest_text = pos[0]
    try:
        if dest_text == "default":
            net = ipaddress.IPv4Network("0.0.0.0/0")
        elif "/" in dest_text:
            net = ipaddress.IPv4Network(dest_text, strict=False)
        elif "-netmask" in kv:
            net = ipaddress.IPv4Network(f"{dest_text}/{mask_to_prefix(kv['-netmask'])}", strict=False)
        elif "-net" in flags:
            net = ipaddress.IPv4Network(f"{dest_text}/{classful_prefix(dest_text)}", strict=False)
        else:
            net = ipaddress.IPv4Network(f"{dest_text}/32")
    except ValueError:
        die(f"route: bad address: {dest_text}", 68)
    kind = "host" if net.prefixlen == 32 and dest_text != "default" else "net"
    target = "default" if dest_text == "default" else (str(net.network_address) if kind == "host" else str(net))
    gw = pos[1] if len(pos) > 1 else None
    dev = via = None
    if gw is not None:
        lk = links()
        if "-interface" in flags or "-iface" in flags:
            if linux_name(gw) in lk:
                dev = linux_name(gw)
            else:
                owner = next((n for n, link in lk.items() if any(a["local"] == gw for a in ipv4s(link))), None)
                if owner is None:
                    die(f"route: bad address: {gw}", 68)
                dev = owner
        elif linux_name(gw) in lk:
            dev = linux_name(gw)
        else:
            via = gw
    if "-ifscope" in kv and dev is None:
        dev = linux_name(kv["-ifscope"])
    label = f"{verb} {kind} {dest_text}"
    if verb == "add" or verb == "change":
        if gw is None:
            die(f"route: {verb}: gateway required", 64)
        label += f": gateway {gw}"
    spec = [target] + (["via", via] if via else []) + (["dev", dev] if dev else [])
    if verb == "add":
        r = ip("route", "add", *spec, check=False)
    elif verb == "delete":
        r = ip("route", "del", target, *(["dev", dev] if dev else []), check=False)
    else:
        exact = any(_route_dst(x) == net for x in _routes())
        if not exact and _lookup(net.network_address) is None:
            return _route_error(label, "not in table")
        r = ip("route", "replace", *spec, check=False)
    if r.returncode != 0:
        msg = r.stderr
        if "File exists" in msg:
            return _route_error(label, "File exists")
        if "No such process" in msg or "not in table" in msg:
            return _route_error(label, "not in table")
        if "unreachable" in msg.lower() or "Nexthop" in msg:
            return _route_error(label, "Network is unreachable")
        if "Cannot find device" in msg or "No such device" in msg:
            die(f"route: bad interface name: {gw}", 68)
        return _route_error(label, msg.strip().split(":")[-1].strip() or "Invalid argument")
    out(label)
    return 0


def _route_error(label, why):
    err(f"route: writing to routing socket: {why}")
    out(f"{label}: {why}")
    return 1


def _route_get(ctx, pos):
    if not pos:
        die("route: no destination", 64)
    dest_text = pos[0]
    lk = links()
    if dest_text == "default":
        best = next((r for r in _routes() if r.get("dst") == "default"), None)
        dest = None
    else:
        try:
            dest = ipaddress.IPv4Address(dest_text.split("/")[0])
        except ValueError:
            die(f"route: bad address: {dest_text}", 68)
        best = _lookup(dest)
    if best is None:
        die("route: writing to routing socket: not in table", 1)
    dev = best.get("dev")
    net = _route_dst(best)
    flags = ["UP"]
    lines = [f"   route to: {dest_text}"]
    if best.get("dst") == "default":
        lines += ["destination: default", "       mask: default"]
    elif net.prefixlen == 32:
        lines += [f"destination: {net.network_address}"]
    else:
        lines += [f"destination: {net.network_address}", f"       mask: {net.netmask}"]
    if best.get("gateway"):
        lines.append(f"    gateway: {best['gateway']}")
        flags.append("GATEWAY")
    if net.prefixlen == 32:
        flags.append("HOST")
    flags.append("DONE")
    if best.get("protocol") in ("static", "boot") or best.get("gateway") or net.prefixlen == 32:
        flags.append("STATIC")
    if best.get("dst") == "default":
        flags += ["PRCLONING", "GLOBAL"]
    elif net.prefixlen < 32:
        flags.append("CLONING")
    if dev:
        lines.append(f"  interface: {mac_name(dev)}")
    lines.append(f"      flags: <{','.join(flags)}>")
    mtu = lk.get(dev, {}).get("mtu", 1500)
    lines.append(" recvpipe  sendpipe  ssthresh  rtt,msec    rttvar  hopcount      mtu     expire")
    lines.append(f"       0         0         0         0         0         0 {mtu:>9}         0 ")
    out("\n".join(lines))
    return 0


def cmd_netstat(ctx, args):
    """`netstat -rn [-f inet]`: the IPv4 routing table as macOS prints it, from the
    namespace's main table (networks abbreviated as BSD does, host routes with H, the routes
    `route add` made static) and its ARP cache (entries scoped to their interface, UHLWIi)."""
    letters, family, i = set(), None, 0
    while i < len(args):
        a = args[i]
        if a == "-f" and i + 1 < len(args):
            family = args[i + 1]
            i += 2
            continue
        if not (a.startswith("-") and len(a) > 1 and set(a[1:]) <= set("rnaAlsW")):
            die(
                "usage: netstat [-AaLlnW] [-f address_family | -p protocol]\n"
                "       netstat -r [-n] [-f address_family]",
                64,
            )
        letters |= set(a[1:])
        i += 1
    if "r" not in letters or family not in (None, "inet"):
        die("netstat: only `netstat -rn [-f inet]` is simulated", 64)
    lk = links()
    index = {name: link.get("ifindex", 0) for name, link in lk.items()}
    rows, hosts = [], set()
    for r in _routes():
        dev = r.get("dev")
        net = _route_dst(r)
        if r.get("dst") == "default":
            rows.append(("default", r.get("gateway") or f"link#{index.get(dev, 0)}", "UGScg", dev))
            continue
        if net.prefixlen == 32:
            hosts.add(str(net.network_address))
            dest, flags = str(net.network_address), "UH" + ("G" if r.get("gateway") else "") + "S"
        else:
            octets = str(net.network_address).split(".")
            keep = max((net.prefixlen + 7) // 8, max((n + 1 for n, o in enumerate(octets) if o != "0"), default=1))
            dest = ".".join(octets[:keep]) + ("" if net.prefixlen == 8 * keep else f"/{net.prefixlen}")
            flags = "UGS" if r.get("gateway") else "UCS"
        rows.append((dest, r.get("gateway") or f"link#{index.get(dev, 0)}", flags, dev))
    neigh = json_loads(ip("-j", "-4", "neigh", "show").stdout or "[]")
    for n in neigh:
        if n.get("lladdr") and n.get("dst") not in hosts and not {"FAILED", "INCOMPLETE"} & set(n.get("state") or []):
            mac = ":".join(f"{int(x, 16):x}" for x in n["lladdr"].split(":"))
            rows.append((n["dst"], mac, "UHLWIi", n.get("dev")))
    rows.sort(key=lambda r: (r[0] != "default", [int(x) if x.isdigit() else 0 for x in r[0].split("/")[0].split(".")]))
    out("Routing tables\n\nInternet:")
    out(f"{'Destination':<19}{'Gateway':<19}{'Flags':<20}{'Netif':>6} Expire")
    for dest, gw, flags, dev in rows:
        out(f"{dest:<19}{gw:<19}{flags:<20}{mac_name(dev or '?'):>6}" + ("   1200" if "W" in flags else ""))
    return 0


# ---------------------------------------------------------------------------------------
# ipconfig, sw_vers, sysctl
# ---------------------------------------------------------------------------------------


def cmd_ipconfig(ctx, args):
    if not args:
        die(
            "usage: ipconfig <command> <args>\nwhere <command> is one of ifcount, getifaddr, "
            "getoption, getpacket, getsummary, set",
            64,
        )
    verb = args[0]
    lk = links()
    if verb == "ifcount":
        out(str(len([n for n in visible(ctx, lk) if n != "lo"])))
        return 0
    if verb == "getifaddr" and len(args) == 2:
        link = lk.get(linux_name(args[1]))
        if link is None or args[1] not in [mac_name(n) for n in visible(ctx, lk)]:
            return 1
        addrs = ipv4s(link)
        if not addrs:
            return 1
        out(addrs[0]["local"])
        return 0
    if verb == "getoption" and len(args) == 3:
        link = lk.get(linux_name(args[1]))
        addrs = ipv4s(link) if link else []
        if args[2] == "subnet_mask" and addrs:
            out(prefix_to_mask(addrs[0]["prefixlen"]))
            return 0
        if args[2] == "router":
            r = next((r for r in _routes() if r.get("dst") == "default" and r.get("dev") == linux_name(args[1])), None)
            if r:
                out(r["gateway"])
                return 0
        return 1
    die(f"ipconfig: {verb}: not emulated by the simulated Mac", 64)


def cmd_sw_vers(ctx, args):
    cfg = ctx.cfg
    values = {"productname": "macOS", "productversion": cfg["macos"], "buildversion": cfg["build"]}
    if not args:
        out(f"ProductName:\t\tmacOS\nProductVersion:\t\t{cfg['macos']}\nBuildVersion:\t\t{cfg['build']}")
        return 0
    key = args[0].lstrip("-").lower()
    if key in values and len(args) == 1:
        out(values[key])
        return 0
    if key == "productversionextra":
        return 0
    die("usage: sw_vers [-productName|-productVersion|-productVersionExtra|-buildVersion]", 1)


# The kernel's writable values since boot (`sysctl name=value`): <host>/kernel.json, emptied at
# every boot (a sysctl write lasts until the next restart). Only iogpu.wired_limit_mb is
# writable here; the spec's (or set_host's) `wired_limit_mb` is its value at boot.
KERNEL_STATE = "kernel.json"
WIRED_OID = "iogpu.wired_limit_mb"


def kernel_values(ctx):
    return _read_json(ctx.path(KERNEL_STATE), {})


def sysctl_values(ctx):
    cfg = ctx.cfg
    major, minor, _ = version_tuple(cfg["macos"])
    darwin = f"{major - 1 if major >= 26 else major + 9}.{minor}.0"
    mem = int(cfg["memory_gb"]) * (1 << 30)
    values = {
        "hw.memsize": str(mem),
        "hw.memsize_usable": str(mem - (1 << 30)),
        "hw.model": cfg["model_id"],
        "hw.ncpu": str(cfg["ncpu"]),
        "hw.physicalcpu": str(cfg["ncpu"]),
        "hw.logicalcpu": str(cfg["ncpu"]),
        "hw.activecpu": str(cfg["ncpu"]),
        "hw.pagesize": "16384",
        "hw.optional.arm64": "1",
        "hw.machine": "arm64",
        "kern.hostname": ctx.host,
        "kern.ostype": "Darwin",
        "kern.osrelease": darwin,
        "kern.osproductversion": cfg["macos"],
        "kern.osversion": cfg["build"],
        "machdep.cpu.brand_string": cfg.get("chip", "Apple M3 Ultra"),
        # 0: macOS decides the GPU's share of memory (the value a Mac boots with)
        WIRED_OID: str(int(cfg.get("wired_limit_mb", 0))),
    }
    values.update({k: str(v) for k, v in kernel_values(ctx).items()})
    return values


def _sysctl_set(ctx, name, value, bare, values):
    """`sysctl name=value` as FreeBSD's sysctl.c (macOS system_cmds) does it: `name: old -> new`
    (`-n`: the new value only), a refusal as warn(3) text on stderr and exit 1."""
    if name != WIRED_OID:
        die(f"sysctl: oid '{name}' is read only", 1)
    number = _strtol(value) if value.strip() and value.strip().lstrip("-").isdigit() else None
    if number is None:
        die(f"sysctl: {name}: illegal value: {value}", 1)
    if not ctx.elevated():
        die(f"sysctl: {name}: Operation not permitted", 1)
    if number < 0 or number > int(values["hw.memsize"]) // (1 << 20):
        die(f"sysctl: {name}: Invalid argument", 1)
    fd = ctx.lock()
    try:
        kernel = kernel_values(ctx)
        old = kernel.get(name, values[name])
        kernel[name] = number
        _write_json(ctx.path(KERNEL_STATE), kernel)
    finally:
        os.close(fd)
    out(str(number) if bare else f"{name}: {old} -> {number}")


def cmd_sysctl(ctx, args):
    values = sysctl_values(ctx)
    bare = False
    names = []
    for a in args:
        if a.startswith("-") and len(a) > 1:
            if "n" in a:
                bare = True
            if "a" in a:
                names = sorted(values)
            continue  # -w: accepted, `name=value` is what writes
        names.append(a)
    if not names:
        die("usage: sysctl [-bdehiNnoqx] name[=value] ...\n       sysctl [-bdehNnoqx] -a", 1)
    rc = 0
    for n in names:
        if "=" in n:
            name, _, value = n.partition("=")
            _sysctl_set(ctx, name, value, bare, values)
            continue
        matches = [k for k in values if k == n or k.startswith(n + ".")]
        if not matches:
            err(f"sysctl: unknown oid '{n}'")
            rc = 1
            continue
        for k in matches:
            out(values[k] if bare else f"{k}: {values[k]}")
    return rc


# ---------------------------------------------------------------------------------------
# launchctl: LaunchDaemons in the system domain
# ---------------------------------------------------------------------------------------
# launchd loads every plist of /Library/LaunchDaemons at boot and runs a RunAtLoad job's
# program then; `launchctl bootstrap system <plist>` loads one now (and runs it), `bootout`
# unloads it, `print system/<label>` shows it. A plist launchd refuses (not root-owned,
# group or world writable: `man launchctl`; not a property list; no Label or program) is not
# loaded: `Bootstrap failed: 5: Input/output error` (public captures of launchctl on macOS
# 13-15). The jobs loaded since boot are <host>/launchd.json. A job whose program is a
# simulated macOS command (/usr/sbin/sysctl, ...) runs once, at load. Any other program runs
# as launchd runs a daemon (launchd.plist(5)): a process of its own that stands in for launchd
# for that job (`macos.py launchd-job`, in the Mac's namespaces, so it dies with the Mac)
# starts the program in a process group of its own, with the plist's environment, working
# directory, umask and log files; restarts it as KeepAlive says, no sooner than
# ThrottleInterval after its last start; and at bootout sends it SIGTERM, then SIGKILL after
# ExitTimeOut, to its whole process group (AbandonProcessGroup unset).

LAUNCHD_STATE = "launchd.json"
LAUNCH_DAEMONS = "/Library/LaunchDaemons"
# Live setting `local_network_denied_to_daemons`: macOS Local Network privacy refusing what
# launchd starts, as reported for macOS 26/27 (TN3179 says daemons are exempt: off by
# default). The programs the simulated launchd starts then get this directory on PYTHONPATH,
# whose sitecustomize.py makes their Python's connects to non-loopback addresses fail with
# EHOSTUNREACH. Read at each start of a job's program (a restart sees the setting as it is then).
LOCAL_NETWORK_DENIED = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "local_network")
LAUNCHCTL_IO = "Bootstrap failed: 5: Input/output error"
LAUNCHCTL_AS_ROOT = "Try re-running the command as root for richer errors."
SYSTEM_DIRS = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")


def _mac_file(ctx, path):
    """A path of the Mac's /Library in the state directory (the same file the Mac sees there)."""
    if path.startswith("/Library/"):
        return os.path.join(ctx.hostdir, path[1:])
    return path


def read_job(ctx, path):
    """(job dict, None) for a plist launchd would load, or (None, why not)."""
    import plistlib  # only launchctl and boot pay for it

    try:
        st = os.stat(_mac_file(ctx, path))
        with open(_mac_file(ctx, path), "rb") as f:
            data = plistlib.load(f)
    except FileNotFoundError:
        return None, "missing"
    except Exception as exc:  # noqa: BLE001 - plistlib raises several types for bad input
        return None, f"not a property list ({exc.__class__.__name__})"
    if st.st_uid != 0 or st.st_gid != 0 or st.st_mode & 0o022:
        return None, "bad ownership/permissions"
    if not isinstance(data, dict) or not isinstance(data.get("Label"), str) or not data["Label"]:
        return None, "no Label"
    program = data.get("ProgramArguments")
    if not (isinstance(program, list) and program and all(isinstance(a, str) for a in program)):
        program = [data["Program"]] if isinstance(data.get("Program"), str) else None
    if not program:
        return None, "no Program or ProgramArguments"
    return {
        "label": data["Label"],
        "path": path,
        "program": data.get("Program") or program[0],
        "arguments": program,
        "run_at_load": data.get("RunAtLoad") is True,
        "runs": 0,
        "last_exit_code": "(never exited)",
    }, None


def launchd_jobs(ctx):
    return _read_json(ctx.path(LAUNCHD_STATE), {})


def _simulated_command(program):
    return os.path.dirname(program) in SYSTEM_DIRS and os.path.basename(program) in COMMANDS


def _run_job(ctx, job):
    """Run a RunAtLoad job's program as launchd does (as root): a simulated command once, now;
    any other program by a job runner of its own (launchd_job), detached."""
    program = job["program"]
    name = os.path.basename(program)
    if not _simulated_command(program):
        _spawn_job_runner(ctx, job["label"])
        return None  # the runner keeps the job's entry from now on
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin:/usr/sbin:/sbin"),
        "USER": "root",
        "LOGNAME": "root",
        "HOME": os.path.join(ctx.mountpoint, "root"),
    }
    try:
        r = subprocess.run(
            [os.path.join(ctx.hostdir, "bin", name), *job["arguments"][1:]],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
        )
        code = r.returncode
    except subprocess.TimeoutExpired:
        code = -9
    job.update(runs=job["runs"] + 1, last_exit_code=code)
    return job


def launchd_load(ctx, job):
    fd = ctx.lock()
    try:
        jobs = launchd_jobs(ctx)
        jobs[job["label"]] = job
        _write_json(ctx.path(LAUNCHD_STATE), jobs)
    finally:
        os.close(fd)
    if job["run_at_load"]:
        job = _run_job(ctx, job)
        if job is None:
            return
        fd = ctx.lock()
        try:
            jobs = launchd_jobs(ctx)
            if job["label"] in jobs:
                jobs[job["label"]] = job
                _write_json(ctx.path(LAUNCHD_STATE), jobs)
        finally:
            os.close(fd)


def _spawn_job_runner(ctx, label):
    """Start `macos.py launchd-job STATE HOST LABEL` detached (double fork, a session of its
    own, no inherited descriptors): it outlives the launchctl (or boot) that started it."""
    argv = [sys.executable, "-S", os.path.realpath(__file__), "launchd-job", ctx.state, ctx.host, label]
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, 1 << 16)
        os.execv(argv[0], argv)
    finally:
        os._exit(127)


def _job_update(ctx, label, **changes):
    """Change a loaded job's entry in launchd.json; False when it is not loaded (booted out)."""
    fd = ctx.lock()
    try:
        jobs = launchd_jobs(ctx)
        if label not in jobs:
            return False
        jobs[label].update(changes)
        _write_json(ctx.path(LAUNCHD_STATE), jobs)
        return True
    finally:
        os.close(fd)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def launchd_job(ctx, label):
    """launchd, for one daemon: run its program, keep it as KeepAlive says, end it at bootout.
    Runs until the job is booted out (SIGTERM from launchctl) or its program ended for good."""
    import plistlib
    import signal
    import subprocess

    job = launchd_jobs(ctx).get(label)
    if job is None:
        return 0
    with open(_mac_file(ctx, job["path"]), "rb") as f:
        plist = plistlib.load(f)

    def job_env():
        env = {"PATH": os.path.join(ctx.hostdir, "bin") + ":/usr/bin:/bin:/usr/sbin:/sbin"}
        env.update({str(k): str(v) for k, v in (plist.get("EnvironmentVariables") or {}).items()})
        if Ctx(ctx.state, ctx.host).cfg.get("local_network_denied_to_daemons"):
            env["PYTHONPATH"] = os.pathsep.join(p for p in (LOCAL_NETWORK_DENIED, env.get("PYTHONPATH")) if p)
        return env

    keep = plist.get("KeepAlive", False)
    throttle = float(plist.get("ThrottleInterval", 10))
    exit_timeout = float(plist.get("ExitTimeOut", 20))
    umask = plist.get("Umask")
    state = {"stopping": False, "child": None}

    def group_signal(sig):
        child = state["child"]
        if child is not None:
            try:
                os.killpg(child.pid, sig)
            except OSError:
                pass

    def bootout(signum, frame):
        state["stopping"] = True
        group_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, bootout)
    if not _job_update(ctx, label, runner_pid=os.getpid()):
        return 0

    def log(key):
        path = plist.get(key)
        return open(path, "ab") if path else subprocess.DEVNULL

    while not state["stopping"]:
        started = time.monotonic()
        out_f, err_f = log("StandardOutPath"), log("StandardErrorPath")
        try:
            child = subprocess.Popen(
                job["arguments"],
                executable=job["program"],
                env=job_env(),
                cwd=plist.get("WorkingDirectory") or "/",
                stdin=subprocess.DEVNULL,
                stdout=out_f,
                stderr=err_f,
                start_new_session=True,
                preexec_fn=(lambda: os.umask(int(umask))) if umask is not None else None,
            )
        except OSError as exc:
            _job_update(ctx, label, runs=job["runs"] + 1, last_exit_code=f"(could not start: {exc.strerror})")
            break
        finally:
            for f in (out_f, err_f):
                if f is not subprocess.DEVNULL:
                    f.close()
        state["child"] = child
        job["runs"] += 1
        _job_update(ctx, label, pid=child.pid, state="running", runs=job["runs"])
        deadline = None
        while True:
            try:
                rc = child.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            if state["stopping"]:
                deadline = deadline or time.monotonic() + exit_timeout
                if time.monotonic() > deadline:
                    group_signal(signal.SIGKILL)
        # what is left of the job's process group goes with it
        group_signal(signal.SIGKILL)
        state["child"] = None
        _job_update(ctx, label, pid=None, state="not running", last_exit_code=rc)
        if state["stopping"]:
            break
        again = keep is True or (isinstance(keep, dict) and keep.get("SuccessfulExit") is False and rc != 0)
        if not again:
            break
        time.sleep(max(0.0, throttle - (time.monotonic() - started)))
    _job_update(ctx, label, runner_pid=None)
    return 0


def launchd_boot(ctx):
    """At boot: every LaunchDaemon launchd accepts is loaded, its RunAtLoad program run."""
    _write_json(ctx.path(LAUNCHD_STATE), {})
    folder = _mac_file(ctx, LAUNCH_DAEMONS)
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.endswith(".plist"):
            job, _why = read_job(ctx, f"{LAUNCH_DAEMONS}/{name}")
            if job and job["label"] not in launchd_jobs(ctx):
                launchd_load(ctx, job)


def _print_job(job):
    args = "".join(f"\t\t{a}\n" for a in job["arguments"])
    running = job.get("state") == "running" and job.get("pid")
    return (
        f"system/{job['label']} = {{\n\tactive count = {1 if running else 0}\n\tpath = {job['path']}\n"
        f"\ttype = LaunchDaemon\n\tstate = {'running' if running else 'not running'}\n\n"
        f"\tprogram = {job['program']}\n\targuments = {{\n{args}\t}}\n\n"
        + (f"\tpid = {job['pid']}\n" if running else "")
        + f"\truns = {job['runs']}\n\tlast exit code = {job['last_exit_code']}\n}}"
    )


def cmd_launchctl(ctx, args):
    verb, rest = (args[0], args[1:]) if args else ("", [])
    if verb == "print" and len(rest) == 1 and rest[0].startswith("system/"):
        label = rest[0][len("system/") :]
        job = launchd_jobs(ctx).get(label)
        if job is None:
            die(f'Could not find service "{label}" in domain for system', 113)
        out(_print_job(job))
        return 0
    if verb == "bootstrap" and len(rest) >= 2 and rest[0] == "system":
        if not ctx.elevated():
            die(f"{LAUNCHCTL_IO}\n{LAUNCHCTL_AS_ROOT}", 5)
        for path in rest[1:]:
            job, why = read_job(ctx, path)
            if why == "missing":
                die("Bootstrap failed: 2: No such file or directory", 2)
            if job is None or job["label"] in launchd_jobs(ctx):  # refused, or loaded already
                die(LAUNCHCTL_IO, 5)
            launchd_load(ctx, job)
        return 0
    if verb == "bootout" and rest:
        if not ctx.elevated():
            die(f"Boot-out failed: 5: Input/output error\n{LAUNCHCTL_AS_ROOT}", 5)
        if rest[0].startswith("system/") and len(rest) == 1:
            label = rest[0][len("system/") :]
        elif rest[0] == "system" and len(rest) == 2:
            job, _why = read_job(ctx, rest[1])
            label = job["label"] if job else None
        else:
            die(f"launchctl: bootout {' '.join(rest)}: not emulated by the simulated Mac", 64)
        fd = ctx.lock()
        try:
            jobs = launchd_jobs(ctx)
            if label not in jobs:
                die("Boot-out failed: 3: No such process", 3)
            runner = jobs[label].get("runner_pid")
            del jobs[label]
            _write_json(ctx.path(LAUNCHD_STATE), jobs)
        finally:
            os.close(fd)
        if runner:
            # launchd ends the job (SIGTERM, then SIGKILL after its ExitTimeOut) before bootout returns
            import signal

            try:
                os.kill(runner, signal.SIGTERM)
            except OSError:
                pass
            until = time.monotonic() + 120
            while _alive(runner) and time.monotonic() < until:
                time.sleep(0.05)
        return 0
    die(f"launchctl: {' '.join(args) or '(no verb)'}: not emulated by the simulated Mac", 64)


# ---------------------------------------------------------------------------------------
# pmset and defaults: power settings, automatic macOS updates
# ---------------------------------------------------------------------------------------
# pmset follows Apple's source (apple-oss-distributions/PowerManagement, pmset/pmset.m):
# parseArgs, checkAndSetIntValue, show_custom_pm_settings, show_pm_settings_dict,
# checkSettingConsistency, usage. Which settings a Mac prints, their order and macOS's
# defaults follow real captures (tests/fixtures/pmset_g_custom_*.txt): a desktop has one
# source, `AC Power`, with autorestart; a laptop `Battery Power` then `AC Power`, without it.
# The stored settings are the Mac's pmset.json (com.apple.PowerManagement.plist on a Mac):
# they survive a reboot; reset() goes back to the spec's.

PMSET_DESKTOP_AC = [
    ("Sleep On Power Button", 1),
    ("autorestartatconnect", 0),
    ("lowpowermode", 0),
    ("standby", 0),
    ("ttyskeepawake", 1),
    ("powernap", 1),
    ("displaysleep", 10),
    ("womp", 1),
    ("networkoversleep", 0),
    ("sleep", 1),
    ("tcpkeepalive", 1),
    ("autorestart", 0),
    ("disksleep", 10),
]
PMSET_LAPTOP_BATTERY = [
    ("Sleep On Power Button", 1),
    ("lowpowermode", 0),
    ("standby", 1),
    ("ttyskeepawake", 1),
    ("hibernatemode", 3),
    ("powernap", 1),
    ("hibernatefile", "/var/vm/sleepimage"),
    ("displaysleep", 2),
    ("womp", 0),
    ("networkoversleep", 0),
    ("sleep", 1),
    ("lessbright", 1),
    ("tcpkeepalive", 1),
    ("disksleep", 10),
]
PMSET_LAPTOP_AC = [
    ("Sleep On Power Button", 1),
    ("lowpowermode", 0),
    ("standby", 1),
    ("ttyskeepawake", 1),
    ("hibernatemode", 3),
    ("powernap", 1),
    ("hibernatefile", "/var/vm/sleepimage"),
    ("displaysleep", 10),
    ("womp", 1),
    ("networkoversleep", 0),
    ("sleep", 1),
    ("tcpkeepalive", 1),
    ("disksleep", 10),
]
# setting argument -> (stored key, on/off): an on/off setting stores any non-zero number as 1
PMSET_SETTINGS = {
    "displaysleep": ("displaysleep", False),
    "dim": ("displaysleep", False),
    "disksleep": ("disksleep", False),
    "spindown": ("disksleep", False),
    "sleep": ("sleep", False),
    "womp": ("womp", True),
    "ring": ("ring", True),
    "autorestart": ("autorestart", True),
    "acwake": ("acwake", True),
    "lidwake": ("lidwake", True),
    "lessbright": ("lessbright", True),
    "halfdim": ("halfdim", True),
    "ttyskeepawake": ("ttyskeepawake", True),
    "tcpkeepalive": ("tcpkeepalive", True),
    "powernap": ("powernap", False),
    "standby": ("standby", False),
    "hibernatemode": ("hibernatemode", False),
    "proximitywake": ("proximitywake", False),
}
# real pmset verbs and settings the simulated Mac does not model (it says so, exit 64)
PMSET_NOT_EMULATED = {
    "touch",
    "noidle",
    "sleepnow",
    "displaysleepnow",
    "boot",
    "unboot",
    "schedule",
    "sched",
    "repeat",
    "relative",
    "restoredefaults",
    "disablesleep",
    "destroyfvkeyonstandby",
    "haltlevel",
    "haltafter",
    "haltremain",
    "hibernatefile",
    "hibernatefreeratio",
    "hibernatefreetime",
    "gpuswitch",
    "networkoversleep",
    "standbydelay",
    "standbydelayhigh",
    "standbydelaylow",
    "highstandbythreshold",
    "darkwakes",
    "autopoweroff",
    "autopoweroffdelay",
    "lowpowermode",
    "powermode",
    "sms",
    "motionsensor",
    "debugflags",
    "btinterval",
    "dwlinterval",
    "bookmark",
    "clamshell",
    "acattach",
    "desktopmode",
}
PMSET_GETTERS_NOT_EMULATED = {
    "cap",
    "sched",
    "ups",
    "ac",
    "adapter",
    "batt",
    "ps",
    "pslog",
    "accps",
    "accpslog",
    "rawbatt",
    "rawlog",
    "therm",
    "thermlog",
    "assertions",
    "assertionslog",
    "sysload",
    "sysloadlog",
    "useractivitylog",
    "useractivity",
    "log",
    "listen",
    "history",
    "historydetailed",
    "hidnull",
    "userclients",
    "uuid",
    "uuidlog",
    "everything",
    "getters",
    "powerstate",
    "powerstatelog",
    "stats",
    "systemstate",
    "sleepblockers",
    "fba",
}
PMSET_USAGE = "Usage: pmset <options>\nSee pmset(1) for details: 'man pmset'"


def pmset_sources(ctx):
    """The stored settings {source: {setting: value}} in pmset's order: the Mac's pmset.json,
    else macOS's defaults for its kind (spec `battery`) with the spec's `pmset` (AC) over them."""
    stored = _read_json(ctx.path("pmset.json"), None)
    if stored is not None:
        return {source: dict(values) for source, values in stored}
    if ctx.cfg.get("battery"):
        sources = {"Battery Power": dict(PMSET_LAPTOP_BATTERY), "AC Power": dict(PMSET_LAPTOP_AC)}
    else:
        sources = {"AC Power": dict(PMSET_DESKTOP_AC)}
    for key, value in (ctx.cfg.get("pmset") or {}).items():
        if key in sources["AC Power"]:
            sources["AC Power"][key] = value
    return sources


def save_pmset(ctx, sources):
    # a list of pairs: the order pmset prints them in is kept
    _write_json(ctx.path("pmset.json"), [[source, list(values.items())] for source, values in sources.items()])


def _pmset_lines(values):
    return "".join(f" {key:<20} {value}\n" for key, value in values.items())


def _strtol(text):
    """C strtol(text, &end, 0) that must consume the whole string: an int, or None."""
    s = text.lstrip(" \t\n\v\f\r")
    sign = -1 if s.startswith("-") else 1
    if s[:1] in "+-" and s:
        s = s[1:]
    try:
        if s[:2].lower() == "0x" and len(s) > 2:
            return sign * int(s[2:], 16)
        if s.startswith("0") and len(s) > 1:
            return sign * int(s[1:], 8)
        return sign * int(s) if s else 0  # strtol("") is 0 with nothing left over
    except ValueError:
        return None


def _pmset_bad(msg=None):
    if msg:
        out(msg)
    out(PMSET_USAGE)
    raise ShimExit(1)


def cmd_pmset(ctx, args):
    if not args:
        _pmset_bad()
    args = [a.lower() for a in args]  # pmset lowercases every argument in place
    fd = ctx.lock()
    try:
        sources = pmset_sources(ctx)
        present = list(sources)
        apply = list(present)  # no flag: every source the Mac has
        changed = False
        i = 0
        while i < len(args):
            a = args[i]
            if a.startswith("-") and a[1:2] != "1":
                flag = a[1:2]
                if flag == "g":
                    if a != "-g":
                        _pmset_bad()
                    what = args[i + 1] if i + 1 < len(args) else ""
                    what = {"": "live", "disk": "custom"}.get(what, what)
                    if what == "custom":
                        out("".join(f"{source}:\n{_pmset_lines(values)}" for source, values in sources.items()))
                    elif what == "live":
                        # the source in use: AC (a simulated laptop is always plugged in)
                        out(
                            "System-wide power settings:\n SleepDisabled\t\t0\nCurrently in use:\n"
                            + _pmset_lines(sources["AC Power"])
                        )
                    elif what in PMSET_GETTERS_NOT_EMULATED:
                        die(f"pmset: -g {what}: not emulated by the simulated Mac", 64)
                    else:
                        _pmset_bad(f"Error: unhandled argument {what}")
                    return 0
                wanted = {"a": present, "b": ["Battery Power"], "c": ["AC Power"], "u": ["UPS Power"]}.get(flag)
                if wanted is None:
                    _pmset_bad()
                apply = [s for s in wanted if s in present]  # -b on a desktop applies to nothing
                i += 1
                continue
            if a in PMSET_SETTINGS:
                key, on_off = PMSET_SETTINGS[a]
                value = _strtol(args[i + 1]) if i + 1 < len(args) else None
                if value is None or value < 0:
                    _pmset_bad()
                if on_off:
                    value = 1 if value else 0
                for source in apply:
                    # a setting this Mac does not support for that source is written and then
                    # dropped by powerd: -g custom never shows it (autorestart on a laptop)
                    if key in sources[source]:
                        sources[source][key] = value
                changed = True
                i += 2
                continue
            if a in PMSET_NOT_EMULATED:
                die(f"pmset: {a}: not emulated by the simulated Mac", 64)
            _pmset_bad()
        if changed:
            if not ctx.elevated():
                out(f"'{sys.argv[0]}' must be run as root...")
                raise ShimExit(1)
            save_pmset(ctx, sources)
            _pmset_consistency(sources)
        return 0
    finally:
        os.close(fd)


def _pmset_consistency(sources):
    """checkSettingConsistency: warn (stderr) about idle timers the kernel will not honour."""
    for source, values in sources.items():
        try:
            sleep, dim, disk = (int(values[k]) for k in ("sleep", "displaysleep", "disksleep"))
        except (KeyError, TypeError, ValueError):
            continue
        if sleep == 0:
            continue
        display_bad = sleep != 1 and (dim > sleep or dim == 0)
        if display_bad or disk == 0:
            err(f'Warning: Idle sleep timings for "{source}" may not behave as expected.')
            if display_bad:
                err("- Display sleep should have a lower timeout than system sleep.")
            if disk == 0:
                err("- Disk sleep should be non-zero whenever system sleep is non-zero.")


SOFTWARE_UPDATE_DOMAIN = "/Library/Preferences/com.apple.SoftwareUpdate"


def software_update_prefs(ctx):
    stored = _read_json(ctx.path("software_update.json"), None)
    return dict(ctx.cfg.get("software_update") or {}) if stored is None else stored


def _defaults_domain(name):
    return name[: -len(".plist")] if name.endswith(".plist") else name


def _defaults_value(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def cmd_defaults(ctx, args):
    """`defaults read|write /Library/Preferences/com.apple.SoftwareUpdate [key [value]]`: the
    Mac's SoftwareUpdate preferences (software_update.json, from the spec's `software_update`)."""
    if not args or args[0] not in ("read", "write"):
        die(
            "defaults: only `defaults read|write /Library/Preferences/com.apple.SoftwareUpdate ...` is "
            "emulated by the simulated Mac",
            64,
        )
    verb, rest = args[0], args[1:]
    if not rest or _defaults_domain(rest[0]) != SOFTWARE_UPDATE_DOMAIN:
        die(
            f"defaults: {verb} {' '.join(rest[:1])}: only the domain {SOFTWARE_UPDATE_DOMAIN} is emulated by "
            f"the simulated Mac",
            64,
        )
    domain = rest[0]
    stamp = time.strftime("%Y-%m-%d %H:%M:%S") + f".000 defaults[{os.getpid()}:{os.getpid() + 1000}] "
    prefs = software_update_prefs(ctx)
    if verb == "read":
        if len(rest) == 1:
            if not prefs:
                die(f"{stamp}\nDomain {domain} does not exist", 1)
            out("{\n" + "".join(f"    {k} = {_defaults_value(v)};\n" for k, v in sorted(prefs.items())) + "}")
            return 0
        if len(rest) != 2:
            die("defaults: read takes a domain and at most one key", 64)
        if rest[1] not in prefs:
            die(f"{stamp}\nThe domain/default pair of ({domain}, {rest[1]}) does not exist", 1)
        out(_defaults_value(prefs[rest[1]]))
        return 0
    # write: key then -bool/-int/-integer value, or a plain (string) value
    if len(rest) == 3:
        value = rest[2]
    elif (
        len(rest) == 4
        and rest[2] in ("-bool", "-boolean")
        and rest[3].lower() in ("true", "yes", "1", "false", "no", "0")
    ):
        value = rest[3].lower() in ("true", "yes", "1")
    elif len(rest) == 4 and rest[2] in ("-int", "-integer") and _strtol(rest[3]) is not None:
        value = _strtol(rest[3])
    else:
        die("defaults: the simulated Mac emulates `defaults write DOMAIN KEY [-bool|-int] VALUE` only", 64)
    if not ctx.elevated():
        die(f"Could not write domain {domain}; exiting", 1)
    fd = ctx.lock()
    try:
        prefs = software_update_prefs(ctx)
        prefs[rest[1]] = value
        _write_json(ctx.path("software_update.json"), prefs)
    finally:
        os.close(fd)
    return 0


# ---------------------------------------------------------------------------------------
# socketfilterfw: the application firewall (ALF)
# ---------------------------------------------------------------------------------------

# macOS's defaults on a fresh install: the firewall off, signed software allowed (both kinds).
FIREWALL_DEFAULTS = {
    "enabled": False,
    "block_all": False,
    "stealth": False,
    "allow_signed": True,
    "allow_signed_downloaded": True,
    "apps": {},
}
SOCKETFILTERFW_USAGE = (
    "usage: /usr/libexec/ApplicationFirewall/socketfilterfw [-h] [--getglobalstate] [--setglobalstate on | off] "
    "[--getblockall] [--setblockall on | off] [--listapps] [--getappblocked <path>] [--blockapp <path>] "
    "[--unblockapp <path>] [--add <path>] [--remove <path>] [--getallowsigned] [--setallowsigned on | off] "
    "[--setallowsignedapp on | off] [--getstealthmode] [--setstealthmode on | off] [--getloggingmode] "
    "[--setloggingmode on | off] [--getloggingopt] [--setloggingopt throttled | brief | detail]"
)


def firewall_state(ctx):
    """The Mac's ALF settings: firewall.json once a setter changed them, else the spec's or the
    live `firewall` override over macOS's defaults."""
    stored = _read_json(ctx.path("firewall.json"), None)
    if stored is not None:
        return stored
    state = dict(FIREWALL_DEFAULTS)
    state.update(ctx.cfg.get("firewall") or {})
    state["apps"] = dict(state.get("apps") or {})
    return state


def cmd_socketfilterfw(ctx, args):
    """/usr/libexec/ApplicationFirewall/socketfilterfw: the getters answer from the Mac's state,
    one line each in argument order (texts from public captures, macOS 14 to 26.3); a setter
    without root prints `Must be root to change settings.` and exits 255, as on macOS. The shim
    only answers: the traffic it describes is filtered by the harness (SimCluster.block_ports)."""
    if not args or args[0] in ("-h", "--help"):
        out(SOCKETFILTERFW_USAGE)
        return 0 if args else 1
    state = firewall_state(ctx)
    on_off = {"on": True, "off": False}
    i, changed, lines = 0, False, []
    while i < len(args):
        a = args[i]
        takes = a in (
            "--setglobalstate",
            "--setblockall",
            "--setstealthmode",
            "--setallowsigned",
            "--setallowsignedapp",
            "--setloggingmode",
            "--getappblocked",
            "--blockapp",
            "--unblockapp",
            "--add",
            "--remove",
        )
        value = args[i + 1] if takes and i + 1 < len(args) else None
        if takes and value is None:
            out(SOCKETFILTERFW_USAGE)
            return 1
        if a.startswith("--set") or a in ("--blockapp", "--unblockapp", "--add", "--remove"):
            if not ctx.elevated():
                out("Must be root to change settings.")
                return 255
        if a == "--getglobalstate":
            lines.append(
                "Firewall is enabled. (State = 1)" if state["enabled"] else "Firewall is disabled. (State = 0)"
            )
        elif a == "--getblockall":
            lines.append("Firewall has block all state set to %s." % ("enabled" if state["block_all"] else "disabled"))
        elif a == "--getstealthmode":
            lines.append("Firewall stealth mode is %s" % ("on" if state["stealth"] else "off"))
        elif a == "--getallowsigned":
            lines.append(
                "Automatically allow built-in signed software %s."
                % ("ENABLED" if state["allow_signed"] else "DISABLED")
            )
            lines.append(
                "Automatically allow downloaded signed software %s."
                % ("ENABLED" if state["allow_signed_downloaded"] else "DISABLED")
            )
        elif a == "--getappblocked":
            app = state["apps"].get(value)
            lines.append(
                "The application is not part of the firewall"
                if app is None
                else "Incoming connection to %s is %s" % (value, "blocked" if app == "blocked" else "permitted")
            )
        elif a in ("--setglobalstate", "--setblockall", "--setstealthmode", "--setallowsigned", "--setallowsignedapp"):
            if value not in on_off:
                out(SOCKETFILTERFW_USAGE)
                return 1
            key = {
                "--setglobalstate": "enabled",
                "--setblockall": "block_all",
                "--setstealthmode": "stealth",
                "--setallowsigned": "allow_signed",
                "--setallowsignedapp": "allow_signed_downloaded",
            }[a]
            state[key] = on_off[value]
            changed = True
            lines.append(
                {
                    "enabled": "Firewall is %s. (State = %d)"
                    % (("enabled", 1) if state["enabled"] else ("disabled", 0)),
                    "block_all": "Firewall has block all state set to %s."
                    % ("enabled" if state["block_all"] else "disabled"),
                    "stealth": "Firewall stealth mode is %s" % ("on" if state["stealth"] else "off"),
                }.get(key, "Automatically allow signed software %s." % ("ENABLED" if state[key] else "DISABLED"))
            )
        elif a in ("--add", "--remove", "--blockapp", "--unblockapp"):
            if a == "--add":
                state["apps"].setdefault(value, "permitted")
                lines.append("Application at path ( %s ) added to firewall" % value)
            elif value not in state["apps"]:
                lines.append("The application is not part of the firewall")
            elif a == "--remove":
                del state["apps"][value]
                lines.append("Application at path ( %s ) removed from firewall" % value)
            else:
                state["apps"][value] = "blocked" if a == "--blockapp" else "permitted"
                lines.append(
                    "Incoming connection to %s is %s" % (value, "blocked" if a == "--blockapp" else "permitted")
                )
            changed = True
        elif a in ("--listapps", "--getloggingmode", "--getloggingopt", "--setloggingmode", "--setloggingopt"):
            die(f"socketfilterfw: {a}: not emulated by the simulated Mac", 64)
        else:
            out(SOCKETFILTERFW_USAGE)
            return 1
        i += 2 if takes else 1
    if changed:
        _write_json(ctx.path("firewall.json"), state)
    for line in lines:
        out(line)
    return 0


# ---------------------------------------------------------------------------------------
# RDMA: rdma_ctl, ibv_devices, ibv_devinfo
# ---------------------------------------------------------------------------------------


def cmd_rdma_ctl(ctx, args):
    if args == ["status"]:
        out("enabled" if ctx.cfg["rdma"] else "disabled")
        return 0
    if args and args[0] in ("enable", "disable"):
        die(
            f"rdma_ctl: RDMA can only be {args[0]}d from the Recovery OS: restart into "
            f"Recovery (hold the power button), open Terminal and run `rdma_ctl {args[0]}`, "
            f"then restart.",
            1,
        )
    die("usage: rdma_ctl [status|enable|disable]", 64)


def rdma_devices(ctx):
    """[(device, iface, link, port)] for the Thunderbolt ports (when RDMA is available)."""
    if not ctx.rdma_devices_present():
        return []
    lk = links()
    devs = []
    for _, p in ctx.ports():
        devs.append((f"rdma_{p['iface']}", p["iface"], lk.get(p["iface"], {}), p))
    return devs


def node_guid(mac, sep=True):
    groups = eui64(mac, flip=False)
    return ":".join(groups) if sep else "".join(groups)


def cmd_ibv_devices(ctx, args):
    lines = [f"    {'device':<16}\t   node GUID", f"    {'------':<16}\t----------------"]
    for dev, _iface, _link, p in rdma_devices(ctx):
        lines.append(f"    {dev:<16}\t{node_guid(p['mac'], sep=False)}")
    out("\n".join(lines))
    return 0


def _full_gid(addr):
    return ":".join(
        f"{b:04x}"
        for b in [int.from_bytes(ipaddress.IPv6Address(addr).packed[i : i + 2], "big") for i in range(0, 16, 2)]
    )


def cmd_ibv_devinfo(ctx, args):
    verbose = False
    only = None
    list_only = False
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-v", "--verbose"):
            verbose = True
        elif a in ("-l", "--list"):
            list_only = True
        elif a in ("-d", "--ib-dev") and i + 1 < len(args):
            only = args[i + 1]
            i += 1
        elif a.startswith("--ib-dev="):
            only = a.split("=", 1)[1]
        elif a in ("-i", "--ib-port") and i + 1 < len(args):
            i += 1
        else:
            die(f"ibv_devinfo: invalid option -- '{a.lstrip('-')}'", 255)
        i += 1
    devs = rdma_devices(ctx)
    if list_only:
        out(f"{len(devs)} HCA{'s' if len(devs) != 1 else ''} found:")
        for d in devs:
            out(f"\t{d[0]}")
        return 0
    if only is not None:
        devs = [d for d in devs if d[0] == only]
        if not devs:
            die(f"IB device '{only}' wasn't found", 255)
    if not devs:
        die("No IB devices found", 255)
    blocks = []
    for dev, iface, link, p in devs:
        # `rdma_port_down` (a live override, a list of interfaces): the cable is seen but the
        # RDMA port stays down, as with a bad cable
        active = (has_carrier(link) if link else False) and iface not in (ctx.cfg.get("rdma_port_down") or [])
        L = [
            f"hca_id:\t{dev}",
            "\ttransport:\t\t\tThunderbolt (100)",
            f"\tnode_guid:\t\t\t{node_guid(p['mac'])}",
            "\tsys_image_guid:\t\t\t0000:0000:0000:0000",
            "\tvendor_id:\t\t\t0x05ac",
            "\tvendor_part_id:\t\t\t0",
            "\thw_ver:\t\t\t\t0x0",
            "\tphys_port_cnt:\t\t\t1",
        ]
        if verbose:
            L += [
                "\tmax_mr_size:\t\t\t0x1000000000",
                "\tpage_size_cap:\t\t\t0x4000",
                "\tmax_qp:\t\t\t\t1024",
                "\tmax_qp_wr:\t\t\t4096",
                "\tdevice_cap_flags:\t\t0x00000000",
                "\tmax_sge:\t\t\t30",
                "\tmax_cq:\t\t\t\t1024",
                "\tmax_cqe:\t\t\t65535",
                "\tmax_mr:\t\t\t\t65536",
                "\tmax_pd:\t\t\t\t1024",
                "\tatomic_cap:\t\t\tATOMIC_NONE (0)",
            ]
        L += [
            "\t\tport:\t1",
            f"\t\t\tstate:\t\t\t{'PORT_ACTIVE (4)' if active else 'PORT_DOWN (1)'}",
            "\t\t\tmax_mtu:\t\t4096 (5)",
            "\t\t\tactive_mtu:\t\t4096 (5)",
            "\t\t\tsm_lid:\t\t\t0",
            "\t\t\tport_lid:\t\t0",
            "\t\t\tport_lmc:\t\t0x00",
            "\t\t\tlink_layer:\t\tThunderbolt",
        ]
        if verbose:
            L += [
                "\t\t\tmax_msg_sz:\t\t0x40000000",
                "\t\t\tport_cap_flags:\t\t0x00000000",
                "\t\t\tgid_tbl_len:\t\t4",
                f"\t\t\tphys_state:\t\t{'LINK_UP (5)' if active else 'DISABLED (3)'}",
            ]
            gids = [link_local(p["mac"])]
            gids += [f"::ffff:{a['local']}" for a in ipv4s(link)] if link else []
            for n, g in enumerate(gids[:4]):
                L.append(f"\t\t\tGID[{n:>3}]:\t\t{_full_gid(g)}, RoCE v2")
        blocks.append("\n".join(L) + "\n")
    out("\n".join(blocks))
    return 0


# ---------------------------------------------------------------------------------------
# system_profiler
# ---------------------------------------------------------------------------------------


def _svc_uuid(*parts):
    import uuid

    return str(uuid.uuid5(uuid.UUID(UUID_NS), "/".join(str(p) for p in parts))).upper()


def _tb_speed(ctx, cable):
    a, b = ctx.hostcfg(cable["a"]["host"]), ctx.hostcfg(cable["b"]["host"])
    cap = 80 if int(a["tb_version"]) >= 5 and int(b["tb_version"]) >= 5 else 40
    return min(int(cable["speed"]), cap)


def _mac_item(ctx, peer_host, peer_receptacle):
    peer = ctx.hostcfg(peer_host)
    port = peer["ports"][str(peer_receptacle)]
    services = [
        {
            "_name": "service_ip",
            "protocol_id_key": 1,
            "protocol_revision_key": 1,
            "protocol_version_key": 1,
            "service_uuid_key": _svc_uuid(peer_host, peer_receptacle, "ip"),
        }
    ]
    if peer["rdma"] and ctx.rdma_supported(peer):
        services.append(
            {
                "_name": "unknown_xd_service",
                "protocol_id_key": 64087,
                "protocol_revision_key": 0,
                "protocol_version_key": 1,
                "service_key_key": "rdma",
                "service_uuid_key": _svc_uuid(peer_host, peer_receptacle, "rdma"),
            }
        )
    return {
        "_name": peer["model"],
        "device_id_key": "0xA",
        "device_name_key": peer["model_id"],
        "domain_uuid_key": port["domain_uuid"],
        "services_title": services,
        "vendor_id_key": "0x0A27",
        "vendor_name_key": "Apple Inc.",
    }


def thunderbolt_data(ctx):
    import hashlib

    cfg = ctx.cfg
    empty_speed = "Up to 120 Gb/s" if int(cfg["tb_version"]) >= 5 else "Up to 40 Gb/s"
    buses = []
    for k, p in sorted(ctx.ports(), key=lambda kv: -kv[0]):
        bus = {
            "_name": f"thunderboltusb4_bus_{k - 1}",
            "device_name_key": cfg["model"],
            "domain_uuid_key": p["domain_uuid"],
            "route_string_key": "0",
            "switch_uid_key": p["switch_uid"],
            "vendor_name_key": "Apple Inc.",
        }
        cid, cable = ctx.cable_at(k)
        if cable is not None and ctx.plugged(cid):
            speed = _tb_speed(ctx, cable)
            bus["receptacle_1_tag"] = {
                "current_speed_key": f"{speed} Gb/s",
                "link_status_key": "0x2",
                "micro_version_key": "0.0.0",
                "receptacle_id_key": str(k),
                "receptacle_status_key": "receptacle_connected",
            }
            me_a = cable["a"]["host"] == ctx.host and cable["a"]["receptacle"] == k
            peer = cable["b"] if me_a else cable["a"]
            dock = cable.get("dock")
            if dock is None:
                bus["_items"] = [_mac_item(ctx, peer["host"], peer["receptacle"])]
            elif dock["seen_by"] == ctx.host:
                digest = hashlib.sha256(f"dock/{cable['index']}".encode()).hexdigest()
                bus["_items"] = [
                    {
                        "_items": [_mac_item(ctx, peer["host"], peer["receptacle"])],
                        "_name": dock["name"],
                        "device_id_key": "0x00C4",
                        "device_name_key": dock["name"],
                        "device_revision_key": "0x1",
                        "mode_key": "usb_four",
                        "receptacle_upstream_ambiguous_tag": {
                            "current_speed_key": f"{speed} Gb/s",
                            "link_status_key": "0x2",
                            "micro_version_key": "1.2.0",
                            "receptacle_status_key": "receptacle_connected",
                        },
                        "route_string_key": "1",
                        "switch_uid_key": "0x" + digest[:16].upper(),
                        "switch_version_key": "56.1",
                        "vendor_id_key": "0x003D",
                        "vendor_name_key": dock.get("vendor") or "Unknown",
                    }
                ]
            # the far side of a dock it cannot see through: connected, nothing listed
        else:
            bus["receptacle_1_tag"] = {
                "current_speed_key": empty_speed,
                "link_status_key": "0x100",
                "receptacle_id_key": str(k),
                "receptacle_status_key": "receptacle_no_devices_connected",
            }
        buses.append(bus)
    return buses


def hardware_data(ctx):
    import hashlib

    cfg = ctx.cfg
    serial = hashlib.sha256(f"serial/{ctx.host}".encode()).hexdigest()[:10].upper()
    return [
        {
            "_name": "hardware_overview",
            "activation_lock_status": "activation_lock_disabled",
            "boot_rom_version": "13822.61.10",
            "chip_type": cfg.get("chip", "Apple M3 Ultra"),
            "machine_model": cfg["model_id"],
            "machine_name": cfg["model"],
            "model_number": "Z1CE000" + serial[:2] + "LL/A",
            "number_processors": f"proc {cfg['ncpu']}:{cfg['ncpu'] * 3 // 4}:{cfg['ncpu'] // 4}",
            "os_loader_version": "13822.61.10",
            "physical_memory": f"{cfg['memory_gb']} GB",
            "platform_UUID": _svc_uuid(ctx.host, "platform"),
            "provisioning_UDID": _svc_uuid(ctx.host, "udid"),
            "serial_number": serial,
        }
    ]


def software_data(ctx):
    cfg = ctx.cfg
    return [
        {
            "_name": "os_overview",
            "boot_mode": "normal_boot",
            "boot_volume": "Macintosh HD",
            "kernel_version": f"Darwin {sysctl_values(ctx)['kern.osrelease']}",
            "local_host_name": ctx.host,
            "os_version": f"macOS {cfg['macos']} ({cfg['build']})",
            "secure_vm": "secure_vm_enabled",
            "system_integrity": "integrity_enabled",
            "uptime": "up 0:0:10:0",
            "user_name": "System Administrator (root)",
        }
    ]


SP_TYPES = {
    "SPThunderboltDataType": thunderbolt_data,
    "SPHardwareDataType": hardware_data,
    "SPSoftwareDataType": software_data,
}
# How long a Mac's system_profiler works on a data type before it answers (a sleep here: the
# time is spent in the Mac's reporter and IORegistry walk, not in this process). The one public
# timing of SPThunderboltDataType: `_SPCompletionInterval` 0.69 s (`_SPResponseTime` 0.78 s) in
# a `system_profiler -xml` capture (duanefields/VirtualKVM issue #50: an Intel Mac with a
# Thunderbolt 3 dock). The other types are not timed here (nothing the toolkit runs asks for
# them). Apple-silicon timings are unverified (README).
SP_SECONDS = {"SPThunderboltDataType": 0.7}


def cmd_system_profiler(ctx, args):
    as_json = False
    types = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-json":
            as_json = True
        elif a == "-xml":
            die("system_profiler: -xml is not emulated by the simulated Mac (use -json)", 1)
        elif a == "-listDataTypes":
            out("Available Datatypes:\n" + "\n".join(SP_TYPES))
            return 0
        elif a in ("-detailLevel", "-timeout"):
            i += 1
        elif a.startswith("-"):
            pass
        else:
            types.append(a)
        i += 1
    if not types:
        types = list(SP_TYPES)
    data = {t: SP_TYPES[t](ctx) for t in types if t in SP_TYPES}
    time.sleep(sum(SP_SECONDS.get(t, 0.0) for t in data))
    if as_json:
        out(json.dumps(data, indent=2, sort_keys=True, separators=(",", " : ")))
        return 0
    text = []
    for t, items in data.items():
        if t == "SPThunderboltDataType":
            text.append(_tb_text(items))
        elif t == "SPHardwareDataType":
            h = items[0]
            text.append(
                "Hardware:\n\n    Hardware Overview:\n\n"
                f"      Model Name: {h['machine_name']}\n      Model Identifier: {h['machine_model']}\n"
                f"      Chip: {h['chip_type']}\n      Memory: {h['physical_memory']}\n"
                f"      Serial Number (system): {h['serial_number']}\n"
            )
        elif t == "SPSoftwareDataType":
            s = items[0]
            text.append(
                "Software:\n\n    System Software Overview:\n\n"
                f"      System Version: {s['os_version']}\n      Kernel Version: {s['kernel_version']}\n"
                f"      Computer Name: {s['local_host_name']}\n"
            )
    out("\n".join(text))
    return 0


def _tb_text(buses):
    lines = ["Thunderbolt/USB4:", ""]
    for bus in buses:
        n = bus["_name"].rsplit("_", 1)[-1]
        tag = bus["receptacle_1_tag"]
        connected = tag["receptacle_status_key"] == "receptacle_connected"
        lines += [
            f"    Thunderbolt/USB4 Bus {n}:",
            "",
            f"      Vendor Name: {bus['vendor_name_key']}",
            f"      Device Name: {bus['device_name_key']}",
            f"      UID: {bus['switch_uid_key']}",
            "      Route String: 0",
            f"      Domain UUID: {bus['domain_uuid_key']}",
            "      Port:",
            f"          Status: {'Device connected' if connected else 'No device connected'}",
            f"          Link Status: {tag['link_status_key']}",
            f"          Speed: {tag['current_speed_key']}",
            f"          Receptacle: {tag['receptacle_id_key']}",
            "",
        ]
        _tb_text_items(bus.get("_items", []), lines, 8)
    return "\n".join(lines)


def _tb_text_items(items, lines, indent):
    pad = " " * indent
    for it in items:
        lines += [
            f"{pad}{it['_name']}:",
            "",
            f"{pad}  Vendor Name: {it.get('vendor_name_key', '')}",
            f"{pad}  Device Name: {it.get('device_name_key', '')}",
        ]
        if "domain_uuid_key" in it:
            lines.append(f"{pad}  Domain UUID: {it['domain_uuid_key']}")
        lines.append("")
        _tb_text_items(it.get("_items", []), lines, indent + 2)


# ---------------------------------------------------------------------------------------
# sudo
# ---------------------------------------------------------------------------------------

SUDO_KEEP = {
    "TERM",
    "PATH",
    "HOME",
    "MAIL",
    "SHELL",
    "LOGNAME",
    "USER",
    "DISPLAY",
    "BLOCKSIZE",
    "COLORFGBG",
    "COLORTERM",
    "CHARSET",
    "LANG",
    "LANGUAGE",
    "LINES",
    "COLUMNS",
    "LSCOLORS",
    "SSH_AUTH_SOCK",
    "TZ",
    "EDITOR",
    "VISUAL",
    "XAUTHORITY",
    "XAUTHORIZATION",
    "__CF_USER_TEXT_ENCODING",
    "TMPDIR",
}
SUDO_ARG_OPTS = set("ugpCDhrtTUR")


# sudo's texts when the user's sudoers entry wants a password (sudo 1.9's check.c/auth.c:
# macOS ships sudo 1.9). The default prompt on macOS is "Password:" (sudoers `passprompt`).
SUDO_NEED_PASSWORD = "sudo: a password is required"
SUDO_NEED_TERMINAL = (
    "sudo: a terminal is required to read the password; either use the -S option to read "
    "from standard input or configure an askpass helper"
)
SUDO_TRIES = 3


def _sudo_read_line():
    """One line of the password from stdin, read byte by byte: what follows the line on stdin
    (a pipelined module) belongs to the command sudo runs next."""
    buf = b""
    while True:
        ch = os.read(0, 1)
        if not ch:
            return None if not buf else buf.decode(errors="replace")
        if ch == b"\n":
            return buf.decode(errors="replace")
        buf += ch


def _sudo_authenticate(password, noninteractive, from_stdin, prompt):
    """The `sudo_password` live override: this Mac's sudoers entry has no NOPASSWD, and no
    timestamp is ever cached (every run asks again, as for a new SSH session). -n fails at
    once; -S reads the password from stdin (prompt on stderr, three tries); without -S there
    is no terminal to ask on (SSH without a tty)."""
    if noninteractive:
        die(SUDO_NEED_PASSWORD, 1)
    if not from_stdin:
        die(SUDO_NEED_TERMINAL + "\n" + SUDO_NEED_PASSWORD, 1)
    for attempt in range(SUDO_TRIES):
        err_raw(prompt)
        line = _sudo_read_line()
        if line is None:
            die(
                SUDO_NEED_PASSWORD
                if attempt == 0
                else f"sudo: {attempt} incorrect password attempt" + ("s" if attempt > 1 else ""),
                1,
            )
        if line == password:
            return
        err("Sorry, try again.")
    die(f"sudo: {SUDO_TRIES} incorrect password attempts", 1)


def _sudo_rule(ctx):
    if ctx.cfg.get("sudo_commands"):
        return "NOPASSWD: " + ", ".join(ctx.cfg["sudo_commands"])
    return "ALL" if ctx.cfg.get("sudo_password") else "NOPASSWD: ALL"


def _sudo_not_allowed(ctx, cmd, search_path, noninteractive, from_stdin, prompt):
    """The `sudo_commands` live override: the login user's sudoers entry allows only these
    commands (full paths), without a password (`admin ALL=(ALL) NOPASSWD: /usr/bin/true`). Any
    other command matches no rule, so sudo authenticates first, as sudoers does by default for a
    command no entry allows (with -n: `a password is required`; the login user's password is
    `sudo_password`, none that can be typed when unset), then refuses it."""
    path = (cmd[0] if "/" in cmd[0] else _which(cmd[0], search_path)) if cmd else None
    if path in ctx.cfg["sudo_commands"]:
        return
    _sudo_authenticate(ctx.cfg.get("sudo_password"), noninteractive, from_stdin, prompt)
    shown = " ".join([path or cmd[0]] + list(cmd[1:])) if cmd else "a shell"
    die(
        f"Sorry, user {os.environ.get('USER') or 'admin'} is not allowed to execute '{shown}' as root on {ctx.host}.", 1
    )


def err_raw(text):
    sys.stderr.write(text)
    sys.stderr.flush()


def cmd_sudo(ctx, args):
    set_home = preserve = login = shell = False
    noninteractive = from_stdin = False
    prompt = "Password:"
    user = "root"
    cmd = None
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            cmd = args[i + 1 :]
            break
        if a.startswith("--"):
            key, _, val = a[2:].partition("=")
            takes = key in (
                "user",
                "group",
                "prompt",
                "close-from",
                "chdir",
                "host",
                "role",
                "type",
                "command-timeout",
                "other-user",
                "chroot",
            )
            if takes and not val:
                i += 1
                val = args[i] if i < len(args) else ""
            if key == "user":
                user = val
            elif key == "prompt":
                prompt = val
            elif key == "non-interactive":
                noninteractive = True
            elif key == "stdin":
                from_stdin = True
            elif key == "set-home":
                set_home = True
            elif key.startswith("preserve-env"):
                preserve = True
            elif key == "login":
                login = True
            elif key == "shell":
                shell = True
            elif key in ("validate", "reset-timestamp", "remove-timestamp"):
                return 0
            elif key == "list":
                out(f"User root may run the following commands on {ctx.host}:\n    (ALL) {_sudo_rule(ctx)}")
                return 0
            i += 1
            continue
        if a.startswith("-") and len(a) > 1:
            j = 1
            while j < len(a):
                c = a[j]
                if c in SUDO_ARG_OPTS:
                    val = a[j + 1 :] or (args[i + 1] if i + 1 < len(args) else "")
                    if not a[j + 1 :]:
                        i += 1
                    if c == "u":
                        user = val
                    elif c == "p":
                        prompt = val
                    break
                if c == "H":
                    set_home = True
                elif c == "E":
                    preserve = True
                elif c == "i":
                    login = True
                elif c == "s":
                    shell = True
                elif c in "vkK":
                    if len(args) == i + 1:
                        return 0
                elif c == "l":
                    out(f"User root may run the following commands on {ctx.host}:\n    (ALL) {_sudo_rule(ctx)}")
                    return 0
                elif c == "n":
                    noninteractive = True
                elif c == "S":
                    from_stdin = True
                elif c in "AbPBN":
                    pass
                else:
                    die(f"sudo: invalid option -- '{c}'\nusage: sudo -h | -K | -k | -V", 1)
                j += 1
            i += 1
            continue
        cmd = args[i:]
        break
    if user not in ("root", "#0", "0", "admin"):
        die(f"sudo: unknown user {user}", 1)
    if not cmd and not (login or shell):
        die(
            "usage: sudo -h | -K | -k | -V\nusage: sudo -v [-ABkNnS] [-g group] [-h host] [-p prompt] [-u user]\n"
            "usage: sudo [-ABbEHkNnPS] [-C num] [-D directory] [-g group] [-h host] [-p prompt] [-R directory] "
            "[-T timeout] [-u user] [VAR=value] [-i | -s] [command [arg ...]]",
            1,
        )
    if ctx.cfg.get("sudo_commands") and user in ("root", "#0", "0"):
        _sudo_not_allowed(
            ctx, cmd, os.environ.get("PATH", "/usr/bin:/bin:/usr/sbin:/sbin"), noninteractive, from_stdin, prompt
        )
    elif ctx.cfg.get("sudo_password") and user in ("root", "#0", "0"):
        _sudo_authenticate(str(ctx.cfg["sudo_password"]), noninteractive, from_stdin, prompt)
    env = (
        dict(os.environ) if preserve else {k: v for k, v in os.environ.items() if k in SUDO_KEEP or k.startswith("LC_")}
    )
    invoking = os.environ.get("SUDO_USER") or os.environ.get("USER") or "root"
    root_home = os.path.join(ctx.mountpoint, "root")
    env.update(
        {
            "USER": "root",
            "LOGNAME": "root",
            "SHELL": "/bin/sh",  # root's shell on a Mac
            "SUDO_USER": invoking,
            "SUDO_UID": str(os.getuid()),
            "SUDO_GID": str(os.getgid()),
            "SUDO_COMMAND": " ".join(cmd or []),
        }
    )
    env.setdefault("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
    if set_home or login:
        env["HOME"] = root_home
    if user == "admin":
        # back to the unprivileged admin user
        for k in ("SUDO_USER", "SUDO_UID", "SUDO_GID", "SUDO_COMMAND"):
            env.pop(k, None)
        env.update({"USER": "admin", "LOGNAME": "admin"})
        if set_home or login:
            env["HOME"] = os.path.join(ctx.mountpoint, ctx.cfg.get("home", "admin"))
    # leading VAR=value words set variables, as with the real sudo
    while cmd and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", cmd[0]):
        k, _, v = cmd[0].partition("=")
        env[k] = v
        cmd = cmd[1:]
    if login or shell:
        sh = env["SHELL"]
        argv = [sh, "-l"] if login else [sh]
        if cmd:
            argv += ["-c", " ".join(_shell_quote(c) for c in cmd)]
        if login:
            os.chdir(root_home)
        os.execve(sh, argv, env)
    path = _which(cmd[0], env["PATH"]) if "/" not in cmd[0] else cmd[0]
    if path is None or not os.path.exists(path):
        die(f"sudo: {cmd[0]}: command not found", 1)
    sys.stdout.flush()
    if os.path.realpath(path) == SHIM_ENTRY and os.path.basename(path) in COMMANDS:
        # another shim: run it in this process (the same as exec'ing it, one Python less)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [path, *cmd[1:]]
        raise ReDispatch()
    os.execve(path, cmd, env)


class ReDispatch(Exception):
    """sudo handing over to another shim in the same process."""


def _which(name, path):
    for d in path.split(os.pathsep):
        p = os.path.join(d or ".", name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def _shell_quote(s):
    return s if re.match(r"^[A-Za-z0-9_./=:,+-]+$", s) else "'" + s.replace("'", "'\\''") + "'"


# ---------------------------------------------------------------------------------------
# ping (macOS flags over iputils ping; macOS output)
# ---------------------------------------------------------------------------------------


def cmd_ping(ctx, args):
    count = timeout = wait_ms = src = bound = interval = size = ttl = None
    quiet = dont_frag = once = False
    host = None
    with_arg = set("ctWSbiImlpTkKzGghM")
    i = 0
    while i < len(args):
        a = args[i]
        if not (a.startswith("-") and len(a) > 1) or host is not None:
            if host is None:
                host = a
            i += 1
            continue
        j = 1
        while j < len(a):
            c = a[j]
            if c in with_arg:
                v = a[j + 1 :]
                if not v:
                    i += 1
                    if i >= len(args):
                        die(f"ping: option requires an argument -- {c}", 64)
                    v = args[i]
                if c == "c":
                    count = v
                elif c == "t":
                    timeout = v
                elif c == "W":
                    wait_ms = v
                elif c == "S":
                    src = v
                elif c in "bI":
                    bound = v
                elif c == "i":
                    interval = v
                elif c == "s":
                    size = v
                elif c == "m":
                    ttl = v
                break
            if c == "q":
                quiet = True
            elif c == "D":
                dont_frag = True
            elif c == "o":
                once = True
            elif c not in "naAdfLQRrvC":
                die(
                    f"ping: invalid option -- {c}\nusage: ping [-AaDdfnoQqRrv] [-c count] "
                    f"[-G sweepmaxsize] [-g sweepminsize] [-h sweepincrsize] [-i wait] ... host",
                    64,
                )
            j += 1
        i += 1
    if host is None:
        die(
            "usage: ping [-AaDdfnoQqRrv] [-c count] [-i wait] [-S src_addr] [-s packetsize] [-t timeout] "
            "[-W waittime] host",
            64,
        )
    argv = [PING, "-n"]
    if count:
        argv += ["-c", count]
    elif once:
        argv += ["-c", "1"]
    if timeout and (count or ("1" if once else None)) == "1" and not wait_ms:
        # macOS sends one packet and waits up to -t seconds; iputils' -w would keep
        # sending one a second until the deadline
        argv += ["-W", timeout]
    elif timeout:
        argv += ["-w", timeout]
    if wait_ms:
        argv += ["-W", f"{max(int(wait_ms), 1) / 1000:g}"]
    if bound:
        argv += ["-I", linux_name(bound)]
    elif src:
        argv += ["-I", src]
    if interval:
        argv += ["-i", interval]
    if size:
        argv += ["-s", size]
    if ttl:
        argv += ["-t", ttl]
    if dont_frag:
        argv += ["-M", "do"]
    # macOS -o: stop at the first reply. iputils has no such flag: watch for the reply (so
    # no -q for iputils) and end it there, printing what macOS prints.
    stop_at_first = once and count is not None and count != "1"
    if quiet and not stop_at_first:
        argv.append("-q")
    argv.append(host)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    blanks = 0
    for line in proc.stdout:
        if stop_at_first:
            m = re.match(r"^(\d+) bytes from ([\d.]+): icmp_seq=(\d+) (ttl=\d+) time=([\d.]+) ms", line)
            if m:
                proc.terminate()
                proc.wait()
                ms = float(m.group(5))
                sent = int(m.group(3))
                if not quiet:
                    out(f"{m.group(1)} bytes from {m.group(2)}: icmp_seq={sent - 1} {m.group(4)} time={ms:.3f} ms")
                out(f"\n--- {host} ping statistics ---")
                out(f"{sent} packets transmitted, 1 packets received, {100.0 * (sent - 1) / sent:.1f}% packet loss")
                out(f"round-trip min/avg/max/stddev = {ms:.3f}/{ms:.3f}/{ms:.3f}/0.000 ms")
                return 0
            if line.startswith("PING ") and quiet:
                m = re.match(r"^PING (\S+) \(([\d.]+)\)(?: from \S+ \S+:)? (\d+)\(\d+\) bytes of data\.", line)
                if m:
                    out(f"PING {m.group(1)} ({m.group(2)}): {m.group(3)} data bytes")
                continue
            if quiet and " bytes from " in line:
                continue
        line = line.rstrip("\n")
        if not line.strip():
            blanks += 1  # printed only when more output follows (no trailing blank line)
            continue
        sys.stdout.write("\n" * blanks)
        blanks = 0
        m = re.match(r"^PING (\S+) \(([\d.]+)\)(?: from \S+ \S+:)? (\d+)\(\d+\) bytes of data\.", line)
        if m:
            out(f"PING {m.group(1)} ({m.group(2)}): {m.group(3)} data bytes")
            continue
        m = re.match(r"^(\d+) bytes from ([\d.]+): icmp_seq=(\d+) (ttl=\d+) time=([\d.]+) ms", line)
        if m:
            out(
                f"{m.group(1)} bytes from {m.group(2)}: icmp_seq={int(m.group(3)) - 1} {m.group(4)} "
                f"time={float(m.group(5)):.3f} ms"
            )
            sys.stdout.flush()
            continue
        m = re.match(r"^(\d+) packets transmitted, (\d+) received,.*?([\d.]+)% packet loss", line)
        if m:
            out(
                f"{m.group(1)} packets transmitted, {m.group(2)} packets received, {float(m.group(3)):.1f}% packet loss"
            )
            continue
        m = re.match(r"^rtt min/avg/max/mdev = (\S+) ms", line)
        if m:
            out(f"round-trip min/avg/max/stddev = {m.group(1)} ms")
            continue
        m = re.match(r"^From (\S+) icmp_seq=\d+ Destination (Host|Net|Port) Unreachable", line)
        if m:
            out(f"92 bytes from {m.group(1)}: Destination {m.group(2)} Unreachable")
            continue
        if line.startswith("---"):
            out(line)
            continue
        if "errors" in line and "packets transmitted" in line:
            m = re.match(r"^(\d+) packets transmitted, (\d+) received", line)
            if m:
                t, r = int(m.group(1)), int(m.group(2))
                loss = 100.0 * (t - r) / t if t else 0.0
                out(f"{t} packets transmitted, {r} packets received, {loss:.1f}% packet loss")
            continue
        out(line)
    errors = proc.stderr.read()
    rc = proc.wait()
    if errors:
        for e in errors.splitlines():
            if "Name or service not known" in e or "Temporary failure in name resolution" in e:
                err(f"ping: cannot resolve {host}: Unknown host")
                return 68
            if "Network is unreachable" in e:
                err("ping: sendto: Network is unreachable")
            elif "Cannot assign requested address" in e or "bind" in e:
                err("ping: bind: Can't assign requested address")
                return 64
            else:
                err(e)
    return {0: 0, 1: 2}.get(rc, 2)


def cmd_rsync(ctx, args):
    """macOS's /usr/bin/rsync (openrsync), modelled in its own module: shims/openrsync.py."""
    import openrsync  # only rsync pays for compiling it

    return openrsync.cmd_rsync(ctx, args)


# ---------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------
# The Command Line Tools: xcode-select, and softwareupdate's on-demand install of them
# ---------------------------------------------------------------------------------------
# A Mac without them (spec `command_line_tools: false`) has <host>/no_command_line_tools: the
# harness's /usr/bin/python3 is then the stub. `softwareupdate --install` of their label
# installs them for good (<host>/command_line_tools.installed, kept across reboots, gone at
# reset()): the marker goes at once.
CLT_MARKER = "no_command_line_tools"
CLT_INSTALLED = "command_line_tools.installed"
CLT_DIR = "/Library/Developer/CommandLineTools"
CLT_ON_DEMAND = "/tmp/.com.apple.dt.CommandLineTools.installondemand.in-progress"
CLT_LABEL = "Command Line Tools for Xcode 26.2-26.2"
CLT_TITLE = "Command Line Tools for Xcode 26.2, Version: 26.2, Size: 798327KiB, Recommended: YES, "
CLT_NO_UI = (
    "xcode-select: error: no developer tools were found, and no install could be requested "
    "(perhaps no UI is present), please install manually from 'developer.apple.com'."
)


def clt_installed(ctx):
    return not os.path.exists(ctx.path(CLT_MARKER))


def cmd_xcode_select(ctx, args):
    if args in (["-p"], ["--print-path"]):
        if clt_installed(ctx):
            out(CLT_DIR)
            return 0
        die(
            "xcode-select: error: unable to get active developer directory, use `sudo xcode-select --switch "
            "path/to/Xcode.app` to set one (or see `man xcode-select`)",
            2,
        )
    if args == ["--install"]:
        if clt_installed(ctx):
            die(
                'xcode-select: error: command line tools are already installed, use "Software Update" in System '
                "Settings to install updates",
                1,
            )
        die(CLT_NO_UI, 1)
    if args[:1] in (["-s"], ["--switch"]) and len(args) == 2:
        if not ctx.elevated():
            die(
                "xcode-select: error: --switch must be run as root "
                "(e.g. `sudo xcode-select --switch <xcode_folder_path>`).",
                1,
            )
        return 0
    die(f"xcode-select: {' '.join(args)}: not emulated", 64)


def cmd_softwareupdate(ctx, args):
    """--list (-l): the Command Line Tools are offered only while they are missing and the
    on-demand placeholder file exists (what their package's distribution script checks);
    --install (-i) LABEL: root only, installs them."""
    if args in (["-l"], ["--list"]):
        out("Software Update Tool\n\nFinding available software")
        if not clt_installed(ctx) and os.path.exists(CLT_ON_DEMAND):
            out(
                "Software Update found the following new or updated software:\n"
                f"* Label: {CLT_LABEL}\n\tTitle: {CLT_TITLE}"
            )
        else:
            err("No new software available.")
        return 0
    if args[:1] in (["-i"], ["--install"]):
        labels = [a for a in args[1:] if not a.startswith("-")]
        if not ctx.elevated():
            die("softwareupdate: This operation requires root.", 1)  # text unverified
        out("Software Update Tool\n\nFinding available software")
        if CLT_LABEL in labels and not clt_installed(ctx):
            out(
                f"\nDownloading {CLT_LABEL}\nDownloaded {CLT_LABEL}\nInstalling {CLT_LABEL}\n"
                f"Done with {CLT_LABEL}\nDone."
            )
            with open(ctx.path(CLT_INSTALLED), "w") as f:
                f.write(CLT_LABEL + "\n")
            os.unlink(ctx.path(CLT_MARKER))
            return 0
        err("No updates are available.")  # text unverified
        return 0
    die(f"softwareupdate: {' '.join(args)}: not emulated", 64)


# ps options that take a value (the next argument, or the rest of the same one)
PS_VALUE_OPTIONS = "GgMNOopstUuW"


def ps_width(args, environ, out_is_tty, tty_columns):
    """The line width of macOS's ps (BSD, adv_cmds ps.c): COLUMNS when set, else the terminal's
    width less one, else 79 when its output is no terminal (every command a module runs);
    one -w widens it to at least 131, a second lifts the bound (None: unlimited)."""
    cols = environ.get("COLUMNS", "")
    if cols.strip().isdigit():
        width = int(cols)
    elif out_is_tty and tty_columns:
        width = tty_columns - 1
    else:
        width = 79
    w = 0
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if not arg.startswith("-") or arg == "-":
            continue
        for i, ch in enumerate(arg[1:]):
            if ch in PS_VALUE_OPTIONS:
                skip = i == len(arg) - 2  # the value is the next argument
                break
            if ch == "w":
                w += 1
    if w >= 2:
        return None
    if w == 1:
        return max(width, 131)
    return width


def cmd_ps(ctx, args):
    """ps as macOS's answers: the machine's procps for the processes (the options the toolkit
    uses, -ax -p -o with empty headers and -w, mean the same to both), each line cut at BSD
    ps's width (ps_width): without -ww, a long command line is cut short on a Mac."""
    import subprocess

    real = next((p for p in ("/bin/ps", "/usr/bin/ps") if os.path.exists(p)), None)
    if real is None:
        die("ps: no ps on this machine", 127)
    r = subprocess.run([real, *args], capture_output=True, text=True, check=False)
    sys.stderr.write(r.stderr)
    try:
        out_is_tty = os.isatty(sys.stdout.fileno())
        columns = os.get_terminal_size(sys.stdout.fileno()).columns if out_is_tty else 0
    except OSError:
        out_is_tty, columns = False, 0
    width = ps_width(args, os.environ, out_is_tty, columns)
    for line in r.stdout.splitlines():
        sys.stdout.write((line if width is None else line[:width]) + "\n")
    return r.returncode


COMMANDS = {
    "system_profiler": cmd_system_profiler,
    "networksetup": cmd_networksetup,
    "ifconfig": cmd_ifconfig,
    "route": cmd_route,
    "netstat": cmd_netstat,
    "ipconfig": cmd_ipconfig,
    "ibv_devices": cmd_ibv_devices,
    "ibv_devinfo": cmd_ibv_devinfo,
    "rdma_ctl": cmd_rdma_ctl,
    "sw_vers": cmd_sw_vers,
    "sysctl": cmd_sysctl,
    "ping": cmd_ping,
    "sudo": cmd_sudo,
    "rsync": cmd_rsync,
    "scutil": cmd_scutil,
    "pmset": cmd_pmset,
    "defaults": cmd_defaults,
    "socketfilterfw": cmd_socketfilterfw,
    "launchctl": cmd_launchctl,
    "xcode-select": cmd_xcode_select,
    "softwareupdate": cmd_softwareupdate,
    "ps": cmd_ps,
}


def main():
    if CMD in ("macos.py", "macos"):
        # internal entry points used by the harness (never by the product):
        #   macos.py boot STATE HOST   apply the persistent preferences the way a Mac boots
        if len(sys.argv) == 4 and sys.argv[1] == "boot":
            boot(Ctx(os.path.abspath(sys.argv[2]), sys.argv[3]))
            return 0
        #   macos.py launchd-job STATE HOST LABEL   launchd for one loaded daemon (launchd_job)
        if len(sys.argv) == 5 and sys.argv[1] == "launchd-job":
            return launchd_job(Ctx(os.path.abspath(sys.argv[2]), sys.argv[3]), sys.argv[4])
        err("usage: macos.py boot STATE HOST  (the shims are run through their command names)")
        return 64
    if CMD not in COMMANDS:
        err(f"{CMD}: not a simulated macOS command")
        return 127
    state = find_state()
    if state is None:
        err(
            f"{CMD}: the macOS shims must be run from <state>/hosts/<host>/bin of a simulated "
            f"cluster (ran as {sys.argv[0]})"
        )
        return 70
    ctx = Ctx(state, os.uname().nodename)
    while True:
        log_argv(ctx)
        maybe_die(ctx)
        maybe_stall(ctx)
        try:
            rc = COMMANDS[CMD](ctx, sys.argv[1:])
        except ReDispatch:
            _set_cmd(os.path.basename(sys.argv[0]))
            continue
        except ShimExit as exc:
            rc = exc.rc
        except IPError as exc:
            err(f"{CMD}: {exc.msg}")
            rc = 1
        sys.stdout.flush()
        return rc or 0


def maybe_die(ctx):
    """The `die_on` live override: {"argv": [command, word...], "nth": n, "mode": m}. The
    n-th run of `command` whose argv holds every word (1 = the first; counted in
    <host>/die_on.count, which only `reset` clears, so a rule fires once) kills, right there:
    - mode "sshd" (default): sshd and every process it started (sessions, the module that ran
      this command, this process). The Mac runs on, its network as the killed run left it;
      the SSH connections to it close at once. `start_sshd(host)` is the repair.
    - mode "power": the whole Mac, as a power cut. Only the harness can cut the cables, so
      this writes <host>/die_request and waits (at most 30 s, then carries on) for the
      harness's watcher (SimCluster.die_on) to call power_off: the ports go dark (no carrier
      for the peers, no TCP FIN for the controller: its connections just go silent), then
      every process of the Mac ends. `reboot(host)` is the repair."""
    rule = ctx.cfg.get("die_on")
    if not rule:
        return
    words = list(rule.get("argv") or [])
    if not words or CMD != words[0] or not all(w in sys.argv[1:] for w in words[1:]):
        return
    fd = ctx.lock()
    try:
        path = ctx.path("die_on.count")
        n = int(_read_json(path, 0)) + 1
        with open(path, "w") as f:
            f.write(str(n))
    finally:
        os.close(fd)
    if n != int(rule.get("nth", 1)):
        return
    if rule.get("mode", "sshd") == "power":
        _write_json(ctx.path("die_request"), {"argv": [CMD, *sys.argv[1:]], "pid": os.getpid()})
        time.sleep(30)
        return
    else:
        with open(ctx.path("sshd.pid")) as f:
            listener = int(f.read().split()[0])
        doomed, todo = [], [listener]
        while todo:  # the listener's whole process tree (this process is in it)
            pid = todo.pop()
            doomed.append(pid)
            try:
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    todo += [int(x) for x in f.read().split()]
            except OSError:
                pass
        for pid in doomed:
            if pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        os.kill(os.getpid(), signal.SIGKILL)


def _stall_matches(entry):
    """A `hang`/`slow` entry ("ibv_devinfo", or "networksetup -getinfo": the command and words
    its argv must hold) against this run."""
    words = str(entry).split()
    return bool(words) and CMD == words[0] and all(w in sys.argv[1:] for w in words[1:])


def maybe_stall(ctx):
    """The `hang` and `slow` live overrides: a command that never answers, or answers late.
    - hang: ["ibv_devinfo", "networksetup -getinfo", ...]: the run sleeps until it is killed,
      printing nothing, as `ibv_devinfo` does on a Mac whose RDMA is wedged. SIGTERM, SIGHUP
      and SIGINT are ignored (a command stuck in the kernel does not answer them either):
      only SIGKILL ends it.
    - slow: {"system_profiler": 5, ...}: the run sleeps that many seconds, then answers."""
    for entry, seconds in (ctx.cfg.get("slow") or {}).items():
        if _stall_matches(entry):
            time.sleep(float(seconds))
            break
    if any(_stall_matches(e) for e in ctx.cfg.get("hang") or []):
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        while True:
            time.sleep(3600)


def _set_cmd(name):
    global CMD
    CMD = name


def run():
    """The process entry point (shims/shim, or this file run by name)."""
    try:
        sys.exit(main())
    except ShimExit as exc:
        sys.stdout.flush()
        sys.exit(exc.rc)
    except BrokenPipeError:
        sys.exit(141)


if __name__ == "__main__":
    run()
