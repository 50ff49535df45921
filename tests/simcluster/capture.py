"""A capture (`ansible-playbook site.yml --tags capture`) rebuilt as a simulation: the spec of the
cluster it shows and its outputs as parser fixtures (`python -m tests.simcluster from-capture`).

A capture (artifacts/capture-<time>.tar.gz, plugins/module_utils/mlx_capture.py) holds
`capture/manifest.json` and `capture/<mac>.json` per Mac, <mac> a placeholder (mac1, mac2, ...):
every macOS command the toolkit parses, as the Mac answered it ({argv, rc, stdout, stderr,
seconds}, or {argv, error, seconds}), the files it reads, and notes, with MAC addresses, UUIDs,
serials, host and user names redacted to placeholders of the same shape (the same value the same
placeholder everywhere, so the domain UUIDs that tie the two ends of a cable still match).

- read_capture(path): the archive as {"source", "manifest", "macs": {mac: capture}}.
- facts_of(capture_mac): the Mac's discovery facts, its recorded outputs replayed through the
  product's own sequence and parsers (mlx_collect.collect_cluster).
- spec_of(capture): the spec (tests/simcluster/spec.py's format) of the cluster: a host per Mac,
  what its outputs show, and the cables the product's planner (plan_cables.links) finds.
  derive(capture) gives it with the notes: what the spec could not say, or says differently.
- spec_yaml(spec, notes): the spec as a file under tests/simcluster/specs/ would hold it.
- write_fixtures(capture, out): each command's stdout as <out>/<mac>/<words>.txt, the files read,
  an index of each Mac's commands (argv, rc, stderr, error) and the manifest.

Pure, except read_capture() and write_fixtures(), which only read and write the files they are
given. Nothing here runs a command or starts a Mac. The product is imported as the collection
it is (ansible_collections.mlx.cluster): under pytest through tests/conftest.py's loader, from
the command line through __main__.py's sys.path.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import re
import tarfile
from pathlib import Path

import yaml

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_capture import CLT_ARGV
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_collect import (
    WIRED_LIMIT_ARGV,
    collect_cluster,
    label,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_netcfg import SC_PREFERENCES
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_power import UPDATE_KEYS, UPDATES_ARGV
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import CommandTimeout
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_tb import IFCONFIG_ARGV
from ansible_collections.mlx.cluster.plugins.plugin_utils import plan_cables
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import PlanError

from .spec import HOST_DEFAULTS, HOST_NAME, LANGUAGES

FALLBACK_CIDR = "10.99.0.0/24"
BRIDGE_DEVICE = "bridge0"
# at most this much of one archive member is read (a capture keeps at most 1 MiB per output)
MAX_MEMBER = 64 << 20
_MAC_NAME = re.compile(r"^capture/([^/]+)\.json$")


class CaptureError(ValueError):
    """A capture that cannot be rebuilt; the message names the Mac and the command."""


def _shims():
    """tests/simcluster/shims/macos.py (no package: the shims run it by path), for what the
    simulated Macs print: the Thunderbolt Bridge's names, macOS's power defaults."""
    path = Path(__file__).resolve().parent / "shims" / "macos.py"
    spec = importlib.util.spec_from_file_location("mlxsim_shims_macos", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_SHIMS = _shims()
# the language of each name of the Thunderbolt Bridge's hardware port (spec.LANGUAGES)
BRIDGE_NAMES = {lang: _SHIMS.BRIDGE_NAMES[lang] for lang in LANGUAGES}


def mac_key(name):
    """mac2 before mac10: placeholders in their number's order."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(name))]


# ---- reading ---------------------------------------------------------------------------------


