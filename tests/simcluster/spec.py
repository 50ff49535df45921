"""Wiring specs for the simulated Mac cluster: load, validate, derive.

A spec is YAML::

    name: mesh4
    management: {cidr: 10.99.0.0/24}
    hosts:
      - {name: m1, model: "Mac Studio", model_id: "Mac16,9", macos: "26.2", build: "25C56",
         tb_ports: 6, tb_version: 5, rdma: true, memory_gb: 512, thunderbolt_bridge: true}
      - {name: m2, battery: true, pmset: {sleep: 10},      # a laptop, AC sleep 10 minutes
         software_update: {AutomaticallyInstallMacOSUpdates: true}}
    cables:
      - {a: "m1:1", b: "m2:1", speed: 80, dock: {name: "CalDigit TS4", vendor: "...", seen_by: m1}}

Ports are given by receptacle number; receptacle k is the interface `en{k+1}` (receptacle
1 = en2, as on a Mac Studio; en0 is the management Ethernet). Everything the harness and
the shims need beyond the spec (interface names, MAC addresses, domain UUIDs, management
addresses, cable ids) is derived here, deterministically, so two `up`s of the same spec
give the same Macs.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml

SPECS_DIR = Path(__file__).resolve().parent / "specs"

# Names the harness uses for its own namespaces (<prefix>-ctl, <prefix>-wire).
RESERVED_HOST_NAMES = {"ctl", "wire"}
HOST_NAME = re.compile(r"^[a-z][a-z0-9-]{0,14}$")
UUID_NAMESPACE = uuid.UUID("6a1f6f2e-3c59-4f0e-9a43-5e1c2d7b8a10")

HOST_DEFAULTS = {
    "model": "Mac Studio",
    "model_id": "Mac16,9",
    "chip": "Apple M3 Ultra",
    "macos": "26.2",
    "build": "25C56",
    "tb_ports": 6,
    "tb_version": 5,
    "rdma": True,
    "memory_gb": 512,
    "ncpu": 32,
    "thunderbolt_bridge": True,
    # the language macOS was set up in: it names the Thunderbolt Bridge's hardware port and
    # service in it (shims/macos.py BRIDGE_NAMES)
    "language": "en",
    # each Thunderbolt port's domain UUID as system_profiler shows it ({receptacle: UUID});
    # unset: one made from the host's name (from-capture sets the capture's, so a rebuilt
    # cluster's cables have the captured ids, and the plan their /30s)
    "domain_uuids": {},
    # the login user's home directory, <mount point>/<home> (/srv/admin); a Mac whose admin
    # user is someone else (/Users/alice beside /Users/admin) has another
    "home": "admin",
    # a laptop (MacBook Pro): pmset has Battery Power and AC Power settings, and no autorestart
    "battery": False,
    # stored AC power settings that differ from macOS's defaults (sleep 1, disksleep 10,
    # displaysleep 10, autorestart 0 on a desktop; shims/macos.py PMSET_DESKTOP_AC)
    "pmset": {},
    # /Library/Preferences/com.apple.SoftwareUpdate as a Mac set up with automatic checks and
    # downloads but without automatic macOS installs has it; {} is a Mac where none was written
    "software_update": {
        "AutomaticCheckEnabled": True,
        "AutomaticDownload": True,
        "AutomaticallyInstallMacOSUpdates": False,
        "CriticalUpdateInstall": True,
    },
    # The Command Line Tools installed (their /usr/bin/python3 runs Ansible's modules); false:
    # a Mac fresh out of the box, whose /usr/bin/python3 is only the stub that asks for them
    "command_line_tools": True,
    # Pythons for MLX besides the Command Line Tools' one: "homebrew" (/opt/homebrew/bin/
    # python3.N) and/or "python.org" (/Library/Frameworks/Python.framework/Versions/3.N), N the
    # minor version of the machine's Python the harness runs on; [] a Mac with neither
    "pythons": ["homebrew"],
}
PYTHON_SOURCES = ("homebrew", "python.org")
# the languages the shims name the Thunderbolt Bridge in (shims/macos.py BRIDGE_NAMES)
LANGUAGES = ("en", "de", "fr", "ja", "zh")
HOST_KEYS = {"name", *HOST_DEFAULTS}
CABLE_KEYS = {"a", "b", "speed", "dock"}
DOCK_KEYS = {"name", "vendor", "seen_by"}


class SpecError(ValueError):
    """A wiring spec that cannot describe a cluster; the message says what to fix."""


@dataclass(frozen=True)
class HostSpec:
    name: str
    model: str
    model_id: str
    chip: str
    macos: str
    build: str
    tb_ports: int
    tb_version: int
    rdma: bool
    memory_gb: int
    ncpu: int
    thunderbolt_bridge: bool
    language: str
    domain_uuids: dict
    home: str
    battery: bool
    pmset: dict
    software_update: dict
    command_line_tools: bool
    pythons: tuple

    def iface(self, receptacle: int) -> str:
        return f"en{receptacle + 1}"

    @property
    def tb_ifaces(self) -> list[str]:
        return [self.iface(k) for k in range(1, self.tb_ports + 1)]


@dataclass(frozen=True)
class Endpoint:
    host: str
    receptacle: int
    iface: str

    def __str__(self):
        return f"{self.host}:{self.iface}"


@dataclass(frozen=True)
class Dock:
    name: str
    vendor: str
    seen_by: str


@dataclass(frozen=True)
class CableSpec:
    index: int
    a: Endpoint
    b: Endpoint
    speed: int
    dock: Dock | None = None

    @property
    def id(self) -> str:
        """`m1:en2~m2:en3`, endpoints sorted by (host, iface): the planner's cable id."""
        x, y = sorted((self.a, self.b), key=lambda e: (e.host, e.iface))
        return f"{x}~{y}"

    def other(self, host: str, iface: str) -> Endpoint:
        if (self.a.host, self.a.iface) == (host, iface):
            return self.b
        return self.a


