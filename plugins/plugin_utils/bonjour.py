# -*- coding: utf-8 -*-
"""The Macs that announce ssh over Bonjour (mDNS / DNS-SD), as inventory hosts: the inventory
plugin mlx.cluster.bonjour's rules.

- `choose_hosts(records, networks, ...)` (pure): the announcements a browse found -> the hosts
  of the group `mac_cluster` (name, address, port), in a stable order, and the warnings.
- `nothing_found(...)` (pure): the error when no Mac is left.
- `browse(service_types, seconds)` and `controller_networks()`: what the LAN and this machine
  say (zeroconf, ifaddr); nothing else here touches the network.

A record is one announced service instance as the browse resolved it:
``{"type": "_ssh._tcp.local.", "instance": "Studio 1", "server": "Studio-1.local.",
"port": 22, "addresses": ["192.168.1.20", "169.254.12.7"]}``; ``server`` is None and
``addresses`` empty for an instance that did not resolve in time.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import time

# What a Mac with Remote Login on announces: launchd registers sshd's socket under both
# (/System/Library/LaunchDaemons/ssh.plist, Sockets > Listeners > Bonjour: ssh, sftp-ssh).
SERVICE_TYPES = ("_ssh._tcp.local.", "_sftp-ssh._tcp.local.")
GROUP = "mac_cluster"
SSH_PORT = 22
# The Thunderbolt Bridge's self-assigned addresses: never how the controller reaches a Mac.
LINK_LOCAL = ipaddress.ip_network("169.254.0.0/16")
# mlx_cluster_ip_pool's default: where the network stage puts each cable's /30.
THUNDERBOLT_POOL = "10.208.0.0/16"
# A network of the controller's with a prefix this long or longer is a point-to-point link (a
# Thunderbolt cable to the controller itself: one /30 per cable), not the LAN.
POINT_TO_POINT_PREFIX = 30
# A DNS label (RFC 1123), which macOS's local host name always is: a valid Ansible host name.
HOST_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
FIX = (
    "turn Remote Login on in System Settings > General > Sharing on each Mac; keep this "
    "controller on the same LAN as the Macs (mDNS does not cross routers); or write "
    "inventory/mac_cluster/hosts.yml by hand (README, On real Macs)"
)


def host_name(server, instance):
    """The inventory name of a Mac: its mDNS host name (the SRV record's target, `Studio-1.local.`,
    macOS's Local Hostname) without `.local.`; when that is not a DNS label, the instance name
    (macOS's Computer Name, `Studio 1`) with every run of other characters made one `-`. None
    when neither gives a name."""
    if server:
        name = server.rstrip(".")
        if name.lower().endswith(".local"):
            name = name[: -len(".local")]
        if HOST_NAME.match(name):
            return name
    name = re.sub(r"[^A-Za-z0-9]+", "-", instance or "").strip("-")[:63].rstrip("-")
    return name or None


def natural_key(name):
    """Sort key: digit runs as numbers (studio-2 before studio-10), letters without case, then the
    name itself (so two names that differ only in case keep one order)."""
    parts = re.split(r"(\d+)", name)
    return [(0, int(p), "") if p.isdigit() else (1, 0, p.lower()) for p in parts if p], name


def _networks(cidrs):
    return [ipaddress.ip_network(c, strict=False) for c in cidrs]


def choose_address(addresses, networks, exclude=(THUNDERBOLT_POOL,)):
    """(address, note) for a Mac announcing `addresses`, seen from a controller whose interfaces
    are on `networks` (CIDRs); address None when none may be used. The rule:
    1. never 169.254.0.0/16 (link-local: the Thunderbolt Bridge), loopback, multicast or 0.0.0.0;
    2. an address on one of the controller's own networks shorter than /30 (its LAN): the lowest,
       one outside `exclude` first (a LAN as wide as 10.0.0.0/8 holds the Thunderbolt pool);
    3. else (the Macs reached through a Bonjour gateway from another subnet) the lowest address
       outside the controller's /30-or-longer networks (its own Thunderbolt cables) and outside
       `exclude` (the toolkit's Thunderbolt pool), with a note saying so."""
    nets = _networks(networks)
    lan = [n for n in nets if n.prefixlen < POINT_TO_POINT_PREFIX and not (n.overlaps(LINK_LOCAL) or n.is_loopback)]
    cables = [n for n in nets if n.prefixlen >= POINT_TO_POINT_PREFIX] + _networks(exclude)
    usable = sorted(
        {
            a
            for a in (ipaddress.ip_address(x) for x in addresses)
            if a.version == 4 and a not in LINK_LOCAL and not (a.is_loopback or a.is_multicast or a.is_unspecified)
        }
    )
    # (a LAN as wide as 10.0.0.0/8 holds the Thunderbolt pool too: a cable's end only when the
    # Mac has no other address on it)
    on_lan = sorted((a for a in usable if any(a in n for n in lan)), key=lambda a: (any(a in n for n in cables), a))
    if on_lan:
        return str(on_lan[0]), None
    rest = [a for a in usable if not any(a in n for n in cables)]
    if rest:
        where = ", ".join(str(n) for n in lan) or "none known"
        return str(rest[0]), f"none of its addresses is on this controller's networks ({where}): took {rest[0]}"
    return None, None


def _matches(patterns, *names):
    return not patterns or any(p.search(n) for p in patterns for n in names if n)


def compile_patterns(patterns):
    """The name patterns as regular expressions; ValueError naming the one that is not."""
    out = []
    for p in patterns or ():
        try:
            out.append(re.compile(p))
        except re.error as exc:
            raise ValueError(f"name pattern {p!r} is not a regular expression: {exc}") from exc
    return out


def _group(records):
    """{host key: [records]}: a Mac's services (ssh and sftp-ssh) joined by their mDNS host name
    (case-insensitive, as mDNS names are); an instance that did not resolve under any type by its
    instance name."""
    by_host, resolved = {}, set()
    for r in records:
        if r.get("server"):
            by_host.setdefault(("server", r["server"].rstrip(".").lower()), []).append(r)
            resolved.add(r.get("instance"))
    for r in records:
        if not r.get("server") and r.get("instance") not in resolved:
            by_host.setdefault(("instance", r.get("instance") or ""), []).append(r)
    return by_host


def choose_hosts(records, networks, patterns=(), exclude=(THUNDERBOLT_POOL,)):
    """The hosts of the group mac_cluster from the browse's `records` (module docstring), seen
    from a controller on `networks` (CIDRs of its interfaces). Returns {"hosts": [{"name",
    "address", "port", "instance", "server"}] in natural order of name, "warnings": [str],
    "seen": [names of every Mac announced, kept or not]}.
    A Mac is kept when a pattern of `patterns` (regular expressions, re.search) matches its name
    or its instance name, or when there is no pattern. A Mac announced but not resolved, or
    with no address the controller may use (choose_address), is left out with a warning."""
    compiled = compile_patterns(patterns)
    hosts, warnings, seen, taken = [], [], [], {}
    for key, recs in sorted(_group(records).items()):
        recs = sorted(recs, key=lambda r: (r["type"] != SERVICE_TYPES[0], r["type"]))
        first = recs[0]
        instance = first.get("instance") or ""
        if key[0] == "instance":
            seen.append(instance)
            if _matches(compiled, instance):
                warnings.append(
                    f"{instance!r} announced {first['type']} but did not resolve to a host and address "
                    "within the browse: left out (a longer timeout may find it)"
                )
            continue
        name = host_name(first["server"], instance)
        seen.append(name or instance)
        if not _matches(compiled, name, instance):
            continue
        if name is None:
            warnings.append(f"{first['server']!r} ({instance!r}) gives no usable host name: left out")
            continue
        addresses = sorted({a for r in recs for a in r.get("addresses") or ()}, key=ipaddress.ip_address)
        address, note = choose_address(addresses, networks, exclude)
        if address is None:
            warnings.append(
                f"{name} announced only addresses the controller must not use "
                f"({', '.join(addresses) or 'none'}: link-local or Thunderbolt): left out"
            )
            continue
        if note:
            warnings.append(f"{name}: {note}")
        if name.lower() in taken:
            warnings.append(f"{name} ({first['server']}) has the name of {taken[name.lower()]}: left out")
            continue
        taken[name.lower()] = first["server"]
        hosts.append(
            {
                "name": name,
                "address": address,
                "port": int(first.get("port") or SSH_PORT),
                "instance": instance,
                "server": first["server"],
            }
        )
    hosts.sort(key=lambda h: natural_key(h["name"]))
    return {"hosts": hosts, "warnings": warnings, "seen": sorted(set(seen), key=natural_key)}


def nothing_found(service_types, seconds, seen=(), patterns=()):
    """The error when the browse leaves no Mac: what was browsed, for how long, and the fix."""
    browsed = " and ".join(t.rstrip(".") for t in service_types)
    if seen and patterns:
        return (
            f"mlx.cluster.bonjour: none of the Macs that announced {browsed} in {seconds:g} s "
            f"({', '.join(seen)}) matches name_patterns {list(patterns)}: fix the patterns, or leave them out"
        )
    if seen:
        return (
            f"mlx.cluster.bonjour: {len(seen)} Mac(s) announced {browsed} in {seconds:g} s ({', '.join(seen)}) "
            "but none could be used (the warnings above say why)"
        )
    return (
        f"mlx.cluster.bonjour: no Mac announced {browsed} on this controller's networks "
        f"within {seconds:g} s of browsing. Fix: {FIX}; or a longer timeout"
    )


def controller_networks():
    """The IPv4 networks of this machine's interfaces, as CIDRs (ifaddr, a zeroconf dependency)."""
    import ifaddr

    nets = set()
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            if ip.is_IPv4:
                nets.add(str(ipaddress.ip_interface(f"{ip.ip}/{ip.network_prefix}").network))
    return sorted(nets)


def browse(service_types=SERVICE_TYPES, seconds=5.0):
    """Browse the LAN for `seconds` for `service_types` (IPv4 mDNS), resolving each instance as
    it appears, all at once; return the records (module docstring). Every request ends by the
    deadline: the whole browse takes `seconds` and a little more, never longer. zeroconf is
    imported here, not with this module: the plugin names it when it is missing."""
    return asyncio.run(_browse(list(service_types), float(seconds)))


async def _browse(service_types, seconds):
    from zeroconf import IPVersion, ServiceStateChange
    from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

    deadline = time.monotonic() + seconds
    pending = {}

    def on_change(zeroconf, service_type, name, state_change):
        if state_change is ServiceStateChange.Removed or (service_type, name) in pending:
            return
        info = AsyncServiceInfo(service_type, name)
        left_ms = max(1, int((deadline - time.monotonic()) * 1000))
        pending[(service_type, name)] = (info, asyncio.ensure_future(info.async_request(zeroconf, left_ms)))

    aiozc = AsyncZeroconf(ip_version=IPVersion.V4Only)
    try:
        browser = AsyncServiceBrowser(aiozc.zeroconf, service_types, handlers=[on_change])
        await asyncio.sleep(seconds)
        await browser.async_cancel()
        if pending:
            await asyncio.wait([task for _, task in pending.values()], timeout=1.0)
    finally:
        for _, task in pending.values():
            task.cancel()
        await aiozc.async_close()
    records = []
    for (service_type, name), (info, _) in sorted(pending.items()):
        addresses = info.parsed_addresses(IPVersion.V4Only) if info.server else []
        records.append(
            {
                "type": service_type,
                "instance": name[: -len(service_type) - 1] if name.endswith("." + service_type) else name,
                "server": info.server,
                "port": info.port,
                "addresses": sorted(addresses),
            }
        )
    return records
