# -*- coding: utf-8 -*-
"""Pure parsers for RDMA over Thunderbolt on macOS (docs/design.md, `mlx_rdma`).

macOS 26.2+ exposes one verbs device per Thunderbolt interface, named `rdma_<iface>`
(`rdma_en2`), listed by `ibv_devices` and described by `ibv_devinfo -v`. RDMA is switched
on from Recovery with `rdma_ctl enable`; `rdma_ctl status` reports it. JACCL picks the
IPv4-mapped GID (::ffff:a.b.c.d) of each device, which only appears once the interface
has an IPv4 address.
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError, small_int, to_text

IBV_DEVICES_COMMAND = "ibv_devices"
IBV_DEVINFO_COMMAND = "ibv_devinfo -v"
RDMA_CTL_COMMAND = "rdma_ctl status"

RECOVERY_ENABLE = "boot into macOS Recovery (hold the power button), open Terminal, run `rdma_ctl enable`, reboot"
# The first macOS a switch in System Settings is reported for (a WWDC26 session shows one for
# the macOS after 26); no Mac or capture here settles where it is, so the text says so.
SETTINGS_SWITCH_FROM = 27


def enable_fix(product_version=None):
    """How to turn RDMA on, by the Mac's macOS version (`sw_vers -productVersion`): Recovery and
    `rdma_ctl enable` on macOS 26 (Apple's and MLX's instructions); on macOS 27 and later, first the
    switch in System Settings reported for it (unverified), then Recovery; an unknown version
    gets the Recovery steps."""
    try:
        major = int(str(product_version).split(".")[0])
    except (TypeError, ValueError):
        major = None
    if major is not None and major >= SETTINGS_SWITCH_FROM:
        return (
            f"on macOS {product_version}, turn RDMA on in System Settings if it offers the switch (shown for "
            f"macOS {SETTINGS_SWITCH_FROM} at WWDC26; unverified: no capture of it yet), else {RECOVERY_ENABLE}"
        )
    return RECOVERY_ENABLE


FIX_ENABLE = enable_fix()
FIX_NO_DEVICES = (
    "use Macs with Thunderbolt 5 ports on macOS 26.2 or later (`sw_vers -productVersion`), then check `rdma_ctl status`"
)
FIX_NETWORK = "run the network stage (it gives each cabled Thunderbolt interface its link address)"

_NAME = r"[A-Za-z0-9_.\-]+"
_DEVICE_LINE = re.compile(rf"^\s*({_NAME})(?:\s+([0-9a-fA-F]{{16}}))?\s*$")
_DEVICES_HEADER = re.compile(r"^\s*(device\s+node GUID|-+\s+-+)\s*$")


def iface_of(device):
    """'rdma_en2' -> 'en2'; a name without the prefix (not an Apple device) -> None."""
    if not device.startswith("rdma_"):
        return None
    return device[len("rdma_") :] or None


def parse_ibv_devices(text):
    """Parse `ibv_devices`: the device names in the order listed.

    "No IB devices found", the bare header or empty output give []; any other line that is
    not a device row raises ParseError.
    """
    text, _ = to_text(text, IBV_DEVICES_COMMAND)
    names = []
    for line in text.splitlines():
        if not line.strip() or _DEVICES_HEADER.match(line) or "no ib devices found" in line.lower():
            continue
        m = _DEVICE_LINE.match(line)
        if not m:
            raise ParseError(IBV_DEVICES_COMMAND, f"unexpected line: {line.strip()[:80]!r}")
        names.append(m.group(1))
    return names


_HCA = re.compile(rf"^\s*hca_id:\s*({_NAME})\s*$")
_PORT = re.compile(r"^\s*port:\s*(\d+)\s*$")
_STATE = re.compile(r"^\s*state:\s*(PORT_[A-Z_]+)")
_ACTIVE_MTU = re.compile(r"^\s*active_mtu:\s*(\d+)")
_LINK_LAYER = re.compile(r"^\s*link_layer:\s*(\S.*?)\s*$")
_TRANSPORT = re.compile(r"^\s*transport:\s*(\S.*?)\s*$")
_GID = re.compile(r"^\s*GID\[\s*(\d+)\]:\s*([0-9A-Fa-f:.]+)\s*(?:,\s*(.*?))?\s*$")


def normalise_gid(text):
    """A GID as compressed IPv6 text; IPv4-mapped ones as '::ffff:a.b.c.d'. All-zero or bad -> None."""
    try:
        addr = ipaddress.IPv6Address(text)
    except ValueError:
        return None
    if int(addr) == 0:
        return None
    if addr.ipv4_mapped is not None:
        return f"::ffff:{addr.ipv4_mapped}"
    return addr.compressed


def parse_ibv_devinfo(text):
    """Parse `ibv_devinfo -v` (also plain `ibv_devinfo`, which has no GIDs).

    Returns [{"name", "transport", "link_layer", "port_state", "active_mtu", "gids"}] in
    output order. The first port gives port_state/active_mtu (Apple devices have one);
    gids gathers every populated GID of every port, normalised, without duplicates.
    Text with content but no hca_id raises ParseError.
    """
    text, _ = to_text(text, IBV_DEVINFO_COMMAND)
    devices, dev, port = [], None, None
    for line in text.splitlines():
        m = _HCA.match(line)
        if m:
            dev = {
                "name": m.group(1),
                "transport": None,
                "link_layer": None,
                "port_state": None,
                "active_mtu": None,
                "gids": [],
            }
            devices.append(dev)
            port = None
            continue
        if dev is None:
            if line.strip() and "no ib devices found" not in line.lower():
                raise ParseError(IBV_DEVINFO_COMMAND, f"unexpected line before any hca_id: {line.strip()[:80]!r}")
            continue
        m = _PORT.match(line)
        if m:
            port = small_int(m.group(1))
            continue
        first_port = port is None or port == 1 or dev["port_state"] is None
        for regex, key in ((_STATE, "port_state"), (_ACTIVE_MTU, "active_mtu"), (_LINK_LAYER, "link_layer")):
            m = regex.match(line)
            if m and first_port and dev[key] is None:
                dev[key] = small_int(m.group(1)) if key == "active_mtu" else m.group(1)
        m = _TRANSPORT.match(line)
        if m and port is None:
            dev["transport"] = m.group(1)
        m = _GID.match(line)
        if m:
            gid = normalise_gid(m.group(2))
            if gid and gid not in dev["gids"]:
                dev["gids"].append(gid)
    return devices


def parse_rdma_ctl(text):
    """Parse `rdma_ctl status`: 'enabled' or 'disabled'; anything else raises ParseError."""
    text, _ = to_text(text, RDMA_CTL_COMMAND)
    lowered = re.sub(r"\bnot\s+enabled\b", "disabled", text.lower())
    words = set(re.findall(r"[a-z]+", lowered))
    if "disabled" in words and "enabled" not in words:
        return "disabled"
    if "enabled" in words and "disabled" not in words:
        return "enabled"
    snippet = text.strip()[:80] or "empty output"
    raise ParseError(RDMA_CTL_COMMAND, f"neither 'enabled' nor 'disabled': {snippet!r}")


def _problem(code, iface, msg, fix):
    return {"code": code, "iface": iface, "msg": msg, "fix": fix}


def _problems(rdma_ctl, devices, cabled, tools_missing):
    if rdma_ctl == "disabled":
        return [_problem("rdma_disabled", None, "RDMA over Thunderbolt is disabled (`rdma_ctl status`)", FIX_ENABLE)]
    if not devices:
        why = (
            "ibv_devices is not installed" if tools_missing else "RDMA is not disabled but ibv_devices lists no device"
        )
        return [
            _problem(
                "no_devices",
                None,
                f"{why}: Thunderbolt 4 hardware (RDMA needs Thunderbolt 5) or macOS older than 26.2",
                FIX_NO_DEVICES,
            )
        ]
    problems = []
    for dev in devices:
        iface = dev["iface"]
        if iface in cabled and dev["port_state"] != "PORT_ACTIVE":
            problems.append(
                _problem(
                    "port_down",
                    iface,
                    f"{dev['name']} is {dev['port_state'] or 'not reported by ibv_devinfo'} "
                    f"although {iface} has a Thunderbolt cable",
                    f"check/reseat the cable on {iface} (both ends; use a Thunderbolt 5 cable)",
                )
            )
        elif dev["port_state"] == "PORT_ACTIVE" and not dev["ipv4_gid"]:
            problems.append(
                _problem(
                    "no_ipv4_gid",
                    iface,
                    f"{dev['name']} has no IPv4-mapped GID (JACCL needs one): the interface has no IPv4 address yet",
                    FIX_NETWORK,
                )
            )
    return problems


def rdma_facts(ibv_devices_text, ibv_devinfo_text, rdma_ctl_text=None, cabled_ifaces=None, hung=None):
    """Assemble `ansible_facts.mlx_rdma` (docs/design.md) from captured outputs.

    `ibv_devices_text` None means the ibv_* tools are not installed (no RDMA);
    `ibv_devinfo_text` None means it was not read; `rdma_ctl_text` None means rdma_ctl is
    not present. `cabled_ifaces` are the interfaces whose Thunderbolt port has a cable.
    `hung` ({"command", "msg", "fix"}) is an RDMA probe that did not answer (the texts of
    the probes after it are None): RDMA is not usable, and that is the only problem named
    (what the other probes would say is unknown).
    """
    if hung is not None:
        facts = rdma_facts(ibv_devices_text or "", ibv_devinfo_text, rdma_ctl_text, cabled_ifaces)
        problem = _problem("no_answer", None, hung["msg"], hung["fix"])
        problem["command"] = hung["command"]
        return dict(facts, usable=False, problems=[problem])
    tools_missing = ibv_devices_text is None
    names = parse_ibv_devices(ibv_devices_text) if not tools_missing else []
    info = {d["name"]: d for d in parse_ibv_devinfo(ibv_devinfo_text)} if ibv_devinfo_text is not None else {}
    rdma_ctl = parse_rdma_ctl(rdma_ctl_text) if rdma_ctl_text is not None else None
    devices = []
    for name in names + [n for n in info if n not in names]:
        d = info.get(name, {})
        gids = list(d.get("gids", []))
        devices.append(
            {
                "name": name,
                "iface": iface_of(name),
                "port_state": d.get("port_state"),
                "active_mtu": d.get("active_mtu"),
                "ipv4_gid": any(g.startswith("::ffff:") and "." in g for g in gids),
                "gids": gids,
            }
        )
    devices.sort(key=lambda d: _natural(d["name"]))
    cabled = set(cabled_ifaces or [])
    return {
        "rdma_ctl": rdma_ctl,
        "devices": devices,
        "usable": rdma_ctl != "disabled" and bool(devices),
        "problems": _problems(rdma_ctl, devices, cabled, tools_missing),
    }


def _natural(name):
    """'rdma_en10' after 'rdma_en9': digit runs (odd positions of the split) compare by value."""
    parts = re.split(r"(\d+)", name)
    return [(len(p.lstrip("0")), p.lstrip("0")) if i % 2 else p for i, p in enumerate(parts)]