@dataclass
class ClusterSpec:
    name: str
    cidr: ipaddress.IPv4Network
    hosts: list[HostSpec]
    cables: list[CableSpec]
    source: str = ""
    _by_name: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self._by_name = {h.name: h for h in self.hosts}

    def host(self, name: str) -> HostSpec:
        try:
            return self._by_name[name]
        except KeyError:
            raise SpecError(f"{self.name}: no host named {name!r} (hosts: {', '.join(self._by_name)})") from None

    @property
    def gateway(self) -> str:
        """The controller's address on the management LAN: the first host address."""
        return str(next(self.cidr.hosts()))

    def mgmt_address(self, name: str) -> str:
        index = [h.name for h in self.hosts].index(name)
        return str(self.cidr.network_address + 2 + index)

    def cable(self, ref) -> CableSpec:
        """A cable by index, by id (`m1:en2~m2:en3`), or by one endpoint (`m1:1`, `m1:en2`)."""
        if isinstance(ref, int):
            if 0 <= ref < len(self.cables):
                return self.cables[ref]
            raise SpecError(f"{self.name}: no cable #{ref} (there are {len(self.cables)})")
        ref = str(ref)
        for c in self.cables:
            if ref == c.id or ref == f"{c.a}~{c.b}" or ref == f"{c.b}~{c.a}":
                return c
        if ":" in ref and "~" not in ref:
            host, _, port = ref.partition(":")
            iface = port if port.startswith("en") else (f"en{int(port) + 1}" if port.isdigit() else port)
            for c in self.cables:
                for e in (c.a, c.b):
                    if (e.host, e.iface) == (host, iface):
                        return c
        raise SpecError(f"{self.name}: no cable {ref!r} (cables: {', '.join(c.id for c in self.cables)})")

    def cables_of(self, host: str) -> dict[str, CableSpec]:
        """iface -> cable for one host."""
        out = {}
        for c in self.cables:
            for e in (c.a, c.b):
                if e.host == host:
                    out[e.iface] = c
        return out

    # ---- derived identities (deterministic) ----------------------------------------------
    def domain_uuid(self, host: str, receptacle: int) -> str:
        given = self.host(host).domain_uuids.get(receptacle)
        return given.upper() if given else str(uuid.uuid5(UUID_NAMESPACE, f"{host}/tb{receptacle}")).upper()

    def switch_uid(self, host: str, receptacle: int) -> str:
        digest = hashlib.sha256(f"switch/{host}/{receptacle}".encode()).hexdigest()
        return "0x05AC" + digest[:12].upper()

    def mac(self, host: str, what: str) -> str:
        """A stable MAC. en0 gets an Apple-looking universal address; Thunderbolt ports and
        bridge0 get locally administered ones like macOS gives them (36:..)."""
        digest = hashlib.sha256(f"mac/{host}/{what}".encode()).digest()
        if what == "en0":
            octets = [0x3C, 0xA6, 0xF6, digest[0], digest[1], digest[2]]
        else:
            octets = [0x36, digest[0], digest[1], digest[2], digest[3], digest[4]]
        return ":".join(f"{o:02x}" for o in octets)

    def to_json(self) -> dict:
        """What the shims read (written to <state>/cluster.json by the harness)."""
        hosts = {}
        for h in self.hosts:
            cabled = self.cables_of(h.name)
            ports = {}
            for k in range(1, h.tb_ports + 1):
                iface = h.iface(k)
                c = cabled.get(iface)
                ports[str(k)] = {
                    "receptacle": k,
                    "iface": iface,
                    "mac": self.mac(h.name, iface),
                    "domain_uuid": self.domain_uuid(h.name, k),
                    "switch_uid": self.switch_uid(h.name, k),
                    "cable": c.id if c else None,
                }
            hosts[h.name] = {
                "name": h.name,
                "model": h.model,
                "model_id": h.model_id,
                "chip": h.chip,
                "macos": h.macos,
                "build": h.build,
                "tb_ports": h.tb_ports,
                "tb_version": h.tb_version,
                "rdma": h.rdma,
                "memory_gb": h.memory_gb,
                "ncpu": h.ncpu,
                "thunderbolt_bridge": h.thunderbolt_bridge,
                "language": h.language,
                "home": h.home,
                "battery": h.battery,
                "pmset": dict(h.pmset),
                "software_update": dict(h.software_update),
                "command_line_tools": h.command_line_tools,
                "pythons": list(h.pythons),
                "mgmt_address": self.mgmt_address(h.name),
                "en0_mac": self.mac(h.name, "en0"),
                "bridge_mac": self.mac(h.name, "en2"),  # macOS gives bridge0 its first member's MAC
                "ports": ports,
            }
        cables = {}
        for c in self.cables:
            cables[c.id] = {
                "index": c.index,
                "a": {"host": c.a.host, "receptacle": c.a.receptacle, "iface": c.a.iface},
                "b": {"host": c.b.host, "receptacle": c.b.receptacle, "iface": c.b.iface},
                "speed": c.speed,
                "dock": None
                if c.dock is None
                else {"name": c.dock.name, "vendor": c.dock.vendor, "seen_by": c.dock.seen_by},
            }
        return {
            "name": self.name,
            "management": {"cidr": str(self.cidr), "gateway": self.gateway, "prefix": self.cidr.prefixlen},
            "hosts": hosts,
            "cables": cables,
        }


