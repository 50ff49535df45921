# -*- coding: utf-8 -*-
"""The cables -> the IP plan (``ip_plan()``): one /30 per cable from the pool, stable across runs,
around the networks already in use (mlx.cluster.mlx_ip_plan). Pure functions.

Not 192.168.x.y: MLX hard-codes 192.168.x.y/30, which collides with home and office LANs.
"""

from __future__ import annotations

import bisect
import hashlib
import ipaddress
from collections.abc import Mapping

from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_cables import validated_cables
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import PlanError, end_name, join_limited

# Not 192.168.x.y: MLX hard-codes 192.168.x.y/30, which collides with home and office LANs.
DEFAULT_POOL = "10.208.0.0/16"

NETMASK_30 = "255.255.255.252"

# Ranges a cable pool must never overlap, and a coordinator address must never be in.
_FORBIDDEN_POOL = (
    (ipaddress.ip_network("0.0.0.0/8"), "'this network' (0/8)"),
    (ipaddress.ip_network("127.0.0.0/8"), "loopback (127/8)"),
    (ipaddress.ip_network("169.254.0.0/16"), "link-local (169.254/16)"),
    (ipaddress.ip_network("100.64.0.0/10"), "CGNAT/Tailscale (100.64/10)"),
    (ipaddress.ip_network("224.0.0.0/4"), "multicast (224/4)"),
    (ipaddress.ip_network("240.0.0.0/4"), "reserved (240/4)"),
)


def _pool(pool):
    if not isinstance(pool, str):
        raise PlanError("pool must be an IPv4 CIDR string such as %s, got %r" % (DEFAULT_POOL, pool))
    try:
        net = ipaddress.ip_network(pool.strip(), strict=True)
    except ValueError as exc:
        raise PlanError("pool %r is not a CIDR network (%s); example: %s" % (pool, exc, DEFAULT_POOL)) from None
    if net.version != 4:
        raise PlanError("pool %s is not IPv4: MLX's ring and JACCL bootstrap use IPv4" % pool)
    if net.prefixlen > 30:
        raise PlanError("pool %s is smaller than one /30: use a prefix of 30 or less" % pool)
    for bad, what in _FORBIDDEN_POOL:
        if net.overlaps(bad):
            raise PlanError("pool %s overlaps %s: pick a private range such as %s" % (pool, what, DEFAULT_POOL))
    return net


def _interface(address, prefix, where):
    try:
        if prefix is None:
            return ipaddress.ip_interface(str(address))
        if isinstance(prefix, bool):
            raise ValueError("prefix must be a number")
        return ipaddress.ip_interface("%s/%s" % (address, int(prefix)))
    except (ValueError, TypeError) as exc:
        raise PlanError("%s: bad address %r/%r (%s)" % (where, address, prefix, exc)) from None


