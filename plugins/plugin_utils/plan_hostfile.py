# -*- coding: utf-8 -*-
"""The topology and the IP plan -> the hostfile ``mlx.launch --hostfile`` reads (``hostfile()``,
mlx.cluster.mlx_hostfile): ring, jaccl or jaccl-ring, with each Mac's coordinator address.
Pure functions.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_launch import BACKENDS
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import PlanError, join_limited, plural

_FORBIDDEN_COORDINATOR = (
    (ipaddress.ip_network("169.254.0.0/16"), "link-local (169.254/16): it only reaches one cable"),
    (ipaddress.ip_network("100.64.0.0/10"), "CGNAT/Tailscale (100.64/10): an overlay, not the LAN"),
    (ipaddress.ip_network("127.0.0.0/8"), "loopback (127/8): other hosts cannot reach it"),
    (ipaddress.ip_network("0.0.0.0/8"), "unspecified (0/8)"),
    (ipaddress.ip_network("224.0.0.0/4"), "multicast (224/4)"),
)

_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _coordinator(host, coordinators, plan_addresses):
    hint = "set mlx_cluster_coordinator_address for %s in the inventory" % host
    value = coordinators.get(host)
    if value is None or value == "":
        raise PlanError(
            "no coordinator address for %s: %s (an address every host reaches, usually its LAN address)" % (host, hint)
        )
    try:
        ip = ipaddress.ip_address(str(value).strip())
    except ValueError:
        raise PlanError("coordinator address %r for %s is not an IP address: %s" % (value, host, hint)) from None
    if ip.version != 4:
        raise PlanError(
            "coordinator address %s for %s is IPv6; MLX's launcher needs IPv4 "
            "(it writes address:port): %s" % (ip, host, hint)
        )
    for bad, what in _FORBIDDEN_COORDINATOR:
        if ip in bad:
            raise PlanError("coordinator address %s for %s is %s: %s" % (ip, host, what, hint))
    if str(ip) in plan_addresses:
        raise PlanError(
            "coordinator address %s for %s is a Thunderbolt cable address, reachable "
            "from one peer only: %s" % (ip, host, hint)
        )
    return str(ip)


def _plan_pairs(plan):
    if not isinstance(plan, Mapping) or not isinstance(plan.get("cables"), Mapping):
        raise PlanError("expected the result of mlx_ip_plan (a mapping with 'cables')")
    pairs, addresses = {}, set()
    for cid in sorted(plan["cables"]):
        entry = plan["cables"][cid]
        try:
            a, b = entry["a"], entry["b"]
            ends = (a["host"], a["iface"], a["address"], b["host"], b["iface"], b["address"])
        except (KeyError, TypeError):
            raise PlanError("malformed plan entry for cable %s: expected a/b with host, iface, address" % cid) from None
        if not all(isinstance(x, str) and x for x in ends):
            raise PlanError("malformed plan entry for cable %s" % cid)
        addresses.update((a["address"], b["address"]))
        pairs.setdefault((a["host"], b["host"]), []).append((cid, a, b))
        pairs.setdefault((b["host"], a["host"]), []).append((cid, b, a))
    return pairs, addresses


def hostfile(topology, plan, coordinators=None, envs=(), backend=None):
    """The JSON dict ``mlx.launch --hostfile`` reads: ``{backend, envs, hosts: [{ssh, ips, rdma}]}``.

    - jaccl: ranks in ``topology["hosts"]`` order; ``ips`` = [the host's coordinator address];
      ``rdma[i][j]`` = None on the diagonal, else ``"rdma_<iface of i on the cable to j>"``, or
      a list of them when every pair has several cables. As MLX's configure_jaccl, every pair
      gets the same number of devices: the smallest cable count of any pair (JACCL indexes
      the wires of a pair assuming each rank lists as many; its mesh uses the first).
    - jaccl-ring: ranks in ring order; only the two ring neighbours get devices, ``ring_width``
      of them each (as MLX's configure_jaccl_ring).
    - ring: ranks in ring order; ``ips`` = this host's addresses on the cable(s) to its left
      neighbour (the previous rank), ``ring_width`` of them (as MLX's configure_ring);
      ``rdma`` = [].

    Which cables of a pair come first follows MLX too (its IPConfigurator): the order of the
    interface names (as strings) of the pair's host that comes first in ``topology["hosts"]``,
    so both ends of a pair always list the same cables in the same order.

    ``coordinators`` maps host -> an IPv4 address every host reaches (the management LAN);
    needed for jaccl and jaccl-ring, never link-local, CGNAT/Tailscale, loopback or a cable
    address. ``backend`` defaults to ``topology["backend"]``; ``envs`` are ``NAME=value``.
    """
    if not isinstance(topology, Mapping) or not isinstance(topology.get("hosts"), (list, tuple)):
        raise PlanError("expected the result of mlx_topology (a mapping with 'hosts')")
    hosts = list(topology["hosts"])
    if backend is None:
        backend = topology.get("backend")
        if backend is None:
            raise PlanError("no MLX backend fits this wiring: %s" % topology.get("message", "no mesh and no ring"))
    if backend not in BACKENDS:
        raise PlanError("backend must be one of %s, got %r" % (", ".join(BACKENDS), backend))
    if isinstance(envs, str) or not isinstance(envs, (list, tuple)):
        raise PlanError("envs must be a list of NAME=value strings, got %s" % type(envs).__name__)
    for env in envs:
        if not isinstance(env, str) or not _ENV_RE.match(env):
            raise PlanError("envs entry %r is not NAME=value" % (env,))
    pairs, addresses = _plan_pairs(plan)

    # RDMA backends run over the cables that carry RDMA only (topology's rdma_cables / rdma_ring).
    rdma_ids = topology.get("rdma_cables") if backend != "ring" else None
    if rdma_ids is not None:
        rdma_ids = set(rdma_ids)
        pairs = {k: [e for e in v if e[0] in rdma_ids] for k, v in pairs.items()}
    rdma_shape = backend != "ring" and "rdma_ring" in topology
    ring = topology.get("rdma_ring" if rdma_shape else "ring")
    width = topology.get("rdma_ring_width" if rdma_shape else "ring_width") or 0
    fix = topology.get("backend_fix")
    fix = ": fix: %s" % fix if fix else ""
    _refuse_unfit(topology, backend, hosts, ring, width, rdma_shape, fix)
    between = _cables_between(pairs, {h: i for i, h in enumerate(hosts)})
    if backend == "jaccl":
        out = _jaccl_hosts(hosts, between, coordinators, addresses)
    elif backend == "jaccl-ring":
        out = _jaccl_ring_hosts(ring, width, between, coordinators, addresses)
    else:
        out = _ring_hosts(ring, width, between)
    return {"backend": backend, "envs": list(envs), "hosts": out}


def lan_ring(hosts, plan, coordinators, envs=()):
    """A ``ring`` hostfile over the management LAN instead of the cables: ranks in `hosts`
    order, each listening on its coordinator address (checked as for jaccl: IPv4, reachable
    from every host, not a cable address). For measuring what the cables buy."""
    _pairs, addresses = _plan_pairs(plan)
    out = [{"ssh": h, "ips": [_coordinator(h, coordinators or {}, addresses)], "rdma": []} for h in hosts]
    return {"backend": "ring", "envs": list(envs), "hosts": out}


def _refuse_unfit(topology, backend, hosts, ring, width, rdma_shape, fix):
    """A PlanError naming what `backend` needs and the wiring lacks (RDMA on every host, a
    full mesh, a ring, a cable that carries RDMA between every pair)."""
    rdma_by_host = topology.get("rdma")
    if backend != "ring" and isinstance(rdma_by_host, Mapping):
        no_rdma = [h for h in hosts if not rdma_by_host.get(h)]
        if no_rdma:
            raise PlanError("backend %s needs RDMA on every host; not on %s" % (backend, join_limited(no_rdma)))
    if backend == "jaccl" and not topology.get("mesh"):
        raise PlanError(
            "backend jaccl needs a full mesh; missing cables: %s"
            % join_limited("%s-%s" % tuple(p) for p in topology.get("missing") or [])
        )
    if backend in ("jaccl-ring", "ring"):
        if not ring:
            raise PlanError(
                "backend %s needs a ring%s: %s%s"
                % (
                    backend,
                    " of cables that carry RDMA" if rdma_shape else "",
                    topology.get("backend_reason") or topology.get("message", ""),
                    fix,
                )
            )
        if sorted(ring) != sorted(hosts) or isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise PlanError("topology ring %r / ring_width %r do not cover the hosts" % (ring, width))
    if backend == "jaccl" and topology.get("rdma_missing"):
        raise PlanError(
            "backend jaccl needs a cable that carries RDMA between every pair; %s "
            "(%s)%s"
            % (
                join_limited("%s-%s" % tuple(p) for p in topology["rdma_missing"]),
                topology.get("backend_reason", ""),
                fix,
            )
        )


def _cables_between(pairs, rank):
    """between(x, y, count=None): the plan's cables between hosts x and y ([(id, me, peer)]),
    in MLX's order (the interfaces of the pair's first host, as strings), the first `count`."""

    def between(x, y, count=None):
        found = pairs.get((x, y))
        if not found:
            raise PlanError(
                "the IP plan has no cable between %s and %s: build the plan and the "
                "topology from the same mlx_links result" % (x, y)
            )
        # MLX's order: the interfaces of the pair's first host (in hosts order), as strings.
        first_is_me = rank.get(x, 0) <= rank.get(y, 0)
        found = sorted(
            found, key=lambda e: (e[1]["iface"], e[2]["iface"]) if first_is_me else (e[2]["iface"], e[1]["iface"])
        )
        return found if count is None else found[:count]

    return between


def _devices(entries):
    names = ["rdma_%s" % me["iface"] for _cid, me, _peer in entries]
    return names[0] if len(names) == 1 else names


def _jaccl_hosts(hosts, between, coordinators, addresses):
    """jaccl: every pair gets the smallest cable count of any pair (as MLX's configure_jaccl)."""
    out = []
    if coordinators is None or not isinstance(coordinators, Mapping):
        raise PlanError(
            "backend jaccl needs coordinators: {host: address}; set "
            "mlx_cluster_coordinator_address for each host in the inventory"
        )
    # As MLX's configure_jaccl: every pair gets the smallest cable count of any pair.
    count = min(len(between(h, other)) for h in hosts for other in hosts if other != h)
    for h in hosts:
        rdma = [None if other == h else _devices(between(h, other, count)) for other in hosts]
        out.append({"ssh": h, "ips": [_coordinator(h, coordinators, addresses)], "rdma": rdma})
    return out


def _jaccl_ring_hosts(ring, width, between, coordinators, addresses):
    """jaccl-ring: only the two ring neighbours get devices, `width` of them each."""
    out = []
    if coordinators is None or not isinstance(coordinators, Mapping):
        raise PlanError(
            "backend jaccl-ring needs coordinators: {host: address}; set "
            "mlx_cluster_coordinator_address for each host in the inventory"
        )
    n = len(ring)
    for i, h in enumerate(ring):
        neighbours = {ring[i - 1], ring[(i + 1) % n]}
        rdma = [_devices(between(h, other, width)) if other in neighbours else None for other in ring]
        out.append({"ssh": h, "ips": [_coordinator(h, coordinators, addresses)], "rdma": rdma})
    return out


def _ring_hosts(ring, width, between):
    """ring: each host's addresses on the cable(s) to its left neighbour, `width` of them."""
    out = []
    for i, h in enumerate(ring):
        left = ring[i - 1]
        entries = between(h, left, width)
        if len(entries) < width:
            raise PlanError(
                "ring_width is %d but the plan has %s between %s and %s"
                % (width, plural(len(entries), "cable"), h, left)
            )
        out.append({"ssh": h, "ips": [me["address"] for _cid, me, _peer in entries], "rdma": []})
    return out
