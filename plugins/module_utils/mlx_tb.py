# -*- coding: utf-8 -*-
"""Pure parsers for the Thunderbolt side of a Mac (docs/design.md, `mlx_thunderbolt`).

Nothing here runs a command or imports Ansible: the modules in `library/` run
`system_profiler`, `networksetup` and `ifconfig`, and hand the text to these functions.
Every parser accepts `str` or `bytes` and either returns a result or raises `ParseError`
(module_utils/mlx_parse.py, shared by every parser);
partial data (a bus without a receptacle tag, an unexpected type inside the JSON) becomes
a warning in the result instead.

The peer walk fixes what MLX's own `mlx.distributed_config` gets wrong: it only looks at
the first level of a bus's `_items`, so a Mac behind a dock or hub is never found. Here
every level is walked; items between us and the peer are reported in `via`.
"""

from __future__ import annotations

import json
import math
import re

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError, small_int, to_text

SP_COMMAND = "system_profiler SPThunderboltDataType -json"
HWPORTS_COMMAND = "networksetup -listallhardwareports"
SERVICE_ORDER_COMMAND = "networksetup -listnetworkserviceorder"
IFCONFIG_COMMAND = "ifconfig"
# What `ifconfig -v` calls a Thunderbolt port's interface ("type: IP over Thunderbolt", a public
# capture: tests/simcluster/README.md); ifconfig's own words, the same in every language.
THUNDERBOLT_TYPE = "IP over Thunderbolt"
# Every interface, with its type: what discovery and the network stage read (parse_ifconfig).
IFCONFIG_ARGV = [IFCONFIG_COMMAND, "-v"]

BRIDGE_PORT = "Thunderbolt Bridge"
DETECT_FIX = "sudo networksetup -detectnewhardware"

# Bounds that keep hostile input cheap; real trees are 1-3 levels deep.
_MAX_DEPTH = 32


# --------------------------------------------------------------------------------------
# system_profiler SPThunderboltDataType -json
# --------------------------------------------------------------------------------------

_SPEED = re.compile(r"(?i)^\s*(up to\s+)?(\d+(?:\.\d+)?)\s*gb/s")
_BUS_NAME = re.compile(r"^thunderboltusb4_bus_(\d+)$")


def _num(value):
    """80.0 -> 80, 2.5 -> 2.5."""
    return int(value) if value == int(value) else value


def parse_speed(text):
    """'80 Gb/s' -> (80, False); 'Up to 120 Gb/s' -> (120, True); anything else -> (None, False)."""
    if not isinstance(text, str):
        return None, False
    m = _SPEED.match(text)
    if not m:
        return None, False
    value = float(m.group(2))
    if not math.isfinite(value):
        return None, False
    return _num(value), bool(m.group(1))


def link_class(speed_gbps):
    """TB5 above 40 Gb/s, TB4 at 40, TB3 below; None without a link."""
    if speed_gbps is None:
        return None
    if speed_gbps > 40:
        return "TB5"
    if speed_gbps == 40:
        return "TB4"
    return "TB3"


def bus_display_name(name):
    """'thunderboltusb4_bus_0' (the JSON key) -> 'Thunderbolt/USB4 Bus 0' (what the text output shows)."""
    name = _str_or_none(name)
    if name is None:
        return None
    m = _BUS_NAME.match(name)
    return f"Thunderbolt/USB4 Bus {m.group(1)}" if m else name


def _str_or_none(value):
    """A non-empty string from the JSON (lone surrogates from \\udcxx escapes -> U+FFFD), else None."""
    if not isinstance(value, str) or value == "":
        return None
    return to_text(value, SP_COMMAND)[0]


def _short(value):
    """repr() of a value from the output, cut to a length fit for a warning."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _receptacle_id(value):
    """receptacle_id_key is a string in real captures ("3"); accept an int too."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return small_int(value)