def _address_list(value, where):
    """[{address, prefix}] | ["a.b.c.d/p"] | {ipv4: [...]} -> [IPv4Interface]."""
    if isinstance(value, Mapping) and "ipv4" in value:
        value = value.get("ipv4")
    if value is None:
        return []
    if isinstance(value, (str, Mapping)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise PlanError("%s: expected a list of {address, prefix}, got %s" % (where, type(value).__name__))
    out = []
    for item in value:
        if isinstance(item, Mapping):
            iface = _interface(item.get("address"), item.get("prefix"), where)
        elif isinstance(item, str):
            iface = _interface(item, None, where)
        else:
            raise PlanError("%s: bad address entry %r" % (where, item))
        if iface.version == 4:
            out.append(iface)
    return sorted(out, key=lambda i: (int(i.ip), i.network.prefixlen))


def _host_iface_map(value, name):
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PlanError("%s must map host -> {iface: addresses}, got %s" % (name, type(value).__name__))
    out = {}
    for host, ifaces in value.items():
        if ifaces is None:
            continue
        if not isinstance(ifaces, Mapping):
            raise PlanError("%s[%s] must map iface -> addresses, got %s" % (name, host, type(ifaces).__name__))
        out[host] = {iface: _address_list(v, "%s %s:%s" % (name, host, iface)) for iface, v in ifaces.items()}
    return out


def _slot_home(cable_id, slots):
    digest = hashlib.sha256(cable_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % slots


def ip_plan(links, pool=DEFAULT_POOL, interfaces=None, exclude=(), current=None):
    """One /30 per cable from ``pool``; stable, deterministic, clear of existing networks.

    The default pool 10.208.0.0/16 is deliberately not 192.168.x.y: MLX's IPConfigurator
    hard-codes 192.168.x.y/30, which collides with the 192.168.0.0/16 LANs of most homes
    and offices (a Mac then routes its LAN traffic into a Thunderbolt cable).

    - ``interfaces``: ``{host: {iface: {ipv4: [{address, prefix}]}}}`` (the
      ``mlx_cluster.interfaces`` facts). Networks on interfaces that are not cable ends are
      kept out of the plan (a LAN that uses part of the pool pushes the plan around it).
    - ``exclude``: more CIDRs to keep out.
    - ``current``: ``{host: {iface: [{address, prefix}] | ["a.b.c.d/30"]}}`` addresses the cable
      interfaces have now; derived from ``interfaces`` when not given. A cable whose two ends
      already hold the two hosts of one /30 in the pool (not excluded, not claimed by another
      cable) keeps it, so a converged cluster is never renumbered.
    - Other cables take a slot chosen by a hash of the cable id (sha256, linear probing), so
      the plan is deterministic (same wiring, any order -> same plan) and adding or removing
      a cable does not move the others. Endpoint ``a`` gets the first usable address, ``b``
      the second.

    Returns ``{pool, excluded, cables: {id: {network, prefix, netmask, a: {host, iface,
    address}, b: {...}, kept}}, hosts: {host: [{iface, address, prefix, netmask, peer_host,
    peer_iface, peer_address, cable}]}}``.
    """
    net = _pool(pool)
    cables = validated_cables(links)
    ends = _cable_ends(cables)
    excluded, iface_addrs = _excluded_networks(exclude, interfaces, ends)
    if current is None:
        now = {key: iface_addrs.get(key[0], {}).get(key[1], []) for key in ends}
    else:
        given = _host_iface_map(current, "current")
        now = {key: given.get(key[0], {}).get(key[1], []) for key in ends}
    base, slots = int(net.network_address), net.num_addresses // 4
    merged = _excluded_slots(excluded, net)
    starts = [lo for lo, _hi in merged]

    def excluded_span(slot):
        i = bisect.bisect_right(starts, slot) - 1
        return merged[i] if i >= 0 and merged[i][1] >= slot else None

    taken, placed = _kept_slots(cables, now, net, excluded_span)
    new = [c for c in cables if c["id"] not in placed]
    blocked = sum(hi - lo + 1 for lo, hi in merged)
    if len(new) > slots - blocked - len(taken):
        sources = sorted({src for network, src in excluded if network.overlaps(net)})
        raise PlanError(
            "pool %s has %d /30 networks (%d excluded%s, %d kept by existing cables) but %d "
            "cables need one each: pass a larger pool (pool=..., e.g. a /%d)"
            % (
                net,
                slots,
                blocked,
                " by " + join_limited(sources, 5) if sources else "",
                len(taken),
                len(cables),
                max(8, 30 - (len(cables) * 2).bit_length()),
            )
        )
    for c in new:
        slot = _slot_home(c["id"], slots)
        while True:
            span = excluded_span(slot)
            if span:
                slot = (span[1] + 1) % slots
            elif slot in taken:
                slot = (slot + 1) % slots
            else:
                break
        taken[slot] = c["id"]
        first = base + slot * 4
        placed[c["id"]] = (slot, str(ipaddress.IPv4Address(first + 1)), str(ipaddress.IPv4Address(first + 2)), False)

    return _plan_result(net, cables, placed, excluded)


def _cable_ends(cables):
    """{(host, iface): cable id} of every cable end; an end of two cables is refused."""
    ends = {}
    for c in cables:
        for side in ("a", "b"):
            key = (c[side]["host"], c[side]["iface"])
            if key in ends:
                raise PlanError(
                    "%s is an end of two cables (%s and %s): the links are inconsistent"
                    % (end_name(*key), ends[key], c["id"])
                )
            ends[key] = c["id"]

    return ends


def _excluded_networks(exclude, interfaces, ends):
    """([(network, source)] to keep out of the pool: `exclude` and the networks of interfaces
    that are no cable end), and the interfaces' addresses {host: {iface: [interface]}}."""
    if isinstance(exclude, str) or not isinstance(exclude, (list, tuple, set, frozenset)):
        raise PlanError("exclude must be a list of CIDRs, got %s" % type(exclude).__name__)
    excluded = []
    for cidr in exclude:
        try:
            network = ipaddress.ip_network(str(cidr).strip(), strict=False)
        except ValueError as exc:
            raise PlanError("exclude: %r is not a CIDR network (%s)" % (cidr, exc)) from None
        if network.version == 4:
            excluded.append((network, "exclude"))
    iface_addrs = _host_iface_map(interfaces, "interfaces")
    for host in sorted(iface_addrs):
        for iface in sorted(iface_addrs[host]):
            if (host, iface) in ends:
                continue
            for addr in iface_addrs[host][iface]:
                excluded.append((addr.network, end_name(host, iface)))
    return excluded, iface_addrs


def _excluded_slots(excluded, net):
    """The /30 slots of the pool `net` that `excluded` covers, as merged [lo, hi] spans."""
    base = int(net.network_address)
    spans = []
    for network, _source in excluded:
        if network.overlaps(net):
            lo = max(int(network.network_address), base)
            hi = min(int(network.broadcast_address), base + net.num_addresses - 1)
            spans.append([(lo - base) // 4, (hi - base) // 4])
    merged = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return merged


def _kept_slots(cables, now, net, excluded_span):
    """({slot: cable id}, {cable id: (slot, a address, b address, True)}) of the cables whose two
    ends already hold the two hosts of one /30 of the pool, neither excluded nor taken."""
    base = int(net.network_address)
    taken, placed = {}, {}
    for c in cables:
        a_key = (c["a"]["host"], c["a"]["iface"])
        b_key = (c["b"]["host"], c["b"]["iface"])
        for x in now[a_key]:
            if x.network.prefixlen != 30 or not x.network.subnet_of(net):
                continue
            slot = (int(x.network.network_address) - base) // 4
            if slot in taken or excluded_span(slot):
                continue
            hosts_ok = x.ip != x.network.network_address and x.ip != x.network.broadcast_address
            match = [
                y
                for y in now[b_key]
                if y.network == x.network
                and y.ip != x.ip
                and y.ip not in (x.network.network_address, x.network.broadcast_address)
            ]
            if hosts_ok and match:
                taken[slot] = c["id"]
                placed[c["id"]] = (slot, str(x.ip), str(match[0].ip), True)
                break

    return taken, placed


def _plan_result(net, cables, placed, excluded):
    """ip_plan's result from the slot and addresses each cable was given."""
    base = int(net.network_address)
    out_cables, out_hosts = {}, {}
    for c in cables:
        slot, a_addr, b_addr, kept = placed[c["id"]]
        network = "%s/30" % ipaddress.IPv4Address(base + slot * 4)
        a = {"host": c["a"]["host"], "iface": c["a"]["iface"], "address": a_addr}
        b = {"host": c["b"]["host"], "iface": c["b"]["iface"], "address": b_addr}
        out_cables[c["id"]] = {"network": network, "prefix": 30, "netmask": NETMASK_30, "a": a, "b": b, "kept": kept}
        for me, peer in ((a, b), (b, a)):
            out_hosts.setdefault(me["host"], []).append(
                {
                    "iface": me["iface"],
                    "address": me["address"],
                    "prefix": 30,
                    "netmask": NETMASK_30,
                    "peer_host": peer["host"],
                    "peer_iface": peer["iface"],
                    "peer_address": peer["address"],
                    "cable": c["id"],
                }
            )
    for host in out_hosts:
        out_hosts[host].sort(key=lambda e: e["iface"])
    return {
        "pool": str(net),
        "excluded": [{"network": str(network), "source": src} for network, src in excluded if network.overlaps(net)],
        "cables": out_cables,
        "hosts": {h: out_hosts[h] for h in sorted(out_hosts)},
    }
