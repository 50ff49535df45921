# -*- coding: utf-8 -*-
"""Pure planning for the Thunderbolt link configuration of one Mac.

`plan_links()` compares what a Mac has (hardware ports, network services, runtime
addresses, bridge members, host routes) with the planned links and returns the argv
lists that converge it, in order. Nothing here runs a command: the module
`thunderbolt_links` reads the state, calls this, and runs (or, in check mode, only
reports) the actions.

Safety rules enforced here, not in the module:
- an interface Ansible connects over (`protected`) is never touched;
- only interfaces that are Thunderbolt hardware ports may be configured;
- a bridge is only disabled when every member is a Thunderbolt port; a bridge that
  carries anything else only loses the planned ports, at runtime: its definition in the
  network preferences is left alone (a warning says the ports come back at boot);
- a bridge that carries the management interface is not touched at all (refused).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_tb import THUNDERBOLT_TYPE

TB_PORT = re.compile(r"^Thunderbolt \d+$")


def thunderbolt_devices(hwports, interfaces):
    """The devices of a Mac's Thunderbolt ports: hardware port "Thunderbolt N", or (a Mac in
    another language names its ports in it) an interface `ifconfig -v` calls THUNDERBOLT_TYPE."""
    return {
        dev
        for port, dev in (hwports or {}).items()
        if dev and (TB_PORT.match(port or "") or ((interfaces or {}).get(dev) or {}).get("type") == THUNDERBOLT_TYPE)
    }


def getinfo_argv(service):
    """`networksetup -getinfo SERVICE`: what discovery, the network module and the capture read
    of a network service (parse_getinfo)."""
    return ["networksetup", "-getinfo", service]


def parse_getinfo(text):
    """Parse `networksetup -getinfo SERVICE`.

    Returns {"method": "manual"|"dhcp"|"bootp"|"off"|None, "address", "subnet", "router"}.
    Unknown lines are ignored; an error text ("... is not a recognized network service")
    raises ParseError.
    """
    if not isinstance(text, str):
        raise ParseError("networksetup -getinfo", "output is not text")
    if "not a recognized network service" in text or text.startswith("** Error"):
        raise ParseError("networksetup -getinfo", text.strip().splitlines()[0] if text.strip() else "error")
    info = {"method": None, "address": None, "subnet": None, "router": None}
    for line in text.splitlines():
        line = line.strip()
        low = line.lower()
        if low == "manual configuration":
            info["method"] = "manual"
        elif low == "dhcp configuration":
            info["method"] = "dhcp"
        elif low == "bootp configuration":
            info["method"] = "bootp"
        elif ":" in line:
            key, _, value = line.partition(":")
            value = value.strip()
            if value in ("", "(null)", "none"):
                value = None
            key = key.strip().lower()
            if key == "ip address":
                info["address"] = value
            elif key == "subnet mask":
                info["subnet"] = value
            elif key == "router":
                info["router"] = value
    return info


def parse_route_get(text):
    """Parse macOS `route -n get IP`: {"destination", "interface", "flags": [...]}.

    `route: writing to routing socket: not in table` (no route) gives interface None.
    """
    res = {"destination": None, "interface": None, "gateway": None, "flags": []}
    if not isinstance(text, str):
        return res
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "destination":
            res["destination"] = value
        elif key == "interface":
            res["interface"] = value
        elif key == "gateway":
            res["gateway"] = value
        elif key == "flags":
            res["flags"] = [f for f in value.strip("<>").split(",") if f]
    return res


# `netstat -rn` flag letters, named as `route -n get` prints them.
NETSTAT_FLAGS = {
    "1": "PROTO1",
    "2": "PROTO2",
    "3": "PROTO3",
    "B": "BLACKHOLE",
    "b": "BROADCAST",
    "C": "CLONING",
    "c": "PRCLONING",
    "D": "DYNAMIC",
    "G": "GATEWAY",
    "g": "GLOBAL",
    "H": "HOST",
    "I": "IFSCOPE",
    "i": "IFREF",
    "L": "LLINFO",
    "M": "MODIFIED",
    "m": "MULTICAST",
    "R": "REJECT",
    "r": "ROUTER",
    "S": "STATIC",
    "U": "UP",
    "W": "WASCLONED",
    "X": "XRESOLVE",
    "Y": "PROXY",
}
NETSTAT_ROUTES_ARGV = ["netstat", "-rn", "-f", "inet"]


def parse_netstat_routes(text):
    """Parse macOS `netstat -rn -f inet`: the host routes, {address: {"destination",
    "interface", "gateway", "flags": [...]}} with flags named as parse_route_get() names them.

    One command reads every host route, where `route -n get` reads one. Only what `route -n
    get ADDRESS` would answer with a host route is kept: entries scoped to an interface
    (flag I: ARP entries, scoped duplicates) do not serve an unscoped lookup and are left out,
    as are networks. An address without an entry here has no host route. Output without the
    "Destination Gateway Flags Netif" header raises ParseError.
    """
    if not isinstance(text, str):
        raise ParseError("netstat -rn -f inet", "output is not text")
    routes, netif, header = {}, None, False
    for line in text.splitlines():
        words = line.split()
        if words[:3] == ["Destination", "Gateway", "Flags"] and "Netif" in words:
            # macOS 11.3 and later: Destination Gateway Flags Netif Expire; before: ... Refs Use Netif
            netif, header = words.index("Netif"), True
            continue
        if line.startswith("Internet6"):
            netif = None  # IPv6 routes follow (without -f inet): not ours
            continue
        if netif is None or len(words) <= netif:
            continue
        dest, gateway, flags = words[:3]
        if "H" not in flags or "I" in flags or dest in routes:
            continue
        try:
            ipaddress.IPv4Address(dest)
        except ValueError:
            continue
        routes[dest] = {
            "destination": dest,
            "interface": words[netif],
            "gateway": gateway,
            "flags": [NETSTAT_FLAGS.get(f, f) for f in flags],
        }
    if not header:
        raise ParseError("netstat -rn -f inet", "no 'Destination Gateway Flags ... Netif' header: not a routing table")
    return routes


def route_of(routes, peer):
    """parse_route_get()'s answer for `peer` from parse_netstat_routes(): its host route, or
    no route (the lookup would find a network route or none; neither is a host route)."""
    return dict(routes.get(peer) or parse_route_get(""))


# The network preferences macOS keeps (what networksetup reads and writes, through
# SCPreferences): world-readable, so a read-only look at every service costs no command.
SC_PREFERENCES = "/Library/Preferences/SystemConfiguration/preferences.plist"
_SC_METHODS = {"Manual": "manual", "DHCP": "dhcp", "BOOTP": "bootp"}


def services_from_preferences(data, services):
    """The `networksetup -getinfo` answers for `services` ([{name, device}], as
    -listnetworkserviceorder lists them) read from the bytes of SC_PREFERENCES:
    {service name: {"method", "address", "subnet", "router"}} (parse_getinfo()'s shape).

    Only the current set's services count. A service is answered only when exactly one
    service of the current set sits on its device and that service's name (when it has one)
    is the listed name; anything unexpected leaves the service out, for `networksetup
    -getinfo` to answer. Data that is not such a property list gives {}.
    """
    import plistlib

    try:
        prefs = plistlib.loads(data)
        current = prefs["CurrentSet"].rsplit("/", 1)[-1]
        links = prefs["Sets"][current]["Network"]["Service"]
        defined = prefs["NetworkServices"]
        on_device = {}
        for key, link in links.items():
            target = str((link or {}).get("__LINK__") or f"/NetworkServices/{key}").rsplit("/", 1)[-1]
            svc = defined.get(target)
            if not isinstance(svc, dict):
                continue
            device = (svc.get("Interface") or {}).get("DeviceName")
            if device:
                on_device.setdefault(device, []).append(svc)
    except (plistlib.InvalidFileException, ValueError, TypeError, KeyError, AttributeError, IndexError):
        return {}
    out = {}
    for listed in services or []:
        found = on_device.get(listed.get("device")) or []
        if len(found) != 1 or not listed.get("name"):
            continue
        svc = found[0]
        if svc.get("UserDefinedName") not in (None, listed["name"]):
            continue
        v4 = svc.get("IPv4")
        if not isinstance(v4, dict) or not isinstance(v4.get("ConfigMethod"), str):
            continue
        method = v4["ConfigMethod"]
        first = lambda key: (v4.get(key) or [None])[0] if isinstance(v4.get(key), list) else None  # noqa: E731, B023 - used at once, in this iteration
        info = {
            "method": _SC_METHODS.get(method, method.lower()),
            "address": None,
            "subnet": None,
            "router": v4.get("Router") if isinstance(v4.get("Router"), str) else None,
        }
        if method == "Manual":
            info.update(address=first("Addresses"), subnet=first("SubnetMasks"))
        out[listed["name"]] = info
    return out


def services_from_preferences_file(path, services):
    """services_from_preferences() of the file at `path` (SC_PREFERENCES on a Mac); {} when it
    cannot be read, so every service is left to `networksetup -getinfo`."""
    try:
        with open(path, "rb") as f:
            return services_from_preferences(f.read(), services)
    except OSError:
        return {}


def read_preferences(path=SC_PREFERENCES):
    """The bytes of the network preferences file, or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


# Where macOS keeps a bridge's definition in the preferences: configd's InterfaceNamer
# creates every bridge defined here at boot (and on each change applied), marks it up and
# adds every listed member, whether or not the bridge's network service is enabled
# (configd BridgeConfiguration.c, _SCBridgeInterfaceUpdateConfiguration). What
# `ifconfig bridgeN deletem` does is lost at the next boot.
BRIDGE_PREFS_PATH = "/VirtualNetworkInterfaces/Bridge/{}"
_BSD_NAME = re.compile(r"^[a-z]+[0-9]+$")


def bridges_from_preferences(data):
    """The bridges the preferences file (bytes of SC_PREFERENCES) defines:
    {BSD name: {"members": [BSD name, ...], "allow_configured": bool}}, {} when it defines
    none. None when `data` is not such a property list or a definition is malformed (the
    caller cannot tell what macOS will build at boot)."""
    import plistlib

    try:
        prefs = plistlib.loads(data)
    except (plistlib.InvalidFileException, ValueError, TypeError, AttributeError, KeyError, IndexError):
        return None
    if not isinstance(prefs, dict):
        return None
    defined = prefs.get("VirtualNetworkInterfaces") or {}
    if not isinstance(defined, dict):
        return None
    bridges = defined.get("Bridge") or {}
    if not isinstance(bridges, dict):
        return None
    out = {}
    for name, entry in bridges.items():
        members = entry.get("Interfaces", []) if isinstance(entry, dict) else None
        options = (entry.get("Options") or {}) if isinstance(entry, dict) else None
        if (
            not isinstance(members, list)
            or not all(isinstance(m, str) for m in members)
            or not isinstance(options, dict)
        ):
            return None
        out[name] = {"members": list(members), "allow_configured": options.get("AllowConfiguredMembers") is True}
    return out


def bridge_members_action(bridge, members, take_out):
    """The action that leaves `members` (the definition's members without `take_out`) as
    the persistent members of `bridge`: an `scutil --prefs` session (SCPreferences: locked,
    committed and applied as networksetup does; macOS has no networksetup verb for bridge
    members) whose commands go in on standard input. scutil prints nothing when every
    command worked and exits 0 either way: the module reads the file back."""
    for name in [bridge, *members]:
        if not _BSD_NAME.fullmatch(name or ""):
            raise LinkPlanError(f"refusing to edit the definition of {bridge}: '{name}' is not an interface name")
    path = BRIDGE_PREFS_PATH.format(bridge)
    script = (
        "\n".join(
            [
                "lock",
                f"get {path}",
                "d.add Interfaces * " + " ".join(members),
                f"set {path}",
                "commit",
                "apply",
                "unlock",
                "quit",
            ]
        )
        + "\n"
    )
    return {
        "argv": ["scutil", "--prefs"],
        "stdin": script,
        "why": f"remove {', '.join(take_out)} from the definition of {bridge} in the network preferences "
        f"(macOS rebuilds {bridge} from it at every boot, with its members, even when its service is off)",
        "persistent": {"bridge": bridge, "members": list(members), "removed": list(take_out)},
    }


def netmask(prefix):
    return str(ipaddress.IPv4Network(f"0.0.0.0/{int(prefix)}").netmask)


class LinkPlanError(Exception):
    """A plan that must not be applied (it would touch an interface outside the plan)."""


def stale_ports(links, hwports, interfaces, pool, protected=()):
    """{iface: [address]}: Thunderbolt ports outside the plan, without a cable now (no
    carrier), that still hold /30 addresses from the cluster's `pool`: the old end of a cable
    that was unplugged or moved. Ports with a cable, other addresses and protected interfaces
    are never listed."""
    if not pool:
        return {}
    try:
        pool = ipaddress.ip_network(pool, strict=False)
    except ValueError:
        return {}
    planned = {link["iface"] for link in links}
    tb = thunderbolt_devices(hwports, interfaces)
    out = {}
    for _port, iface in sorted(hwports.items()):
        info = interfaces.get(iface) or {}
        if iface not in tb or iface in planned or iface in protected or info.get("status") != "inactive":
            continue
        addrs = []
        for a in info.get("ipv4") or []:
            try:
                if ipaddress.ip_address(a.get("address")) in pool and int(a.get("prefix", -1)) == 30:
                    addrs.append(a["address"])
            except (TypeError, ValueError):
                continue
        if addrs:
            out[iface] = addrs
    return out


def plan_links(
    links,
    hwports,
    services,
    interfaces,
    service_info,
    routes,
    protected=(),
    bridge="bridge0",
    bridge_service="",
    host_routes=True,
    stale=None,
    persistent=None,
):
    """Return (actions, warnings, before, after) to converge a Mac on `links`.

    links: [{iface, address, prefix, peer_address}]
    hwports: {"Thunderbolt 1": "en2", ...} (networksetup -listallhardwareports)
    services: [{name, hardware_port, device, enabled}] (-listnetworkserviceorder)
    bridge_service: the bridge's network service by name; empty: the service whose device is
        `bridge`, whatever macOS named it (it names it in the Mac's language: "Thunderbolt
        Bridge", "Thunderbolt-Brücke", "Pont Thunderbolt", ...)
    interfaces: {iface: {ipv4: [{address, prefix}], members: [...]}} (ifconfig)
    service_info: {service name: parse_getinfo(...)} for the services of planned ifaces
    routes: {peer_address: parse_route_get(...)}
    stale: {iface: [address]} from stale_ports(): those addresses are removed, and the
        port's service goes back to DHCP (the macOS default) when it holds one of them
        (service_info must then have that service too)
    persistent: `bridge`'s definition in the network preferences, as
        bridges_from_preferences() gives it ({"members": [...]}; {} when the bridge is not
        defined), or None when not known (not checked; the caller says so). Planned ports
        listed there are removed from it, so the next boot does not put them back into the
        bridge.
    Each action is {"argv": [...], "why": "..."}; argv[0] is a command name the module
    resolves with get_bin_path.
    """
    protected = set(protected or ())
    port_of_iface = {dev: port for port, dev in hwports.items() if dev}
    tb_ifaces = thunderbolt_devices(hwports, interfaces)
    planned = _planned_links(links, protected, tb_ifaces, port_of_iface)
    plan = _LinkPlan()
    # 1. The Thunderbolt Bridge: take the planned ports out of it, now (ifconfig) and for
    # every boot to come (its definition in the preferences, which configd builds it from).
    _plan_bridge(plan, planned, tb_ifaces, protected, services, interfaces, bridge, bridge_service, persistent)
    # 2. One network service per planned port, manual /30, enabled; then the runtime
    # addresses, then the host routes. Runtime actions come after every networksetup change
    # and carry `runtime` (what they do), so the module can skip one networksetup already did
    # (macOS applies a manual address of an enabled service at once).
    by_device = {s.get("device"): s for s in services if s.get("device")}
    for iface in sorted(planned):
        _plan_port(plan, iface, planned[iface], port_of_iface, by_device, interfaces, service_info, routes, host_routes)
    # 3. The old ends of unplugged or moved cables: forget the cluster's addresses there.
    for iface, addrs in sorted((stale or {}).items()):
        if iface in planned or iface in protected:
            continue
        _plan_stale_port(plan, iface, addrs, by_device.get(iface), service_info)
    return plan.actions + plan.runtime + plan.routes, plan.warnings, plan.before, plan.after


@dataclass
class _LinkPlan:
    """What plan_links() builds, phase by phase: `actions` (networksetup, the bridge), then
    `runtime` (ifconfig addresses), then `routes` (host routes), in that order in its result;
    `warnings`; `before` and `after`, by interface ("bridge" for the bridge)."""

    actions: list = field(default_factory=list)
    runtime: list = field(default_factory=list)
    routes: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)