def _walk(items, where, warnings, depth=1, path=()):
    """Yield (item, depth, hubs_on_the_way) for every dict under `items`, pre-order.

    A peer (an item with domain_uuid_key) is not descended into: what hangs off the
    other Mac belongs to its own report.
    """
    if depth > _MAX_DEPTH:
        warnings.append(f"{where}: devices nested deeper than {_MAX_DEPTH} levels; the rest is ignored")
        return
    if not isinstance(items, list):
        warnings.append(f"{where}: _items is a {type(items).__name__}, not a list; ignored")
        return
    for item in items:
        if not isinstance(item, dict):
            warnings.append(f"{where}: an item of _items is a {type(item).__name__}, not an object; ignored")
            continue
        yield item, depth, path
        if _str_or_none(item.get("domain_uuid_key")) is None and "_items" in item:
            name = _str_or_none(item.get("_name")) or "unnamed hub"
            yield from _walk(item["_items"], where, warnings, depth + 1, path + (name,))


def _item_kind(item):
    if _str_or_none(item.get("domain_uuid_key")):
        return "mac"
    if "_items" in item:
        return "hub"
    return "device"


def _port(bus, warnings):
    """One port dict from one bus, or None (skipped) with a warning when it cannot be placed.

    A bus with a receptacle but no `domain_uuid_key` (partial or trimmed output) is still a
    port: `domain_uuid` None, with a warning (its cable can only be matched from the other
    Mac's side). A bus with neither is no port (a Mac's internal bus): None, no warning.
    """
    domain = _str_or_none(bus.get("domain_uuid_key"))
    tag = bus.get("receptacle_1_tag")
    if domain is None and not isinstance(tag, dict):
        return None
    receptacle, where = _receptacle(bus, domain, tag, warnings)
    if receptacle is None:
        return None
    devices, peers = _devices_and_peers(bus.get("_items", []), where, warnings)
    status, speed, capability = _status_and_speed(tag, devices, where, warnings)
    return {
        "receptacle": receptacle,
        "bus": bus_display_name(bus.get("_name")),
        "domain_uuid": domain,
        "hardware_port": f"Thunderbolt {receptacle}",
        "status": status,
        "speed_gbps": speed,
        "capability_gbps": capability,
        "link_class": link_class(speed),
        "peer": peers[0] if peers else None,
        "devices": devices,
    }


def _receptacle(bus, domain, tag, warnings):
    """(receptacle number, "receptacle N (bus name)" for warnings) of a bus with a `domain` or a
    receptacle `tag`; (None, None) with a warning when the receptacle cannot be told."""
    where = bus_display_name(bus.get("_name")) or "a Thunderbolt bus"
    known = f"domain {domain}" if domain else "no domain_uuid_key"
    if not isinstance(tag, dict):
        warnings.append(f"{where} ({known}) has no receptacle_1_tag; the port is skipped")
        return None, None
    receptacle = _receptacle_id(tag.get("receptacle_id_key"))
    if receptacle is None:
        warnings.append(
            f"{where} ({known}) has no usable receptacle_id_key "
            f"({_short(tag.get('receptacle_id_key'))}); the port is skipped"
        )
        return None, None
    where = f"receptacle {receptacle} ({where})"
    if domain is None:
        warnings.append(
            f"{where} has no domain_uuid_key (partial system_profiler output): the port "
            f"is kept, but its cable can only be matched from the other Mac's side; "
            f"run `{SP_COMMAND}` again and check that the output is complete"
        )
    return receptacle, where


def _devices_and_peers(items, where, warnings):
    """Every item behind a port, pre-order ([{name, vendor, depth, kind}]), and the Macs among
    them ([{domain_uuid, name, model_id, via}]); a warning when there is more than one Mac."""
    devices, peers = [], []
    for item, depth, hubs in _walk(items, where, warnings):
        kind = _item_kind(item)
        devices.append(
            {
                "name": _str_or_none(item.get("_name")),
                "vendor": _str_or_none(item.get("vendor_name_key")),
                "depth": depth,
                "kind": kind,
            }
        )
        if kind == "mac":
            peers.append(
                {
                    "domain_uuid": _str_or_none(item["domain_uuid_key"]),
                    "name": _str_or_none(item.get("_name")),
                    "model_id": _str_or_none(item.get("device_name_key")),
                    "via": list(hubs),
                }
            )
    if len(peers) > 1:
        warnings.append(
            f"{where}: {len(peers)} Macs behind one port "
            f"({', '.join(p['domain_uuid'] for p in peers)}); using the first"
        )
    return devices, peers