def _check_mac(mac, data, where):
    if not isinstance(data, dict) or not isinstance(data.get("commands"), list):
        raise CaptureError(f"{where}: {mac}.json is not a Mac's capture (no `commands` list)")
    for i, entry in enumerate(data["commands"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("argv"), list) or not entry["argv"]:
            raise CaptureError(f"{where}: {mac}.json: commands[{i}] has no argv")
        if "error" not in entry and not isinstance(entry.get("rc"), int):
            raise CaptureError(f"{where}: {mac}.json: `{label(entry['argv'])}` has neither rc nor error")
    files = data.get("files") or {}
    notes = data.get("notes") or []
    if not isinstance(files, dict) or not isinstance(notes, list):
        raise CaptureError(f"{where}: {mac}.json: `files` must be a mapping and `notes` a list")
    return {"commands": data["commands"], "files": files, "notes": notes}


def read_capture(path):
    """The capture file at `path` -> {"source", "manifest", "macs": {mac: {commands, files,
    notes}}}, the Macs in their placeholders' order. Read in memory; nothing is extracted."""
    where = str(path)
    try:
        tar = tarfile.open(path, "r:*")
    except (OSError, tarfile.TarError) as exc:
        raise CaptureError(f"{where}: not a capture file (a .tar.gz from `--tags capture`): {exc}") from None
    manifest, macs = None, {}
    with tar:
        for member in tar.getmembers():
            if not member.isfile() or not member.name.startswith("capture/"):
                continue
            if member.size > MAX_MEMBER:
                raise CaptureError(f"{where}: {member.name} is {member.size} bytes, more than a capture holds")
            try:
                data = json.loads(tar.extractfile(member).read().decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                raise CaptureError(f"{where}: {member.name} is not JSON: {exc}") from None
            if member.name == "capture/manifest.json":
                manifest = data
                continue
            m = _MAC_NAME.match(member.name)
            if m:
                macs[m.group(1)] = _check_mac(m.group(1), data, where)
    if manifest is None:
        raise CaptureError(f"{where}: no capture/manifest.json: not a capture from `--tags capture`")
    if not macs:
        raise CaptureError(f"{where}: no capture/<mac>.json: the capture holds no Mac")
    for mac in macs:
        if not HOST_NAME.match(mac):
            raise CaptureError(
                f"{where}: {mac!r} cannot name a simulated Mac (a host name must match {HOST_NAME.pattern})"
            )
    return {"source": where, "manifest": manifest, "macs": {m: macs[m] for m in sorted(macs, key=mac_key)}}


# ---- the facts, by the product's own sequence ----------------------------------------------------


# What a capture made by an older toolkit holds instead of a command discovery runs now: plain
# `ifconfig` before `ifconfig -v` (its interfaces then have no type: the ports are found by
# their English names only).
OLDER_ARGVS = {tuple(IFCONFIG_ARGV): ("ifconfig",)}


def replay(capture_mac):
    """A `run(argv, required=True)` for mlx_collect's functions that answers from the recorded
    commands: (rc, stdout, stderr); None for a command the capture does not hold or that was not
    installed (ParseError when the caller requires it); the CommandTimeout or ParseError of a
    command that did not answer or could not be started, as the Mac gave them."""
    recorded = {}
    for entry in capture_mac["commands"]:
        recorded.setdefault(tuple(str(a) for a in entry["argv"]), entry)

    def run(argv, required=True):
        key = tuple(str(a) for a in argv)
        entry = recorded.get(key, recorded.get(OLDER_ARGVS.get(key)))
        error = None if entry is None else entry.get("error")
        if entry is None or error == "not installed":
            if required:
                raise ParseError(label(argv), "not in the capture" if entry is None else "not installed on the Mac")
            return None
        if error is not None:
            m = re.match(r"no answer within ([0-9.]+)s", str(error))
            if m:
                raise CommandTimeout(argv, float(m.group(1)))
            raise ParseError(label(argv), str(error))
        return entry["rc"], entry.get("stdout") or "", entry.get("stderr") or ""

    return run


def facts_of(capture_mac, name="the Mac"):
    """The Mac's mlx_cluster facts from its capture, discovery's own sequence replayed
    (collect_cluster; no SSH_CONNECTION: the management interface is the default route's),
    its warnings under "warnings". CaptureError naming the Mac (`name`) and the command when
    the outputs discovery needs are missing or not understood."""
    prefs = (capture_mac.get("files") or {}).get(SC_PREFERENCES)
    prefs = prefs.encode("utf-8") if isinstance(prefs, str) else None
    notes = "; ".join(str(n) for n in capture_mac.get("notes") or [])
    said = f" (the capture says: {notes})" if notes else ""
    try:
        facts, warnings = collect_cluster(replay(capture_mac), None, {"path": None, "free_bytes": None}, prefs)
    except ParseError as exc:
        raise CaptureError(f"{name}: `{exc.command}`: {exc.message}{said}") from exc
    except CommandTimeout as exc:
        raise CaptureError(f"{name}: `{exc.command}` did not answer when the capture was made{said}") from exc
    except Exception as exc:  # noqa: BLE001 - a parser that breaks on a real Mac's output: what a capture is for
        raise CaptureError(f"{name}: discovery's parsers fail on its outputs: {type(exc).__name__}: {exc}") from exc
    return dict(facts, warnings=list(warnings))


# ---- the spec -----------------------------------------------------------------------------------


def _entry(capture_mac, argv):
    return next((e for e in capture_mac["commands"] if [str(a) for a in e["argv"]] == list(argv)), None)


def _tb_version(name, ports, notes):
    speeds = [p.get("speed_gbps") or p.get("capability_gbps") for p in ports]
    speeds = [s for s in speeds if isinstance(s, (int, float))]
    if not speeds:
        notes.append(f"{name}: no port speed in system_profiler's output; tb_version 5 assumed")
        return 5
    if max(speeds) > 40:
        return 5
    if all(p.get("status") == "connected" for p in ports):
        notes.append(f"{name}: every port is cabled at 40 Gb/s or less; tb_version 4, though the Mac may do more")
    return 4


def _bridge(name, tb, notes):
    """(thunderbolt_bridge, language). The spec's thunderbolt_bridge true is the bridge as macOS
    sets it up: every Thunderbolt port a member (now and in its definition), its service on; false
    is a bridge0 with no member and its service off (shims/macos.py default_prefs). What the
    toolkit acts on is the members (preflight's thunderbolt_bridge check): they decide; a service
    state the spec cannot pair with them is noted."""
    hwports = tb.get("hardware_ports") or {}
    bridge = tb.get("bridge") or {}
    port = next((p for p, dev in hwports.items() if dev == BRIDGE_DEVICE), None)
    language = "en"
    if port is not None:
        language = next((lang for lang, text in BRIDGE_NAMES.items() if text == port), None)
        if language is None:
            notes.append(
                f"{name}: the Thunderbolt Bridge's hardware port is {port!r}, a name the simulation "
                f"has no language for ({', '.join(repr(v) for v in BRIDGE_NAMES.values())}); language en"
            )
            language = "en"
    exists = bool(bridge.get("exists")) or port is not None
    members = sorted(set(bridge.get("members") or []) | set(bridge.get("persistent_members") or []))
    enabled = bridge.get("service_enabled")
    on = exists and bool(members)
    if not exists:
        notes.append(
            f"{name}: no {BRIDGE_DEVICE}; the simulation's thunderbolt_bridge false has one, empty, its service off"
        )
    elif enabled is not None and enabled != on:
        notes.append(
            f"{name}: {BRIDGE_DEVICE} has {'members ' + ', '.join(members) if members else 'no member'} and its "
            f"service is {'on' if enabled else 'off'}; the simulation's thunderbolt_bridge {str(on).lower()} "
            f"has its service {'on' if on else 'off'}"
        )
    return on, language


def _pmset(name, power, battery, notes):
    """The AC settings that differ from what a simulated Mac of its kind stores (the spec's
    `pmset`); settings a simulated Mac does not have are left out, with a note."""
    if not isinstance(power, dict) or not isinstance(power.get("AC Power"), dict):
        return None
    defaults = dict(_SHIMS.PMSET_LAPTOP_AC if battery else _SHIMS.PMSET_DESKTOP_AC)
    out, unknown = {}, []
    for key, value in power["AC Power"].items():
        if key not in defaults:
            unknown.append(key)
        elif isinstance(value, int) and value != defaults[key]:
            out[key] = value
    if unknown:
        notes.append(f"{name}: pmset AC settings the simulation does not model, left out: {', '.join(unknown)}")
    return out


def _software_update(updates):
    """The SoftwareUpdate keys the Mac has (the spec's `software_update`); {} never written."""
    if not isinstance(updates, dict):
        return None
    return {key: updates[fact] for fact, key in UPDATE_KEYS.items() if updates.get(fact) is not None}


def host_of(name, facts, capture_mac, notes):
    """The spec's host for one Mac: what its facts (and, for the Command Line Tools, its capture)
    show; `notes` gets what the spec cannot say as the Mac does."""
    tb, hw, os_ = facts["thunderbolt"], facts["hw"], facts["os"]
    ports = [p for p in tb.get("ports") or [] if isinstance(p.get("receptacle"), int)]
    receptacles = sorted({p["receptacle"] for p in ports})
    tb_ports = max(receptacles) if receptacles else 1
    if not receptacles:
        notes.append(f"{name}: no Thunderbolt receptacle in system_profiler's output; tb_ports 1 (a spec needs one)")
    elif receptacles != list(range(1, tb_ports + 1)):
        notes.append(f"{name}: receptacles {receptacles}; the simulation has 1..{tb_ports}")
    if tb_ports > 14:
        notes.append(f"{name}: {tb_ports} receptacles; the simulation has at most 14")
        tb_ports = 14
    moved = [
        f"{p['receptacle']} is {p['iface']}"
        for p in ports
        if p.get("iface") and p["iface"] != f"en{p['receptacle'] + 1}"
    ]
    if moved:
        notes.append(f"{name}: receptacle {', '.join(moved)}; in the simulation receptacle k is en(k+1)")
    rdma = facts.get("rdma") or {}
    host = {
        "name": name,
        "model": (tb.get("mac") or {}).get("model") or HOST_DEFAULTS["model"],
        "model_id": hw["model"],
        "macos": os_["product_version"],
        "build": os_["build_version"],
        "tb_ports": tb_ports,
        "tb_version": _tb_version(name, ports, notes),
        "rdma": bool(rdma.get("devices")) and rdma.get("rdma_ctl") == "enabled",
        "memory_gb": max(1, round(hw["memsize"] / (1 << 30))),
        "ncpu": hw["ncpu"],
        # the captured ids: the rebuilt cables are the captured ones (the same cable ids, so the
        # same /30s in the plan)
        "domain_uuids": {p["receptacle"]: p["domain_uuid"] for p in ports if p.get("domain_uuid")},
    }
    host["thunderbolt_bridge"], host["language"] = _bridge(name, tb, notes)
    power = facts.get("power")
    if isinstance(power, dict):
        host["battery"] = "Battery Power" in power
        pmset = _pmset(name, power, host["battery"], notes)
        if pmset is not None:
            host["pmset"] = pmset
    read = _entry(capture_mac, UPDATES_ARGV)
    updates = _software_update(facts.get("updates"))
    if updates is not None and read is not None and "rc" in read:
        host["software_update"] = updates
    clt = _entry(capture_mac, CLT_ARGV)
    if clt is not None and "rc" in clt:
        host["command_line_tools"] = clt["rc"] == 0
    wired = hw.get("wired_limit_mb")
    if wired:
        notes.append(
            f"{name}: iogpu.wired_limit_mb is {wired}; a spec cannot say so "
            f"(SimCluster.set_host({name!r}, wired_limit_mb={wired}) can)"
        )
    elif wired is None and _entry(capture_mac, WIRED_LIMIT_ARGV) is not None:
        notes.append(f"{name}: `{label(WIRED_LIMIT_ARGV)}` gave no limit; the simulation has the oid")
    return host


def _cidr(facts_by_mac, notes):
    """The management network: the /24 holding every Mac's management address, else FALLBACK_CIDR."""
    addresses = {mac: (f.get("mgmt") or {}).get("address") for mac, f in facts_by_mac.items()}
    try:
        nets = {ipaddress.IPv4Network(f"{a}/24", strict=False) for a in addresses.values()}
    except ValueError:
        nets = set()
    if len(nets) == 1:
        cidr = nets.pop()
        simulated = [str(cidr.network_address + 2 + i) for i in range(len(addresses))]
        if list(addresses.values()) != simulated:
            notes.append(
                "management: "
                + ", ".join(f"{mac} {a}" for mac, a in addresses.items())
                + f" on the Macs; the simulation gives them {cidr}'s .2, .3, ... in the hosts' order"
            )
        return str(cidr)
    notes.append(
        "management: the Macs' addresses ("
        + ", ".join(f"{mac} {a or 'unknown'}" for mac, a in addresses.items())
        + f") are in no one /24; {FALLBACK_CIDR}"
    )
    return FALLBACK_CIDR


def _end(facts_by_mac, end):
    """(host, receptacle, the port's facts) of one end of a planner's cable."""
    port = next(p for p in facts_by_mac[end["host"]]["thunderbolt"]["ports"] if p.get("iface") == end["iface"])
    return end["host"], port["receptacle"], port


def _dock(cable, ends, notes):
    """The spec's dock of a cable through a hub: the one nearest the Mac that sees it."""
    if not cable.get("via"):
        return None
    seer = next(((h, port) for h, _, port in ends if (port.get("peer") or {}).get("via")), None)
    if seer is None:
        return None
    host, port = seer
    if all((p.get("peer") or {}).get("via") for _, _, p in ends):
        notes.append(f"cable {cable['id']} is seen through a hub from both ends; the simulation shows it from {host}'s")
    via = list(port["peer"]["via"])
    hub = next((d for d in port.get("devices") or [] if d.get("kind") == "hub" and d.get("name") == via[0]), {})
    if len(via) > 1:
        notes.append(f"cable {cable['id']} passes through {', '.join(via)}; the simulation has one dock: {via[0]}")
    dock = {"name": via[0], "vendor": hub.get("vendor") or "", "seen_by": host}
    return {k: v for k, v in dock.items() if v != ""}


def _speed(cable, notes):
    speed = cable.get("speed_gbps")
    if speed is None:
        speed = 80 if cable.get("link_class") == "TB5" else 40
        notes.append(f"cable {cable['id']}: no link speed in system_profiler's output; {speed} from its link class")
    elif speed not in (40, 80):
        notes.append(
            f"cable {cable['id']} runs at {speed} Gb/s; the simulation has 80 and 40: {80 if speed > 40 else 40}"
        )
    return 80 if speed > 40 else 40


def cables_of(facts_by_mac, notes):
    """The spec's cables: the product's planner (plan_cables.links, what mlx_links runs) over the
    Macs' facts, each end's interface back to its receptacle; what it could not place, noted."""
    try:
        found = plan_cables.links(facts_by_mac)
    except PlanError as exc:
        raise CaptureError(f"the planner refuses the Macs' Thunderbolt facts: {exc}") from exc
    cables = []
    for cable in found["cables"]:
        ends = sorted((_end(facts_by_mac, cable[s]) for s in ("a", "b")), key=lambda e: (mac_key(e[0]), e[1]))
        raw = {"a": f"{ends[0][0]}:{ends[0][1]}", "b": f"{ends[1][0]}:{ends[1][1]}", "speed": _speed(cable, notes)}
        if any(r > 14 for _, r, _ in ends):
            notes.append(f"cable {cable['id']} is on a receptacle beyond 14; left out")
            continue
        dock = _dock(cable, ends, notes)
        if dock is not None:
            raw["dock"] = dock
        elif cable.get("sighting") == "one-sided":
            notes.append(
                f"cable {cable['id']} is seen from one side only, through nothing; the simulation shows it from both"
            )
        cables.append(raw)
    cables.sort(key=lambda c: [mac_key(x) for x in (c["a"], c["b"])])
    for kind in ("problems", "unmatched", "external"):
        for item in found.get(kind) or []:
            what = item.get("msg") or (
                f"{item.get('host')}:{item.get('iface')} is cabled to a Mac outside the capture "
                f"({item.get('peer_name') or 'unnamed'}, domain UUID {item.get('peer_uuid')})"
            )
            notes.append(f"not a cable of the spec ({kind}): {what}")
    return cables


def derive(capture, name=None):
    """(spec, notes): the spec of the cluster the capture shows, and what it could not show as
    the Macs are (notes, one line each)."""
    notes, facts_by_mac, hosts = [], {}, []
    for mac, capture_mac in capture["macs"].items():
        facts_by_mac[mac] = facts_of(capture_mac, mac)
    for mac, facts in facts_by_mac.items():
        hosts.append(host_of(mac, facts, capture["macs"][mac], notes))
    cidr = _cidr(facts_by_mac, notes)
    cables = cables_of(facts_by_mac, notes)
    manifest = capture.get("manifest") or {}
    if name is None:
        name = re.sub(r"\.(tar\.gz|tgz|tar)$", "", Path(capture.get("source") or "capture").name)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "capture"
    spec = {
        "name": name,
        "description": (
            f"built from {Path(capture.get('source') or '?').name} (toolkit {manifest.get('toolkit', '?')}, "
            f"captured {manifest.get('created', '?')}) by python -m tests.simcluster from-capture"
        ),
        "management": {"cidr": cidr},
        "hosts": hosts,
        "cables": cables,
    }
    notes.append(
        "not in a capture, the spec's defaults: chip, home (the login user's name is redacted), "
        "pythons (Homebrew's, python.org's)"
    )
    return spec, notes


def spec_of(capture, name=None):
    """The spec (a mapping for spec.parse_spec) of the cluster the capture shows."""
    return derive(capture, name)[0]


def spec_yaml(spec, notes=()):
    """The spec as a file: a comment (the notes), then hosts one key a line and cables one a line,
    as tests/simcluster/specs/*.yml write them."""

    def flow(value):  # in a one-item flow list: quoted where a flow context needs it, no `...` after a scalar
        text = yaml.safe_dump([value], default_flow_style=True, width=1 << 16, allow_unicode=True, sort_keys=False)
        return text.strip()[1:-1]

    lines = []
    if notes:
        lines.append("# What the spec could not say as the Macs are, or says differently:")
        lines += ["# - " + " ".join(str(n).split()) for n in notes]
    lines += [f"name: {flow(spec['name'])}", f"description: {flow(spec['description'])}"]
    lines += [f"management: {flow(spec['management'])}", "hosts:"]
    for host in spec["hosts"]:
        first = True
        for key, value in host.items():
            lines.append(f"  {'- ' if first else '  '}{key}: {flow(value)}")
            first = False
    lines.append("cables:" if spec["cables"] else "cables: []")
    lines += [f"  - {flow(c)}" for c in spec["cables"]]
    return "\n".join(lines) + "\n"


# ---- fixtures -----------------------------------------------------------------------------------


def fixture_name(argv):
    """`networksetup -listallhardwareports` -> networksetup_-listallhardwareports: the command's
    words joined by _, the program by its base name, anything a file name should not hold as _."""
    words = [Path(str(argv[0])).name] + [str(a) for a in argv[1:]]
    words = [re.sub(r"_+", "_", re.sub(r"[^\w.,+=-]", "_", w)).strip("_") for w in words]
    return "_".join(w for w in words if w)[:150] or "command"


def write_fixtures(capture, out):
    """Each Mac's outputs as parser fixtures under `out`: <mac>/<words>.txt (stdout, as the Mac
    printed it), <mac>/files/<base name> (each file read), <mac>/commands.json (each command:
    argv, rc or error, seconds, its stdout's file, stderr), and manifest.json. The paths written."""
    out = Path(out)
    written = []

    def write(path, text):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:  # bytes that were not UTF-8 on the Mac came as lone surrogates (\udc80-\udcff): as they were
            data = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            data = text.encode("utf-8", "replace")
        path.write_bytes(data)
        written.append(path)

    write(out / "manifest.json", json.dumps(capture.get("manifest") or {}, indent=2, sort_keys=True) + "\n")
    for mac, capture_mac in capture["macs"].items():
        taken, index = set(), []
        for entry in capture_mac["commands"]:
            item = {k: entry[k] for k in ("argv", "rc", "error", "seconds", "stderr") if k in entry}
            if "rc" in entry:
                base, n = fixture_name(entry["argv"]), 1
                while f"{base}.txt" in taken:
                    n += 1
                    base = f"{fixture_name(entry['argv'])}_{n}"
                taken.add(f"{base}.txt")
                write(out / mac / f"{base}.txt", entry.get("stdout") or "")
                item["stdout"] = f"{base}.txt"
            index.append(item)
        for path, text in sorted((capture_mac.get("files") or {}).items()):
            if isinstance(text, str):
                write(out / mac / "files" / (Path(path).name or "file"), text)
        write(out / mac / "commands.json", json.dumps(index, indent=2, ensure_ascii=False) + "\n")
    return written