def _planned_links(links, protected, tb_ifaces, port_of_iface):
    """{iface: link} for `links`; LinkPlanError for a link on a protected interface, on an
    interface that is not a Thunderbolt port, or a second link on one interface."""
    planned = {}
    for link in links:
        iface = link["iface"]
        if iface in protected:
            raise LinkPlanError(
                f"refusing to configure {iface}: it is the management interface (the one "
                f"Ansible connects over). Re-cable so the cluster uses other Thunderbolt "
                f"ports, or connect Ansible over another interface."
            )
        if iface not in tb_ifaces:
            kind = port_of_iface.get(iface)
            what = f"hardware port '{kind}'" if kind else "no hardware port"
            raise LinkPlanError(
                f"refusing to configure {iface}: it is not a Thunderbolt port ({what}). "
                f"The plan only touches the Thunderbolt cables it discovered; re-run "
                f"discovery if the wiring changed."
            )
        if iface in planned:
            raise LinkPlanError(f"two planned links on {iface}: the plan is inconsistent")
        planned[iface] = link
    return planned


# ---- phase 1: the Thunderbolt Bridge


def _plan_bridge(plan, planned, tb_ifaces, protected, services, interfaces, bridge, bridge_service, persistent):
    """Phase 1 of plan_links(): the planned ports out of `bridge` at runtime and out of its
    definition (`persistent`), and its service off when every member is a Thunderbolt port."""
    members = list((interfaces.get(bridge) or {}).get("members") or [])
    persisted = None if persistent is None else list(persistent.get("members") or [])
    bridge_svc = next(
        (s for s in services if (s.get("name") == bridge_service if bridge_service else s.get("device") == bridge)),
        None,
    )
    bridge_service = bridge_svc["name"] if bridge_svc else bridge_service or bridge
    foreign = [m for m in members if m not in tb_ifaces]
    persisted_foreign = [m for m in persisted or [] if m not in tb_ifaces]
    service_enabled = bool(bridge_svc and bridge_svc.get("enabled"))
    plan.before["bridge"] = {
        "members": members,
        "persistent_members": persisted,
        "service_enabled": service_enabled,
    }
    take_out = [m for m in members if m in planned]
    forget = [m for m in persisted or [] if m in planned]
    _refuse_a_management_bridge(bridge, protected, members, persisted, take_out, forget)
    if take_out:
        # One ifconfig for all of them (`ifconfig bridge0 deletem en2 deletem en3`, as BSD
        # ifconfig takes any number of operations): one command instead of one per port.
        plan.actions.append(
            {
                "argv": ["ifconfig", bridge] + [w for m in take_out for w in ("deletem", m)],
                "why": f"take {', '.join(take_out)} out of {bridge} (a bridged port cannot carry its own address)",
            }
        )
    _plan_bridge_definition(plan, bridge, planned, persisted, persisted_foreign, forget)
    if planned and service_enabled:
        _plan_bridge_service_off(plan, bridge, bridge_service, foreign)
    plan.after["bridge"] = {
        "members": [m for m in members if m not in planned],
        "persistent_members": _persistent_members_after(persisted, persisted_foreign, planned),
        "service_enabled": service_enabled and bool(foreign or not planned),
        # disabled only when every member is a Thunderbolt port (see _plan_bridge_service_off)
    }