def _status_and_speed(tag, devices, where, warnings):
    """(status, speed_gbps, capability_gbps) of a receptacle: "connected" with the link speed,
    or "empty" with the speed the port is capable of. An unknown status is told from whether
    anything hangs off the port (`devices`), with a warning."""
    raw_status = tag.get("receptacle_status_key")
    # "Up to 40 Gb/s" on a connected receptacle is still the link speed (older TB3 gear).
    speed, _ = parse_speed(tag.get("current_speed_key"))
    if raw_status == "receptacle_connected":
        status = "connected"
    elif isinstance(raw_status, str) and "no_devices" in raw_status:
        status = "empty"
    else:
        status = "connected" if devices else "empty"
        warnings.append(f"{where}: unknown receptacle_status_key {_short(raw_status)}; taken as {status}")
    if status == "connected":
        capability = None
        if speed is None:
            warnings.append(
                f"{where}: connected but no link speed in current_speed_key {_short(tag.get('current_speed_key'))}"
            )
    else:
        capability, speed = speed, None
    return status, speed, capability


def load_profiler_json(text):
    """Decode the JSON and return (list of buses, warnings); ParseError when it is not ours."""
    text, replaced = to_text(text, SP_COMMAND)
    warnings = ["the output had bytes that are not UTF-8; they were replaced"] if replaced else []
    if not text.strip():
        raise ParseError(SP_COMMAND, "empty output")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ParseError(SP_COMMAND, f"output is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ParseError(SP_COMMAND, f"top level is a JSON {type(data).__name__}, not an object")
    if "SPThunderboltDataType" not in data:
        raise ParseError(SP_COMMAND, "no SPThunderboltDataType key in the output")
    buses = data["SPThunderboltDataType"]
    if not isinstance(buses, list):
        raise ParseError(SP_COMMAND, f"SPThunderboltDataType is a {type(buses).__name__}, not a list")
    return buses, warnings


def parse_system_profiler(text):
    """Parse `system_profiler SPThunderboltDataType -json`.

    Returns {"mac": {model, model_id, name}, "ports": [...], "warnings": [...]}, ports as in
    docs/design.md without `iface` (that comes from networksetup), sorted by receptacle.
    """
    buses, warnings = load_profiler_json(text)
    ports, model, portless = [], None, 0
    for index, bus in enumerate(buses):
        if not isinstance(bus, dict):
            warnings.append(f"SPThunderboltDataType[{index}] is a {type(bus).__name__}, not an object; ignored")
            continue
        port = _port(bus, warnings)
        if port is None:
            portless += _str_or_none(bus.get("domain_uuid_key")) is None and not isinstance(
                bus.get("receptacle_1_tag"), dict
            )
            continue
        model = model or _str_or_none(bus.get("device_name_key"))
        ports.append(port)
    if not ports and portless:
        warnings.append(
            f"no Thunderbolt port in the output: {portless} bus entr"
            f"{'y has' if portless == 1 else 'ies have'} neither domain_uuid_key nor "
            f"receptacle_1_tag (partial output?); run `{SP_COMMAND}` again"
        )
    seen = {}
    for port in ports:
        if port["receptacle"] in seen:
            warnings.append(
                f"receptacle {port['receptacle']} is reported by two buses "
                f"({seen[port['receptacle']] or 'no domain'} and {port['domain_uuid'] or 'no domain'})"
            )
        seen[port["receptacle"]] = port["domain_uuid"]
    ports.sort(key=lambda p: (p["receptacle"], p["domain_uuid"] or ""))
    # The bus entries name the model ("Mac Studio"); the model identifier ("Mac16,9") is
    # not in this output: mlx_cluster_facts fills it in from `sysctl hw.model`.
    return {"mac": {"model": model, "model_id": None, "name": model}, "ports": ports, "warnings": warnings}


# --------------------------------------------------------------------------------------
# networksetup
# --------------------------------------------------------------------------------------


def parse_hardware_ports(text):
    """Parse `networksetup -listallhardwareports` into {"Thunderbolt 1": "en2", ...}.

    Stops at "VLAN Configurations". A port without a device is left out. Output with text
    but no "Hardware Port:" line at all raises ParseError.
    """
    text, _ = to_text(text, HWPORTS_COMMAND)
    ports, port, seen_any = {}, None, False
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("VLAN Configurations"):
            break
        key, sep, value = line.partition(":")
        if not sep:
            continue
        value = value.strip()
        if key == "Hardware Port":
            port, seen_any = value, True
        elif key == "Device" and port is not None:
            if value:
                ports[port] = value
            port = None
    if not seen_any and text.strip():
        raise ParseError(HWPORTS_COMMAND, "no 'Hardware Port:' line in the output")
    return ports


_SERVICE = re.compile(r"^\((\d+|\*)\)\s+(.+?)\s*$")
_SERVICE_PORT = re.compile(r"^\(Hardware Port:\s*(.*?),\s*Device:\s*(.*?)\)\s*$")


def parse_service_order(text):
    """Parse `networksetup -listnetworkserviceorder`.

    Returns [{"name", "hardware_port", "device", "enabled"}] in service order; a disabled
    service is listed as "(*) Name". Empty hardware port or device -> None.
    """
    text, _ = to_text(text, SERVICE_ORDER_COMMAND)
    services, recognised = [], False
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("An asterisk (*)"):
            recognised = True
            continue
        m = _SERVICE_PORT.match(line)
        if m:
            recognised = True
            if services and services[-1]["hardware_port"] is None and services[-1]["device"] is None:
                services[-1]["hardware_port"] = m.group(1) or None
                services[-1]["device"] = m.group(2) or None
            continue
        m = _SERVICE.match(line)
        if m:
            recognised = True
            services.append({"name": m.group(2), "hardware_port": None, "device": None, "enabled": m.group(1) != "*"})
    if not recognised and text.strip():
        raise ParseError(SERVICE_ORDER_COMMAND, "no network service in the output")
    return services


# --------------------------------------------------------------------------------------
# ifconfig
# --------------------------------------------------------------------------------------

_IF_HEADER = re.compile(r"^([A-Za-z0-9_.\-]+): flags=([0-9a-fA-F]+)<([^>]*)>(?:\s+mtu\s+(\d+))?")
_INET = re.compile(r"^inet\s+(\d{1,3}(?:\.\d{1,3}){3})(?:\s+-->\s+\S+)?\s+netmask\s+(\S+)")


def netmask_prefix(mask):
    """'0xfffffffc' or '255.255.255.252' -> 30; a non-contiguous or bad mask -> None."""
    try:
        if mask.lower().startswith("0x"):
            value = int(mask, 16)
        else:
            octets = [int(o) for o in mask.split(".")]
            if len(octets) != 4 or any(not 0 <= o <= 255 for o in octets):
                return None
            value = int.from_bytes(bytes(octets), "big")
    except ValueError:
        return None
    if not 0 <= value <= 0xFFFFFFFF:
        return None
    prefix = bin(value).count("1")  # not int.bit_count(): the Mac's own python3 may be 3.9
    return prefix if value == (0xFFFFFFFF << (32 - prefix)) & 0xFFFFFFFF else None


def parse_ifconfig(text):
    """Parse macOS `ifconfig`, `ifconfig -a`, `ifconfig -v` or `ifconfig IFACE`.

    Returns {iface: {"flags": [...], "up", "mtu", "ipv4": [{"address", "prefix"}],
    "members": [...], "status": "active"|"inactive"|None, "type": str|None}}. `type` is what
    `-v` says the interface is (THUNDERBOLT_TYPE for a Thunderbolt port; ifconfig's words are
    not translated), None without `-v`. inet6 lines are ignored. Text that holds no interface
    header raises ParseError.
    """
    text, _ = to_text(text, IFCONFIG_COMMAND)
    interfaces, current = {}, None
    for raw in text.splitlines():
        m = _IF_HEADER.match(raw)
        if m:
            flags = [f for f in m.group(3).split(",") if f]
            current = interfaces.setdefault(
                m.group(1),
                {
                    "flags": flags,
                    "up": "UP" in flags,
                    "mtu": small_int(m.group(4)),
                    "ipv4": [],
                    "members": [],
                    "status": None,
                    "type": None,
                },
            )
            continue
        if current is None:
            if raw.strip():
                raise ParseError(IFCONFIG_COMMAND, f"unexpected line before any interface: {raw.strip()[:80]!r}")
            continue
        line = raw.strip()
        m = _INET.match(line)
        if m:
            current["ipv4"].append({"address": m.group(1), "prefix": netmask_prefix(m.group(2))})
        elif line.startswith("member: "):
            parts = line.split()
            if len(parts) > 1:
                current["members"].append(parts[1])
        elif line.startswith("status: "):
            value = line.split(":", 1)[1].strip()
            current["status"] = value if value in ("active", "inactive") else None
        elif line.startswith("type: "):
            current["type"] = line.split(":", 1)[1].strip() or None
    if not interfaces and text.strip():
        raise ParseError(IFCONFIG_COMMAND, "no interface in the output")
    return interfaces


# --------------------------------------------------------------------------------------
# mlx_thunderbolt facts
# --------------------------------------------------------------------------------------


def _bridge(hwports, bridge_text, services):
    """The `bridge` section: what bridge0 is, who is in it, and whether its service is on. The
    service is the one of the bridge's device, whatever its name (macOS names the bridge in the
    Mac's language: "Thunderbolt-Brücke" on a Mac set up in German)."""
    device = hwports.get(BRIDGE_PORT, "bridge0")
    bridge = {"exists": False, "members": [], "service": None, "service_enabled": None}
    if bridge_text is not None:
        parsed = parse_ifconfig(bridge_text)
        entry = parsed.get(device) or next(iter(parsed.values()), None)
        if entry is not None:
            bridge["exists"] = True
            bridge["members"] = list(entry["members"])
    if services is not None:
        for svc in services:
            if svc["device"] == device or svc["hardware_port"] == BRIDGE_PORT:
                bridge["service"], bridge["service_enabled"] = svc["name"], svc["enabled"]
                break
    else:
        bridge["service"] = next((port for port, dev in hwports.items() if dev == device), None)
    return bridge


def port_by_identity(hwports, interfaces, receptacle):
    """(hardware port, device) of Thunderbolt receptacle N on a Mac whose hardware ports are not
    named "Thunderbolt N" (macOS names them in the Mac's language): the port whose device
    `ifconfig -v` calls THUNDERBOLT_TYPE and whose name ends in N; (None, None) when none is."""
    for name, dev in sorted(hwports.items()):
        tail = re.search(r"(\d+)\s*$", name or "")
        if (interfaces.get(dev) or {}).get("type") == THUNDERBOLT_TYPE and tail and int(tail.group(1)) == receptacle:
            return name, dev
    return None, None


def thunderbolt_facts(
    sp_text, hwports_text, bridge_ifconfig_text=None, service_order_text=None, model_id=None, interfaces=None
):
    """Assemble `ansible_facts.mlx_thunderbolt` (docs/design.md) from captured outputs.

    `bridge_ifconfig_text` is `ifconfig bridge0` output, or None when bridge0 does not
    exist; `service_order_text` is None when it was not read; `interfaces`, parse_ifconfig()
    of `ifconfig -v`, finds a port whose hardware port is not "Thunderbolt N" by its type
    (port_by_identity). ParseError names the command whose output was bad.
    """
    facts = parse_system_profiler(sp_text)
    hwports = parse_hardware_ports(hwports_text)
    services = parse_service_order(service_order_text) if service_order_text is not None else None
    warnings = facts["warnings"]
    ports = []
    for port in facts["ports"]:
        iface = hwports.get(port["hardware_port"])
        if iface is None and interfaces:
            name, iface = port_by_identity(hwports, interfaces, port["receptacle"])
            port = dict(port, hardware_port=name) if name else port
        if iface is None:
            warnings.append(
                f"networksetup has no hardware port '{port['hardware_port']}' "
                f"(receptacle {port['receptacle']}, domain {port['domain_uuid'] or 'unknown'}): "
                f"its interface is unknown; run `{DETECT_FIX}` and gather facts again"
            )
        ports.append(dict(port, iface=iface))
    mac = dict(facts["mac"])
    if model_id:
        mac["model_id"] = model_id
    return {
        "mac": mac,
        "ports": ports,
        "hardware_ports": hwports,
        "bridge": _bridge(hwports, bridge_ifconfig_text, services),
        "warnings": warnings,
    }