def _is_uuid(text):
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _fail(where: str, msg: str):
    raise SpecError(f"{where}: {msg}")


def parse_spec(data, source: str = "<spec>") -> ClusterSpec:
    """Validate a spec mapping; raise SpecError naming the first problem and how to fix it."""
    if not isinstance(data, dict):
        _fail(source, "a spec is a mapping with name, management, hosts and cables")
    unknown = set(data) - {"name", "management", "hosts", "cables", "description"}
    if unknown:
        _fail(source, f"unknown top-level keys {sorted(unknown)}")
    name = data.get("name")
    if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9_.-]+$", name or ""):
        _fail(source, "`name` must be a word (letters, digits, _ . -)")
    where = f"spec {name}"

    mgmt = data.get("management") or {}
    try:
        cidr = ipaddress.IPv4Network(str(mgmt.get("cidr", "10.99.0.0/24")), strict=True)
    except ValueError as exc:
        _fail(where, f"management.cidr is not an IPv4 network: {exc}")

    raw_hosts = data.get("hosts")
    if not isinstance(raw_hosts, list) or not raw_hosts:
        _fail(where, "`hosts` must be a non-empty list")
    hosts, seen = [], set()
    for i, raw in enumerate(raw_hosts):
        if not isinstance(raw, dict):
            _fail(where, f"hosts[{i}] must be a mapping")
        bad = set(raw) - HOST_KEYS
        if bad:
            _fail(where, f"hosts[{i}]: unknown keys {sorted(bad)} (known: {sorted(HOST_KEYS)})")
        hname = raw.get("name")
        if not isinstance(hname, str) or not HOST_NAME.match(hname):
            _fail(where, f"hosts[{i}]: name {hname!r} must match {HOST_NAME.pattern}")
        if hname in RESERVED_HOST_NAMES:
            _fail(where, f"hosts[{i}]: {hname!r} is reserved for the harness's own namespaces")
        if hname in seen:
            _fail(where, f"host {hname!r} is listed twice")
        seen.add(hname)
        v = {**HOST_DEFAULTS, **raw}
        for key in ("tb_ports", "tb_version", "memory_gb", "ncpu"):
            if not isinstance(v[key], int) or isinstance(v[key], bool) or v[key] < 1:
                _fail(where, f"host {hname}: {key} must be a positive integer, not {v[key]!r}")
        if v["tb_version"] not in (4, 5):
            _fail(where, f"host {hname}: tb_version must be 4 or 5, not {v['tb_version']}")
        if v["tb_ports"] > 14:
            _fail(where, f"host {hname}: at most 14 Thunderbolt ports (en2..en15)")
        if not isinstance(v["pythons"], (list, tuple)) or not all(x in PYTHON_SOURCES for x in v["pythons"]):
            _fail(where, f"host {hname}: pythons lists some of {list(PYTHON_SOURCES)}, not {v['pythons']!r}")
        v["pythons"] = tuple(v["pythons"])
        uuids = v["domain_uuids"]
        if not isinstance(uuids, dict) or not all(
            isinstance(k, int) and 1 <= k <= v["tb_ports"] and isinstance(u, str) and _is_uuid(u)
            for k, u in uuids.items()
        ):
            _fail(where, f"host {hname}: domain_uuids maps receptacles 1..{v['tb_ports']} to UUIDs, not {uuids!r}")
        v["domain_uuids"] = dict(uuids)
        if v["language"] not in LANGUAGES:
            _fail(where, f"host {hname}: language is one of {list(LANGUAGES)}, not {v['language']!r}")
        for key in ("rdma", "thunderbolt_bridge", "battery", "command_line_tools"):
            if not isinstance(v[key], bool):
                _fail(where, f"host {hname}: {key} must be true or false, not {v[key]!r}")
        if not isinstance(v["home"], str) or not re.match(r"^[a-z][a-z0-9_-]{0,31}$", v["home"]) or v["home"] == "root":
            _fail(
                where,
                f"host {hname}: home must be a user name like alice (the home is "
                f"<mount point>/<home>), not {v['home']!r}",
            )
        for key in ("pmset", "software_update"):
            if not isinstance(v[key], dict) or not all(
                isinstance(k, str) and isinstance(x, int) and (isinstance(x, bool) or x >= 0) for k, x in v[key].items()
            ):
                _fail(
                    where,
                    f"host {hname}: {key} maps setting names to numbers or booleans "
                    f"(e.g. {{sleep: 1, autorestart: 0}}), not {v[key]!r}",
                )
        for key in ("model", "model_id", "chip", "macos", "build"):
            v[key] = str(v[key])
        if not re.match(r"^\d+(\.\d+){0,2}$", v["macos"]):
            _fail(where, f"host {hname}: macos must look like 26.2, not {v['macos']!r}")
        hosts.append(HostSpec(**{k: v[k] for k in ("name", *HOST_DEFAULTS)}))
    if len(hosts) + 2 > cidr.num_addresses - 1:
        _fail(where, f"management.cidr {cidr} is too small for {len(hosts)} hosts and the controller")

    by_name = {h.name: h for h in hosts}
    used = {}
    cables = []
    for i, raw in enumerate(data.get("cables") or []):
        cw = f"{where}, cables[{i}]"
        if not isinstance(raw, dict):
            _fail(cw, "a cable is a mapping {a: host:port, b: host:port, speed: 80|40}")
        bad = set(raw) - CABLE_KEYS
        if bad:
            _fail(cw, f"unknown keys {sorted(bad)} (known: {sorted(CABLE_KEYS)})")
        ends = []
        for side in ("a", "b"):
            ref = raw.get(side)
            m = re.match(r"^([^:]+):(\d+)$", str(ref or ""))
            if not m:
                _fail(cw, f"{side}: {ref!r} must be HOST:RECEPTACLE, e.g. m1:1")
            hname, port = m.group(1), int(m.group(2))
            if hname not in by_name:
                _fail(cw, f"{side}: unknown host {hname!r} (hosts: {', '.join(by_name)})")
            h = by_name[hname]
            if not 1 <= port <= h.tb_ports:
                _fail(cw, f"{side}: {hname} has receptacles 1..{h.tb_ports}, not {port}")
            if (hname, port) in used:
                _fail(cw, f"{side}: port {hname}:{port} is already used by cables[{used[(hname, port)]}]")
            used[(hname, port)] = i
            ends.append(Endpoint(hname, port, h.iface(port)))
        if ends[0].host == ends[1].host:
            _fail(cw, f"both ends are on {ends[0].host}; a cable joins two Macs")
        speed = raw.get("speed", 80)
        if speed not in (40, 80):
            _fail(cw, f"speed must be 80 or 40 (Gb/s), not {speed!r}")
        dock = None
        if raw.get("dock") is not None:
            d = raw["dock"]
            if not isinstance(d, dict) or not d.get("name"):
                _fail(cw, "dock must be a mapping with at least `name`")
            bad = set(d) - DOCK_KEYS
            if bad:
                _fail(cw, f"dock: unknown keys {sorted(bad)}")
            seen_by = d.get("seen_by", ends[0].host)
            if seen_by not in (ends[0].host, ends[1].host):
                _fail(cw, f"dock.seen_by must be one of the cable's hosts, not {seen_by!r}")
            dock = Dock(str(d["name"]), str(d.get("vendor", "")), seen_by)
        cables.append(CableSpec(len(cables), ends[0], ends[1], int(speed), dock))
    return ClusterSpec(name, cidr, hosts, cables, source=source)


def spec_path(name_or_path) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yml", ".yaml") or p.exists() or "/" in str(name_or_path):
        return p
    return SPECS_DIR / f"{name_or_path}.yml"


def load_spec(name_or_path) -> ClusterSpec:
    """A spec by name (tests/simcluster/specs/<name>.yml) or by path."""
    path = spec_path(name_or_path)
    if not path.exists():
        known = sorted(p.stem for p in SPECS_DIR.glob("*.yml"))
        raise SpecError(f"no spec {name_or_path!r}: {path} does not exist (known: {', '.join(known)})")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from None
    return parse_spec(data, source=str(path))