def _refuse_a_management_bridge(bridge, protected, members, persisted, take_out, forget):
    """LinkPlanError when ports are to leave `bridge` (now or in its definition) and the bridge
    is, or carries, an interface Ansible connects over."""
    if (take_out or forget) and (bridge in protected or protected & set(members + (persisted or []))):
        via = bridge if bridge in protected else ", ".join(sorted(protected & set(members + (persisted or []))))
        raise LinkPlanError(
            f"refusing to take {', '.join(sorted(set(take_out + forget)))} out of {bridge}: it carries the "
            f"management interface ({via}), the one Ansible connects over. Connect Ansible over "
            f"another interface, or take the ports out of the Thunderbolt Bridge by hand."
        )


def _plan_bridge_definition(plan, bridge, planned, persisted, persisted_foreign, forget):
    """The planned ports listed in the bridge's definition (`forget`) leave it, unless the
    definition also lists other interfaces: then it is left alone, with a warning."""
    if forget and persisted_foreign:
        plan.warnings.append(
            f"the definition of {bridge} also lists {', '.join(persisted_foreign)}; leaving it alone, so after a "
            f"reboot {', '.join(forget)} are bridged again (System Settings > Network > ... > Manage Virtual "
            f"Interfaces: remove them from the bridge)"
        )
    elif forget:
        plan.actions.append(bridge_members_action(bridge, [m for m in persisted if m not in planned], forget))


def _plan_bridge_service_off(plan, bridge, bridge_service, foreign):
    """The bridge's enabled service goes off when every member is a Thunderbolt port; a bridge
    that also carries `foreign` members keeps it, with a warning."""
    if foreign:
        plan.warnings.append(
            f"{bridge} also carries {', '.join(foreign)}; leaving the '{bridge_service}' "
            f"service enabled and only removing the planned Thunderbolt ports from it"
        )
    else:
        plan.actions.append(
            {
                "argv": ["networksetup", "-setnetworkserviceenabled", bridge_service, "off"],
                "why": f"disable the '{bridge_service}' service: {bridge} gets no address of its own "
                f"(DHCP or link-local) on the remaining ports",
            }
        )


def _persistent_members_after(persisted, persisted_foreign, planned):
    """The bridge definition's members once the plan is applied: unknown (None), left alone
    (it lists other interfaces too), or without the planned ports."""
    if persisted is None:
        return None
    if persisted_foreign:
        return persisted
    return [m for m in persisted if m not in planned]


# ---- phase 2: one planned port


def _plan_port(plan, iface, link, port_of_iface, by_device, interfaces, service_info, routes, host_routes):
    """Phase 2 of plan_links() for one planned link on `iface`: its service, its address now,
    the host route to its peer; its before and after."""
    address, prefix, peer = link["address"], int(link.get("prefix", 30)), link["peer_address"]
    mask = netmask(prefix)
    port = port_of_iface[iface]
    svc = by_device.get(iface)
    name = svc["name"] if svc else port
    info = _plan_service(plan, iface, port, svc, name, service_info, address, prefix, mask)
    current = [a for a in ((interfaces.get(iface) or {}).get("ipv4") or [])]
    _plan_runtime_address(plan, iface, current, address, prefix, mask)
    if host_routes:
        _plan_host_route(plan, iface, peer, routes.get(peer) or {})
    plan.before[iface] = {
        "service": name if svc else None,
        "persistent": _persistent_text(info),
        "runtime": [f"{a['address']}/{a['prefix']}" for a in current],
    }
    plan.after[iface] = {
        "service": name,
        "persistent": f"{address}/{mask}",
        "runtime": [f"{address}/{prefix}"],
        "peer": peer,
    }


def _plan_service(plan, iface, port, svc, name, service_info, address, prefix, mask):
    """The network service `name` of `port`: created or enabled as needed, and the planned
    address persisted on it unless it is there already. Returns its parse_getinfo() ({}
    when not known)."""
    if svc is None:
        plan.actions.append(
            {
                "argv": ["networksetup", "-createnetworkservice", name, port],
                "why": f"create a network service for {port} ({iface})",
            }
        )
    elif not svc.get("enabled"):
        plan.actions.append(
            {
                "argv": ["networksetup", "-setnetworkserviceenabled", name, "on"],
                "why": f"enable the '{name}' service",
            }
        )
    info = service_info.get(name) or {}
    if not (info.get("method") == "manual" and info.get("address") == address and info.get("subnet") == mask):
        plan.actions.append(
            {
                "argv": ["networksetup", "-setmanual", name, address, mask],
                "why": f"persist {address}/{prefix} on '{name}' ({iface})",
            }
        )
    return info


def _plan_runtime_address(plan, iface, current, address, prefix, mask):
    """Every other address of `iface` (`current`) removed now, and the planned one set."""
    have = any(a.get("address") == address and int(a.get("prefix", -1)) == prefix for a in current)
    for a in current:
        if a.get("address") != address:
            plan.runtime.append(
                {
                    "argv": ["ifconfig", iface, "inet", a["address"], "delete"],
                    "why": f"remove stale {a['address']} from {iface}",
                    "runtime": {"iface": iface, "op": "delete", "address": a["address"]},
                }
            )
    if not have:
        plan.runtime.append(
            {
                "argv": ["ifconfig", iface, "inet", address, "netmask", mask],
                "why": f"set {address}/{prefix} on {iface} now",
                "runtime": {"iface": iface, "op": "set", "address": address, "prefix": prefix},
            }
        )


def _plan_host_route(plan, iface, peer, route):
    """A host route to `peer` over `iface`, added (or changed) unless `route` is one."""
    ok = route.get("interface") == iface and "HOST" in (route.get("flags") or []) and route.get("destination") == peer
    if not ok:
        plan.routes.append(
            {
                "argv": [
                    "route",
                    "-n",
                    "add" if not _has_host_route(route, peer) else "change",
                    "-host",
                    peer,
                    "-interface",
                    iface,
                ],
                "why": f"host route to {peer} over {iface}",
            }
        )


def _persistent_text(info):
    """A service's persistent configuration in before/after: "address/mask" when manual,
    else its method (None when not known)."""
    if info and info.get("method") == "manual":
        return f"{info.get('address')}/{info.get('subnet')}"
    return (info or {}).get("method")


# ---- phase 3: the old end of a cable


def _plan_stale_port(plan, iface, addrs, svc, service_info):
    """Phase 3 of plan_links() for one stale port: `addrs` removed from `iface` now, and its
    service (`svc`) back to DHCP when it holds one of them."""
    info = service_info.get(svc["name"]) if svc else None
    forgotten = bool(info and info.get("method") == "manual" and info.get("address") in addrs)
    if forgotten:
        plan.actions.append(
            {
                "argv": ["networksetup", "-setdhcp", svc["name"]],
                "why": f"forget {info['address']} on '{svc['name']}' ({iface}): no cable there now",
            }
        )
    for a in addrs:
        plan.runtime.append(
            {
                "argv": ["ifconfig", iface, "inet", a, "delete"],
                "why": f"remove {a} from {iface}: the cable it addressed is gone",
                "runtime": {"iface": iface, "op": "delete", "address": a},
            }
        )
    plan.before[iface] = {
        "service": svc["name"] if svc else None,
        "runtime": [f"{a}/30" for a in addrs],
        "persistent": _persistent_text(info),
    }
    plan.after[iface] = {
        "service": svc["name"] if svc else None,
        "runtime": [],
        "persistent": "dhcp" if forgotten else plan.before[iface]["persistent"],
    }


def runtime_done(action, interfaces):
    """True when a `runtime` action of plan_links() is already true of `interfaces` (parsed
    `ifconfig`): the address is there with its prefix (set), or gone (delete)."""
    rt = action.get("runtime")
    if not rt:
        return False
    have = (interfaces.get(rt["iface"]) or {}).get("ipv4") or []
    if rt["op"] == "set":
        return any(a.get("address") == rt["address"] and int(a.get("prefix", -1)) == rt["prefix"] for a in have)
    return not any(a.get("address") == rt["address"] for a in have)


def _has_host_route(route, peer):
    return route.get("destination") == peer and "HOST" in (route.get("flags") or [])


# ---- verification: one ping per cable ------------------------------------------------


def _slash30(address, prefix):
    """The ip_interface of address/prefix when it is a host address of a /30, else None."""
    try:
        iface = ipaddress.ip_interface(f"{address}/{int(prefix)}")
    except (TypeError, ValueError):
        return None
    first = int(iface.network.network_address)
    if iface.network.prefixlen != 30 or int(iface.ip) not in (first + 1, first + 2):
        return None
    return iface


def slash30_partner(address, prefix=30):
    """The other host address of the /30 `address` sits in (None for any other prefix, the
    network or broadcast address, or a bad address)."""
    iface = _slash30(address, prefix)
    if iface is None:
        return None
    first = int(iface.network.network_address)
    return str(ipaddress.IPv4Address(first + 3 - (int(iface.ip) - first)))


def pings_from_here(address, prefix=30):
    """True when this end of a /30 pings the cable when the plan is not known yet (discovery):
    the end holding the /30's first host address. Both ends can tell without asking the other,
    and an echo and its reply cross the cable both ways, so one ping per cable checks it."""
    iface = _slash30(address, prefix)
    return iface is not None and int(iface.ip) == int(iface.network.network_address) + 1


def ping_argv(ping, link, count, timeout):
    """macOS `ping` of the peer from this end's address (`-S`), so only this cable can carry
    the answer; `-o` stops at the first reply, `-c`/`-t` bound the requests and the seconds.
    Exit status 0: at least one reply."""
    return [ping, "-q", "-o", "-c", str(count), "-t", str(timeout), "-S", link["address"], link["peer_address"]]


def describe_link(link):
    return (
        f"cable {link.get('cable', '?')}: {link.get('iface')} {link.get('address')} -> "
        f"{link.get('peer_host', '?')}:{link.get('peer_iface', '?')} {link.get('peer_address')}"
    )


def ping_result(link, ok, attempts=1, carrier=True, lost=False):
    """One verified cable for a module's result: the link's names, ok, and for a silent
    cable a `problem` line that says what was seen (no carrier, carrier lost meanwhile)."""
    res = {k: link.get(k) for k in ("cable", "iface", "address", "peer_host", "peer_iface", "peer_address")}
    res.update(ok=bool(ok), attempts=attempts, carrier=bool(carrier) and not lost)
    if not ok:
        iface, peer = link.get("iface"), link.get("peer_host", "?")
        note = (
            f" ({iface} lost its carrier while waiting: {peer} went off or the cable was pulled)"
            if lost
            else ""
            if carrier
            else f" ({iface} has no carrier)"
        )
        res["problem"] = describe_link(link) + note
    return res


def pinged_from_the_other_end(link):
    """True when the cable id's first end (ids are `host:iface~host:iface`, ends sorted) is
    the peer's: the peer pings this cable. An echo request and its reply cross the cable
    both ways, using both ends' addresses and routes, so one ping per cable checks it."""
    first = str(link.get("cable") or "").split("~")[0]
    return bool(first) and first == f"{link.get('peer_host')}:{link.get('peer_iface')}"


NO_ANSWER_FIX = (
    "Fix: check that the cable is plugged in at both ends (System Information > Thunderbolt "
    "shows the peer), then re-run the network stage."
)


def no_answer_msg(no_answer):
    """The failure message for cables that did not answer a ping ([{"problem": str}, ...])."""
    return (
        "no answer over "
        + "; ".join(x["problem"] for x in no_answer)
        + ". "
        + NO_ANSWER_FIX
        + " When another Mac failed to apply its side, fix that first."
    )
