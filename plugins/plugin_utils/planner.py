# -*- coding: utf-8 -*-
"""Controller-side planner: Thunderbolt facts -> cables -> topology -> IP plan -> MLX hostfile.

Pure functions with no Ansible import (only the backend list, from module_utils/mlx_launch),
so they can be tested (and benchmarked) on their own.
``plugins/filter/plan_filters.py`` is the thin Ansible face of this module. Every planning
failure raises :class:`PlanError` with a message that says what is wrong and how to fix it.

The pipeline, as the playbooks use it (see ``docs/design.md``)::

    facts_by_host | mlx_links          -> cables (every cable, both sightings checked)
    links | mlx_topology(hosts, rdma)  -> full mesh? best ring? which MLX backend?
    links | mlx_ip_plan(pool)          -> one /30 per cable, stable across runs
    topology | mlx_hostfile(plan, ...) -> the JSON that ``mlx.launch --hostfile`` reads
    links | mlx_dot(topology, plan)    -> Graphviz picture of the wiring

MLX's own ``mlx.distributed_config`` (``mlx/_distributed_utils/config.py``) is the reference;
where we differ on purpose the docstrings say so (and ``tests/unit/filter`` demonstrates it).
"""

from __future__ import annotations

import bisect
import hashlib
import ipaddress
import json
import re
from collections.abc import Mapping

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import unsafe_path
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_launch import BACKENDS, RDMA_BACKENDS
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_wired import PLIST_PATH as WIRED_PLIST_PATH

__all__ = [
    "BACKEND_CHOICES",
    "BACKENDS",
    "coordinator",
    "DEFAULT_POOL",
    "DEFAULT_REMOTE_DIR",
    "FALLBACK_CHOICES",
    "HOSTFILE_NAME",
    "PlanError",
    "STAGE_NEEDS",
    "discovery_request",
    "fallback",
    "hostfile_text",
    "hostfile_writes",
    "dot",
    "hostfile",
    "ip_plan",
    "links",
    "make_plan",
    "remote_dir",
    "stage_runs",
    "topology",
]

# Not 192.168.x.y: MLX hard-codes 192.168.x.y/30, which collides with home and office LANs.
DEFAULT_POOL = "10.208.0.0/16"
NETMASK_30 = "255.255.255.252"
# MLX's distributed backends the plan can choose (module_utils/mlx_launch.BACKENDS, best
# first); `auto` lets the plan choose.
BACKEND_CHOICES = ("auto",) + BACKENDS

# Ranges a cable pool must never overlap, and a coordinator address must never be in.
_FORBIDDEN_POOL = (
    (ipaddress.ip_network("0.0.0.0/8"), "'this network' (0/8)"),
    (ipaddress.ip_network("127.0.0.0/8"), "loopback (127/8)"),
    (ipaddress.ip_network("169.254.0.0/16"), "link-local (169.254/16)"),
    (ipaddress.ip_network("100.64.0.0/10"), "CGNAT/Tailscale (100.64/10)"),
    (ipaddress.ip_network("224.0.0.0/4"), "multicast (224/4)"),
    (ipaddress.ip_network("240.0.0.0/4"), "reserved (240/4)"),
)
_FORBIDDEN_COORDINATOR = (
    (ipaddress.ip_network("169.254.0.0/16"), "link-local (169.254/16): it only reaches one cable"),
    (ipaddress.ip_network("100.64.0.0/10"), "CGNAT/Tailscale (100.64/10): an overlay, not the LAN"),
    (ipaddress.ip_network("127.0.0.0/8"), "loopback (127/8): other hosts cannot reach it"),
    (ipaddress.ip_network("0.0.0.0/8"), "unspecified (0/8)"),
    (ipaddress.ip_network("224.0.0.0/4"), "multicast (224/4)"),
)

# Depth-first steps one Hamiltonian-cycle search may take before it gives up (and says so).
RING_SEARCH_BUDGET = 200_000
# The ring search recurses once per host; keep well inside Python's recursion limit.
RING_SEARCH_MAX_HOSTS = 256

_LINK_CLASS_RANK = {"TB3": 3, "TB4": 4, "TB5": 5}
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


class PlanError(Exception):
    """A wiring, inventory or argument problem that stops the plan; ``message`` says the fix."""

    def __init__(self, message):
        super().__init__(message)
        self.message = message


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------


def _link_class(speed):
    """TB5 above 40 Gb/s, TB4 at 40, TB3 below, None when unknown (as the facts define it)."""
    if speed is None:
        return None
    if speed > 40:
        return "TB5"
    if speed == 40:
        return "TB4"
    return "TB3"


def _speed(value):
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)) and value > 0:
        return int(value) if float(value).is_integer() else float(value)
    return None


def _uuid(value):
    if isinstance(value, str) and value.strip():
        return value.strip().upper()
    return None


def _end_name(host, iface):
    return "%s:%s" % (host, iface)


def _join_limited(items, limit=8):
    items = list(items)
    if len(items) <= limit:
        return ", ".join(items)
    return "%s and %d more" % (", ".join(items[:limit]), len(items) - limit)


def _plural(count, word, plural=None):
    return "%d %s" % (count, word if count == 1 else (plural or word + "s"))


# --------------------------------------------------------------------------------------------
# links
# --------------------------------------------------------------------------------------------


class _Port:
    __slots__ = (
        "host",
        "iface",
        "label",
        "uuid",
        "peer_uuid",
        "peer_name",
        "via",
        "speed",
        "link_class",
        "connected",
        "order",
    )

    def __init__(self, host, raw, order):
        self.host = host
        self.order = order
        iface = raw.get("iface")
        self.iface = iface if isinstance(iface, str) and iface else None
        receptacle = raw.get("receptacle")
        label = (
            self.iface
            or raw.get("hardware_port")
            or ("receptacle %s" % receptacle if receptacle is not None else raw.get("bus"))
        )
        self.label = str(label) if label else "port %d" % order
        self.uuid = _uuid(raw.get("domain_uuid"))
        peer = raw.get("peer")
        if not isinstance(peer, Mapping):
            peer = {}
        self.peer_uuid = _uuid(peer.get("domain_uuid"))
        self.peer_name = peer.get("name")
        via = peer.get("via") or []
        self.via = [str(v) for v in via] if isinstance(via, (list, tuple)) else []
        self.speed = _speed(raw.get("speed_gbps"))
        link_class = raw.get("link_class")
        self.link_class = link_class if link_class in _LINK_CLASS_RANK else None
        self.connected = raw.get("status") == "connected" or self.peer_uuid is not None

    @property
    def name(self):
        return _end_name(self.host, self.label)


def _thunderbolt_facts(host, facts):
    """Accept ``mlx_thunderbolt`` facts, or ``mlx_cluster`` facts that hold them."""
    if not isinstance(facts, Mapping):
        raise PlanError(
            "facts for %s must be its mlx_thunderbolt facts (a mapping), got %s: gather facts "
            "with mlx_cluster_facts first" % (host, type(facts).__name__)
        )
    if "ports" not in facts and isinstance(facts.get("thunderbolt"), Mapping):
        facts = facts["thunderbolt"]
    ports = facts.get("ports")
    if ports is None:
        ports = []
    if not isinstance(ports, (list, tuple)):
        raise PlanError("facts for %s: 'ports' must be a list, got %s" % (host, type(ports).__name__))
    for port in ports:
        if not isinstance(port, Mapping):
            raise PlanError("facts for %s: every port must be a mapping, got %s" % (host, type(port).__name__))
    return ports


def _problem(code, ends, msg, fix):
    return {
        "code": code,
        "hosts": sorted({p.host for p in ends}),
        "ports": [p.name for p in ends],
        "msg": msg,
        "fix": fix,
    }


def _cable(p, q, sighting):
    """Build one cable from two ports; endpoints ordered by (host, iface)."""
    a, b = sorted((p, q), key=lambda x: (x.host, x.iface))
    speeds = [s for s in (a.speed, b.speed) if s is not None]
    speed = min(speeds) if speeds else None
    link_class = _link_class(speed)
    if link_class is None:
        classes = [c for c in (a.link_class, b.link_class) if c]
        link_class = min(classes, key=_LINK_CLASS_RANK.get) if classes else None
    # Hubs between the two Macs, outermost (nearest a) first.
    via = list(a.via) if a.via else list(reversed(b.via))
    return {
        "id": "%s~%s" % (_end_name(a.host, a.iface), _end_name(b.host, b.iface)),
        "a": {"host": a.host, "iface": a.iface, "domain_uuid": a.uuid},
        "b": {"host": b.host, "iface": b.iface, "domain_uuid": b.uuid},
        "speed_gbps": speed,
        "link_class": link_class,
        "sighting": sighting,
        "via": via,
    }


def links(facts_by_host):
    """Join every host's Thunderbolt ports into cables.

    ``facts_by_host`` maps inventory hostname -> ``mlx_thunderbolt`` facts (``mlx_cluster``
    facts are accepted too). A cable joins port P of one host to port Q of another when P's
    ``peer.domain_uuid`` is Q's ``domain_uuid``:

    - Q sees P back: ``sighting: "both"``.
    - Q sees nothing (a dock or hub in the way hides the far Mac from one side):
      ``sighting: "one-sided"``, also listed in ``one_sided``, with a warning.
    - Q sees a third port: a ``problems`` entry ("miswired or stale"), no cable.
    - P's peer is no port of any inventory host: an ``external`` entry (a Mac outside the
      inventory), with a warning.
    - P or Q has no network interface (``iface`` null): a ``problems`` entry with the fix
      ``networksetup -detectnewhardware``, no cable (a cable needs an interface on each end).

    Every cable between a pair of hosts is kept (MLX's ``extract_connectivity`` sees only
    Macs directly under a port, so it misses cables through docks). The result does not
    depend on the order of ``facts_by_host`` or of the ports.

    - P has no domain UUID of its own (partial system_profiler output): when P sees Q and Q
      sees a UUID no inventory port owns, that UUID is P's (a warning says so); otherwise
      an ``unmatched`` entry (``{host, iface, port, peer, msg, fix}``) names P, no cable.

    Returns ``{cables, one_sided, external, unmatched, problems, warnings}``; cables sorted by ``id``
    (``"m1:en2~m2:en3"``, endpoints ordered by host then iface).
    """
    if not isinstance(facts_by_host, Mapping):
        raise PlanError(
            "facts_by_host must map inventory hostnames to mlx_thunderbolt facts, got %s" % type(facts_by_host).__name__
        )
    for host in facts_by_host:
        if not isinstance(host, str) or not host:
            raise PlanError("inventory hostnames must be non-empty strings, got %r" % (host,))

    problems, warnings, external = [], [], []
    ports = []
    for host in sorted(facts_by_host):
        facts = facts_by_host[host]
        if facts is None:
            warnings.append("%s: no Thunderbolt facts; its cables are unknown (gather facts first)" % host)
            continue
        seen_ifaces = {}
        for order, raw in enumerate(_thunderbolt_facts(host, facts)):
            port = _Port(host, raw, order)
            if port.iface is not None and port.iface in seen_ifaces:
                raise PlanError(
                    "facts for %s: receptacles %s and %s both report interface %s; "
                    "the facts are inconsistent: gather facts again"
                    % (host, seen_ifaces[port.iface], raw.get("receptacle"), port.iface)
                )
            if port.iface is not None:
                seen_ifaces[port.iface] = raw.get("receptacle")
            ports.append(port)
    ports.sort(key=lambda p: (p.host, p.label, p.uuid or "", p.order))

    by_uuid = {}
    for p in ports:
        if p.uuid is not None:
            by_uuid.setdefault(p.uuid, []).append(p)
    unmatched = _ports_without_uuid(ports, by_uuid, warnings)
    for uuid in sorted(by_uuid):
        owners = by_uuid[uuid]
        if len(owners) > 1:
            problems.append(
                _problem(
                    "duplicate_uuid",
                    owners,
                    "Thunderbolt domain UUID %s is reported by %s: facts copied between hosts, or "
                    "two inventory names for one Mac" % (uuid, _join_limited(p.name for p in owners)),
                    "gather facts again and make sure each inventory host is a different Mac",
                )
            )

    def owner(uuid):
        found = by_uuid.get(uuid) or []
        return found[0] if len(found) == 1 else None

    both, one_sided_cands, seen_problems = {}, [], set()
    for p in ports:
        if p.peer_uuid is None or p.uuid is None or len(by_uuid.get(p.uuid, ())) > 1:
            continue
        if p.peer_uuid not in by_uuid:
            external.append({"host": p.host, "iface": p.iface, "peer_name": p.peer_name, "peer_uuid": p.peer_uuid})
            maybe = [u["port"] for u in unmatched if u["host"] != p.host]
            warnings.append(
                "%s: cable to a Mac not in the inventory (%s, domain UUID %s)%s"
                % (
                    p.name,
                    p.peer_name or "unnamed",
                    p.peer_uuid,
                    "; or to %s, whose domain UUID is unknown" % _join_limited(maybe, 4) if maybe else "",
                )
            )
            continue
        q = owner(p.peer_uuid)
        if q is None:  # duplicate UUID, already a problem
            continue
        if q.host == p.host:
            key = ("loop", frozenset((p.uuid, q.uuid)))
            if key not in seen_problems:
                seen_problems.add(key)
                problems.append(
                    _problem(
                        "loopback",
                        [p, q],
                        "%s and %s are cabled to each other on the same Mac" % (p.name, q.name),
                        "move one end of the cable to another Mac",
                    )
                )
            continue
        if q.peer_uuid == p.uuid:
            both.setdefault(frozenset((p.uuid, q.uuid)), (p, q))
        elif q.peer_uuid is None:
            one_sided_cands.append((p, q))
        else:
            key = ("miswired", frozenset((p.uuid, q.uuid)))
            if key in seen_problems:
                continue
            seen_problems.add(key)
            r = owner(q.peer_uuid)
            if r is not None:
                sees = r.name
            else:
                sees = "domain UUID %s (%s)" % (
                    q.peer_uuid,
                    "not in the inventory" if q.peer_uuid not in by_uuid else "ambiguous",
                )
            problems.append(
                _problem(
                    "miswired",
                    [p, q],
                    "%s sees %s, but %s sees %s: miswired or stale facts" % (p.name, q.name, q.name, sees),
                    "check the cables on %s and %s, then gather facts again" % (p.host, q.host),
                )
            )

    # One-sided sightings must not claim a port that another cable already uses.
    used = {u for key in both for u in key}
    by_target = {}
    for p, q in one_sided_cands:
        by_target.setdefault(q.uuid, []).append(p)
    accepted = []
    for uuid in sorted(by_target):
        seers = by_target[uuid]
        q = owner(uuid)
        if uuid in used or len(seers) > 1:
            if uuid in used:
                why = "%s sees %s, which is cabled to another port" % (seers[0].name, q.name)
            else:
                why = "%s all see %s, which has one cable" % (_join_limited(p.name for p in seers), q.name)
            problems.append(
                _problem(
                    "miswired",
                    seers + [q],
                    why + ": miswired or stale facts",
                    "check the cables on %s, then gather facts again"
                    % _join_limited(sorted({p.host for p in seers} | {q.host})),
                )
            )
            continue
        accepted.append((seers[0], q))

    cables, no_iface = [], {}
    for (p, q), sighting in [(pq, "both") for pq in both.values()] + [(pq, "one-sided") for pq in accepted]:
        missing = [x for x in (p, q) if x.iface is None]
        for x in missing:
            no_iface[(x.host, x.label, x.uuid)] = x
        if missing:
            continue
        cables.append(_cable(p, q, sighting))

    for p in ports:
        if p.iface is None and p.connected:
            no_iface[(p.host, p.label, p.uuid)] = p
        elif p.iface is None:
            warnings.append(
                "%s has no network interface (networksetup lists no %s); "
                "harmless while the port is empty" % (p.name, p.label)
            )
    for key in sorted(no_iface, key=lambda k: (k[0], k[1], k[2] or "")):
        p = no_iface[key]
        problems.append(
            _problem(
                "no_iface",
                [p],
                "%s is cabled but has no network interface, so its cable cannot carry traffic" % p.name,
                "run 'sudo networksetup -detectnewhardware' on %s, then gather facts again" % p.host,
            )
        )

    cables.sort(key=lambda c: c["id"])
    one_sided = [c for c in cables if c["sighting"] == "one-sided"]
    for c in one_sided:
        via = " (via %s)" % ", ".join(c["via"]) if c["via"] else ""
        warnings.append(
            "cable %s is seen from one side only%s: a dock or hub is in the way; "
            "cable the two Macs directly for full speed and RDMA" % (c["id"], via)
        )
    for c in cables:
        if c["sighting"] == "both" and c["via"]:
            warnings.append("cable %s passes through %s" % (c["id"], ", ".join(c["via"])))
    external.sort(key=lambda e: (e["host"], e["iface"] or "", e["peer_uuid"]))
    problems.sort(key=lambda x: (x["code"], x["ports"], x["msg"]))
    return {
        "cables": cables,
        "one_sided": one_sided,
        "external": external,
        "unmatched": unmatched,
        "problems": problems,
        "warnings": warnings,
    }


def _ports_without_uuid(ports, by_uuid, warnings):
    """Ports whose own domain UUID the facts lack (partial system_profiler output).

    Such a port Q is matched from the other side when it can be: Q sees port P of another
    inventory Mac, and P sees a domain UUID that no inventory port owns. P's cable is then Q's
    (a port has one cable), and that UUID is Q's: Q takes it (a warning says so). Every other
    cabled port without a UUID is returned as ``unmatched`` ({host, iface, port, peer, msg,
    fix}): its cable cannot be placed, and preflight names it.
    """
    claimed, unmatched = {}, []
    for q in ports:
        if q.uuid is not None:
            continue
        found = by_uuid.get(q.peer_uuid) or [] if q.peer_uuid else []
        p = found[0] if len(found) == 1 else None
        if p is not None and p.host != q.host and p.peer_uuid and p.peer_uuid not in by_uuid:
            claimed.setdefault(p.peer_uuid, []).append((q, p))
            continue
        if not q.connected:
            continue
        seen = "; it sees %s" % p.name if p is not None else ""
        unmatched.append(
            {
                "host": q.host,
                "iface": q.iface,
                "port": q.name,
                "peer": p.name if p is not None else None,
                "msg": "%s is cabled but system_profiler gave no domain UUID for it%s: its cable cannot "
                "be matched and is left out of the plan" % (q.name, seen),
                "fix": "run 'system_profiler SPThunderboltDataType -json' on %s and check that every "
                "Thunderbolt bus has its domain_uuid_key, then gather facts again" % q.host,
            }
        )
        warnings.append(unmatched[-1]["msg"])
    for uuid in sorted(claimed):
        pairs = claimed[uuid]
        if len(pairs) > 1:  # two ports without a UUID see the same port: no way to tell
            for q, p in pairs:
                unmatched.append(
                    {
                        "host": q.host,
                        "iface": q.iface,
                        "port": q.name,
                        "peer": p.name,
                        "msg": "%s has no domain UUID and sees %s, as %s do: its cable cannot be "
                        "matched" % (q.name, p.name, _join_limited(x.name for x, _ in pairs)),
                        "fix": "check the cables on %s, then gather facts again" % q.host,
                    }
                )
                warnings.append(unmatched[-1]["msg"])
            continue
        q, p = pairs[0]
        q.uuid = uuid
        by_uuid[uuid] = [q]
        warnings.append(
            "%s has no domain UUID in system_profiler; it sees %s, which sees domain "
            "UUID %s: taken as %s's" % (q.name, p.name, uuid, q.name)
        )
    unmatched.sort(key=lambda u: (u["host"], u["port"]))
    return unmatched


def _cables(links_):
    """Validate the ``cables`` of a ``links()`` result; return them sorted by id."""
    if not isinstance(links_, Mapping) or not isinstance(links_.get("cables"), (list, tuple)):
        raise PlanError("expected the result of mlx_links (a mapping with a 'cables' list)")
    out, seen = [], set()
    for c in links_["cables"]:
        try:
            cid = c["id"]
            ends = (c["a"]["host"], c["a"]["iface"], c["b"]["host"], c["b"]["iface"])
        except (KeyError, TypeError):
            raise PlanError(
                "malformed cable %r: expected {id, a: {host, iface}, b: {host, iface}} from mlx_links" % (c,)
            ) from None
        if not all(isinstance(x, str) and x for x in ends) or not isinstance(cid, str):
            raise PlanError("malformed cable %r: hosts and ifaces must be non-empty strings" % (c,))
        if ends[0] == ends[2]:
            raise PlanError("cable %s joins a host to itself" % cid)
        if cid in seen:
            raise PlanError("cable %s is listed twice" % cid)
        seen.add(cid)
        out.append(c)
    return sorted(out, key=lambda c: c["id"])


# --------------------------------------------------------------------------------------------
# topology: mesh, best ring, backend
# --------------------------------------------------------------------------------------------


class _Budget(Exception):
    pass


def _bits(mask):
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _hamiltonian_cycle(adj, start, lex, budget):
    """Depth-first search for a Hamiltonian cycle through ``start`` in the graph ``adj``.

    ``adj[i]`` is the bit mask of i's neighbours. Returns the cycle as a list of vertices
    starting at ``start``, ``None`` when none exists (the search was exhaustive), or raises
    ``_Budget`` after ``budget`` steps. With ``lex`` the neighbours are tried in index order, so
    the first cycle found is the lexicographically smallest one; otherwise Warnsdorff's order
    (fewest onward choices first) finds one fast. Pruning never cuts a branch that could still
    close, so neither order changes what is found, only how fast:

    - every unvisited vertex needs 2 usable neighbours (unvisited, the path's end, or start);
    - a vertex with exactly 2 forces its edges: at most one may be forced onto the path's end
      (it must come next) and at most one onto start (it must come last);
    - the unvisited vertices must stay reachable from the path's end, and start must keep an
      unvisited neighbour to close the cycle.
    """
    popcount = int.bit_count
    sbit = 1 << start
    path = [start]
    steps = [0]

    def reachable(u, unvisited):
        allowed = unvisited | (1 << u)
        reach = frontier = 1 << u
        while frontier:
            nb = 0
            for x in _bits(frontier):
                nb |= adj[x]
            frontier = nb & allowed & ~reach
            reach |= frontier
        return reach & unvisited == unvisited

    def extend(u, unvisited):
        steps[0] += 1
        if steps[0] > budget:
            raise _Budget()
        if not unvisited:
            return list(path) if adj[u] & sbit else None
        if not adj[start] & unvisited:
            return None
        ubit = 1 << u
        avail = unvisited | ubit | sbit
        last = popcount(unvisited) == 1
        forced_next, to_start, degree = -1, 0, {}
        for x in _bits(unvisited):
            nb = adj[x] & avail
            d = popcount(nb)
            if d < 2:
                return None
            degree[x] = d
            if d == 2 and u != start:
                if nb & ubit:
                    if nb & sbit and not last:
                        return None  # x would close the cycle before the others are visited
                    if forced_next >= 0:
                        return None
                    forced_next = x
                elif nb & sbit:
                    to_start += 1
                    if to_start > 1:
                        return None
        if not reachable(u, unvisited):
            return None
        if forced_next >= 0:
            candidates = [forced_next]
        else:
            candidates = list(_bits(adj[u] & unvisited))
            if not lex:
                candidates.sort(key=lambda x: (degree[x], x))
        for x in candidates:
            path.append(x)
            found = extend(x, unvisited & ~(1 << x))
            if found is not None:
                return found
            path.pop()
        return None

    everyone = (1 << len(adj)) - 1
    return extend(start, everyone & ~sbit)


def _components(adj, vertices):
    left, groups = set(vertices), []
    while left:
        first = min(left)
        seen, todo = {first}, [first]
        while todo:
            x = todo.pop()
            for y in _bits(adj[x]):
                if y in left and y not in seen:
                    seen.add(y)
                    todo.append(y)
        groups.append(sorted(seen))
        left -= seen
    return groups


def _articulation_points(adj):
    """Vertices whose removal disconnects the graph (iterative Tarjan)."""
    n = len(adj)
    disc, low, cut = [-1] * n, [0] * n, set()
    timer = 0
    for root in range(n):
        if disc[root] >= 0:
            continue
        disc[root] = low[root] = timer
        timer += 1
        children = 0
        stack = [(root, -1, iter(sorted(_bits(adj[root]))))]
        while stack:
            v, parent, it = stack[-1]
            advanced = False
            for w in it:
                if disc[w] < 0:
                    disc[w] = low[w] = timer
                    timer += 1
                    if v == root:
                        children += 1
                    stack.append((w, v, iter(sorted(_bits(adj[w])))))
                    advanced = True
                    break
                if w != parent:
                    low[v] = min(low[v], disc[w])
            if advanced:
                continue
            stack.pop()
            if stack:
                p = stack[-1][0]
                low[p] = min(low[p], low[v])
                if p != root and low[v] >= disc[p]:
                    cut.add(p)
        if children > 1:
            cut.add(root)
    return sorted(cut)


def _canonical(cycle):
    """Rotate to start at vertex 0; direction with the smaller second element."""
    i = cycle.index(0)
    cycle = cycle[i:] + cycle[:i]
    if len(cycle) > 2 and cycle[1] > cycle[-1]:
        cycle = [cycle[0]] + cycle[:0:-1]
    return cycle


def _no_ring_reason(adj, names):
    """A proof that ``adj`` has no Hamiltonian cycle, or None when the quick checks pass."""
    n = len(adj)
    low = [i for i in range(n) if bin(adj[i]).count("1") < 2]
    if low:
        return "hosts with fewer than 2 cabled neighbours: %s" % _join_limited(
            "%s (%d)" % (names[i], bin(adj[i]).count("1")) for i in low
        )
    groups = _components(adj, range(n))
    if len(groups) > 1:
        return "the cables form %d separate groups: %s" % (
            len(groups),
            "; ".join("{%s}" % _join_limited((names[i] for i in g), 6) for g in groups),
        )
    cut = _articulation_points(adj)
    if cut:
        return "every ring would have to pass %s twice (%s the only link between two groups of hosts)" % (
            _join_limited(names[i] for i in cut),
            "it is" if len(cut) == 1 else "each is",
        )
    return None


def _closing_cable(adj, names, budget):
    """When no ring exists, look for a Hamiltonian path: the cable that would close it."""
    n = len(adj)
    degree = [bin(a).count("1") for a in adj]
    if 0 in degree or len(_components(adj, range(n))) > 1:
        return None
    ends = [i for i in range(n) if degree[i] == 1]
    if len(ends) > 2:
        return None
    # A virtual host next to every possible end of the path turns "path" into "cycle".
    # (A degree-1 host gets degree 2 from it, which forces it to be an end.)
    v = n
    allowed = ends if len(ends) == 2 else list(range(n))
    aug = list(adj) + [sum(1 << i for i in allowed)]
    for i in allowed:
        aug[i] |= 1 << v
    try:
        cyc = _hamiltonian_cycle(aug, v, False, budget)
    except _Budget:
        return None
    if cyc is None:
        return None
    path = cyc[1:]
    x, y = sorted((path[0], path[-1]))
    if path[0] != x:
        path.reverse()
    return "a cable between %s and %s would close the path %s" % (
        names[x],
        names[y],
        " -> ".join(names[i] for i in path),
    )


def _ring_search(weights, names, budget=None):
    """Best ring: the Hamiltonian cycle whose weakest hop has the most cables.

    Returns ``(cycle|None, width, notes, proven)``; ``cycle`` is canonical (starts at index
    0, smaller second element) and lexicographically smallest among the best ones unless the
    search budget ran out (then it is still deterministic). ``notes`` explain a missing ring or
    a ring that may not be the best one; ``proven`` is False when the budget ran out before
    the width (or the absence of any ring) was proved.
    """
    if budget is None:
        budget = RING_SEARCH_BUDGET
    n = len(weights)
    if n == 2:
        w = weights[0][1]
        return ([0, 1], w, [], True) if w else (None, 0, ["the two hosts share no cable"], True)
    if n > RING_SEARCH_MAX_HOSTS:
        return None, 0, ["the ring search handles at most %d hosts" % RING_SEARCH_MAX_HOSTS], False
    base_adj = [sum(1 << j for j in range(n) if weights[i][j] > 0) for i in range(n)]
    reason = _no_ring_reason(base_adj, names)
    if reason:
        notes = [reason]
        closing = _closing_cable(base_adj, names, budget)
        if closing:
            notes.append(closing)
        return None, 0, notes, True

    # Upper bound on the width: each host uses two hops, so its second-best neighbour caps it.
    cap = min(sorted(row, reverse=True)[1] for row in weights)
    widths = sorted(
        {weights[i][j] for i in range(n) for j in range(i + 1, n) if 0 < weights[i][j] <= cap}, reverse=True
    )
    gave_up = []
    for width in widths:
        adj = [sum(1 << j for j in range(n) if weights[i][j] >= width) for i in range(n)]
        if width > 1 and _no_ring_reason(adj, names):
            continue
        start = min(range(n), key=lambda i: (bin(adj[i]).count("1"), i))
        try:
            cycle = _hamiltonian_cycle(adj, start, False, budget)
        except _Budget:
            gave_up.append(width)
            continue
        if cycle is None:
            continue
        try:
            best = _hamiltonian_cycle(adj, 0, True, budget)
        except _Budget:
            best = None
        cycle = best if best is not None else _canonical(cycle)
        notes = []
        if gave_up:
            notes.append(
                "a ring with %d cables per hop may exist: the search gave up after %d steps" % (max(gave_up), budget)
            )
        return _canonical(cycle), width, notes, not gave_up
    if gave_up:
        return None, 0, ["the ring search gave up after %d steps: a ring may still exist (unproven)" % budget], False
    notes = ["no ring passes through every host once (exhaustive search)"]
    closing = _closing_cable(base_adj, names, budget)
    if closing:
        notes.append(closing)
    return None, 0, notes, True


def _host_list(hosts):
    if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)):
        raise PlanError("hosts must be a list of inventory hostnames, got %s" % type(hosts).__name__)
    hosts = list(hosts)
    for h in hosts:
        if not isinstance(h, str) or not h:
            raise PlanError("hosts must be non-empty strings, got %r" % (h,))
    dup = sorted({h for h in hosts if hosts.count(h) > 1})
    if dup:
        raise PlanError("hosts lists %s more than once" % ", ".join(dup))
    if len(hosts) < 2:
        raise PlanError("a cluster needs at least 2 hosts, got %d (%s)" % (len(hosts), ", ".join(hosts) or "none"))
    return hosts


FIX_RDMA_ENABLE = "boot into Recovery, run 'rdma_ctl enable' in Terminal, reboot"
FIX_TB5_CABLE = "use a Thunderbolt 5 cable between Thunderbolt 5 ports (80 Gb/s)"
FIX_DOCK = (
    "cable the two Macs directly, or set mlx_cluster_rdma_through_docks: true to try RDMA through the dock (unverified)"
)
FIX_NO_DEVICE = "move the cable to a Thunderbolt 5 port: RDMA needs a device on both ends"
FIX_SPEED_UNKNOWN = "check the cable (System Information > Thunderbolt shows its speed), gather facts again"


def _rdma_hosts(rdma, hosts):
    """``rdma`` -> ({host: usable}, {host: {iface: port_state} or None}, {host: (why, fix)}).

    ``rdma`` is a bool for every host, ``{host: bool}``, or ``{host: mlx_rdma facts}`` (then
    each cable end is checked for its ``rdma_<iface>`` device and ``PORT_ACTIVE``).
    """
    if isinstance(rdma, bool):
        why = None if rdma else ("RDMA is not planned (rdma=false)", None)  # on purpose: no fix
        return ({h: rdma for h in hosts}, {h: None for h in hosts}, {h: why for h in hosts if not rdma})
    if not isinstance(rdma, Mapping):
        raise PlanError(
            "rdma must be true, false or a mapping host -> bool (or mlx_rdma facts), got %s" % type(rdma).__name__
        )
    usable, devices, why = {}, {}, {}
    for h in hosts:
        v = rdma.get(h, False)
        if isinstance(v, bool):
            usable[h], devices[h] = v, None
            if not v:
                why[h] = ("no RDMA on %s" % h, FIX_RDMA_ENABLE)
            continue
        if not isinstance(v, Mapping):
            raise PlanError("rdma[%s] must be true, false or its mlx_rdma facts, got %r" % (h, v))
        devs = v.get("devices") or []
        if not isinstance(devs, (list, tuple)) or not all(isinstance(d, Mapping) for d in devs):
            raise PlanError("rdma[%s].devices must be a list of devices (mlx_rdma facts)" % h)
        usable[h] = bool(v.get("usable"))
        devices[h] = {d.get("iface"): d.get("port_state") for d in devs if d.get("iface")}
        if not usable[h]:
            if v.get("rdma_ctl") == "disabled":
                why[h] = ("RDMA is disabled on %s (rdma_ctl status)" % h, FIX_RDMA_ENABLE)
            else:
                why[h] = (
                    "%s has no RDMA device (ibv_devices lists none: Thunderbolt 4 hardware or macOS before 26.2)" % h,
                    "use Thunderbolt 5 Macs on macOS 26.2+ and enable RDMA (rdma_ctl enable from Recovery)",
                )
    return usable, devices, why


def _cable_name(c):
    return "%s:%s <-> %s:%s" % (c["a"]["host"], c["a"]["iface"], c["b"]["host"], c["b"]["iface"])


def _rdma_cable_reasons(c, devices, through_docks):
    """Why cable ``c`` cannot carry RDMA: [(reason, fix)], empty when it can.

    RDMA over Thunderbolt needs a TB5 link (80 Gb/s class) with an active RDMA device
    (``rdma_<iface>``, ``PORT_ACTIVE``) on both ends; a leg through a dock or hub only with
    ``through_docks`` (unverified on real hardware).
    """
    reasons = []
    cls, speed = c.get("link_class"), c.get("speed_gbps")
    if cls is None:
        reasons.append(("link speed unknown", FIX_SPEED_UNKNOWN))
    elif cls != "TB5":
        reasons.append(("%s %s Gb/s" % (cls, speed if speed is not None else "?"), FIX_TB5_CABLE))
    via = c.get("via") or []
    if (via or c.get("sighting") == "one-sided") and not through_docks:
        what = "through %s" % ", ".join(via) if via else "through a dock or hub (seen from one side only)"
        reasons.append((what, FIX_DOCK))
    for side in ("a", "b"):
        host, iface = c[side]["host"], c[side]["iface"]
        devs = devices.get(host)
        if devs is None:
            continue
        if iface not in devs:
            reasons.append(("no RDMA device rdma_%s on %s" % (iface, host), FIX_NO_DEVICE))
        elif devs[iface] != "PORT_ACTIVE":
            reasons.append(
                (
                    "rdma_%s on %s is %s" % (iface, host, devs[iface] or "not reported"),
                    "reseat or replace the cable on %s:%s" % (host, iface),
                )
            )
    return reasons


def _fixes(items):
    seen = []
    for _what, fix in items:
        if fix and fix not in seen:
            seen.append(fix)
    return "; ".join(seen)


def _weights(cables, index, n):
    weights = [[0] * n for _ in range(n)]
    for c in cables:
        i, j = index[c["a"]["host"]], index[c["b"]["host"]]
        weights[i][j] += 1
        weights[j][i] += 1
    return weights


def topology(links, hosts, rdma=False, backend="auto", rdma_through_docks=False, rdma_required=False):
    """Decide the cluster's shape and the MLX backend from the cables between ``hosts``.

    - ``mesh``: every pair of hosts shares at least one cable (2 hosts: one cable suffices).
    - ``ring``: a Hamiltonian cycle through all hosts, or None. Among rings the one whose
      weakest hop has the most cables wins (``ring_width``), then the lexicographically
      smallest by position in ``hosts`` (starting at ``hosts[0]``, the direction with the
      smaller second host). MLX instead takes the first longest ring its exponential
      ``extract_rings`` enumerates; our exact search prunes (degree, forced edges,
      connectivity, cut hosts, Warnsdorff order) and has a step budget: when it runs out the
      message says so rather than claiming that no ring exists.
    - RDMA runs only over cables that can carry it (``rdma_cables``): a TB5 link (80 Gb/s
      class), an RDMA device ``PORT_ACTIVE`` on both ends (when ``rdma`` gives the hosts'
      mlx_rdma facts), and no dock or hub on the way unless ``rdma_through_docks`` (RDMA
      through a dock is unverified). ``no_rdma`` lists every other cable between two RDMA
      hosts with its reasons and fix; ``rdma_mesh`` / ``rdma_ring`` / ``rdma_ring_width`` are
      the shapes those cables form (MLX's configurator checks none of this).
    - ``backend`` "auto": RDMA on every host and an RDMA mesh -> "jaccl"; an RDMA ring ->
      "jaccl-ring"; a ring of any cables -> "ring"; else None. ``backend_reason`` says why,
      naming the cables (and hosts) that kept RDMA out, ``backend_fix`` how to change it.
      With ``rdma_required`` only jaccl and jaccl-ring fit (else ``backend`` is None and the
      reason says what to fix). An explicit backend must fit or PlanError names what is
      missing (cables, hosts) and the fix.
    - ``missing``: the host pairs with no cable (what a full mesh lacks), in ``hosts`` order.

    ``rdma`` is a bool for all hosts, ``{host: bool}`` or ``{host: mlx_rdma facts}`` (absent
    hosts: False). Cables to hosts outside ``hosts`` are ignored. Also returns ``rdma``
    ({host: bool}) for ``hostfile`` and ``ring_proven`` (False only when the step budget ran
    out, so a better ring, or any ring when ``ring`` is None, may exist).
    """
    hosts = _host_list(hosts)
    cables = _cables(links)
    rdma_by_host, devices, host_why = _rdma_hosts(rdma, hosts)
    if backend is None:
        backend = "auto"
    if backend != "auto" and backend not in BACKENDS:
        raise PlanError("backend must be auto, %s; got %r" % (", ".join(BACKENDS), backend))
    for name, value in (("rdma_through_docks", rdma_through_docks), ("rdma_required", rdma_required)):
        if not isinstance(value, bool):
            raise PlanError("%s must be true or false, got %r" % (name, value))

    index = {h: i for i, h in enumerate(hosts)}
    n = len(hosts)
    inside = [c for c in cables if c["a"]["host"] in index and c["b"]["host"] in index]
    outside = len(cables) - len(inside)
    weights = _weights(inside, index, n)
    missing = [[hosts[i], hosts[j]] for i in range(n) for j in range(i + 1, n) if not weights[i][j]]
    mesh = not missing
    cycle, width, notes, proven = _ring_search(weights, hosts)
    ring = [hosts[i] for i in cycle] if cycle else None
    no_rdma = [h for h in hosts if not rdma_by_host[h]]

    # Which cables can carry RDMA (only asked between two RDMA hosts).
    rdma_cables, no_rdma_cables = [], []
    for c in inside:
        if not (rdma_by_host[c["a"]["host"]] and rdma_by_host[c["b"]["host"]]):
            continue
        reasons = _rdma_cable_reasons(c, devices, rdma_through_docks)
        if reasons:
            no_rdma_cables.append(
                {
                    "cable": c["id"],
                    "name": _cable_name(c),
                    "reasons": [r for r, _f in reasons],
                    "fix": _fixes(reasons),
                    "_pairs": reasons,
                    "_hosts": frozenset((c["a"]["host"], c["b"]["host"])),
                }
            )
        else:
            rdma_cables.append(c)
    rdma_weights = _weights(rdma_cables, index, n)
    rdma_missing = [[hosts[i], hosts[j]] for i in range(n) for j in range(i + 1, n) if not rdma_weights[i][j]]
    rdma_mesh = not no_rdma and not rdma_missing
    if no_rdma:
        rdma_cycle, rdma_width, rdma_notes = None, 0, []
    elif len(rdma_cables) == len(inside):
        rdma_cycle, rdma_width, rdma_notes = cycle, width, notes
    else:
        rdma_cycle, rdma_width, rdma_notes, _p = _ring_search(rdma_weights, hosts)
    rdma_ring = [hosts[i] for i in rdma_cycle] if rdma_cycle else None

    def bad_cables(pairs=None):
        """The cables that cannot carry RDMA (between ``pairs`` of hosts when given), named."""
        keep = None if pairs is None else {frozenset(p) for p in pairs}
        return [e for e in no_rdma_cables if keep is None or e["_hosts"] in keep]

    def named(entries):
        return _join_limited(("%s (%s)" % (e["name"], "; ".join(e["reasons"])) for e in entries), 6)

    def why_no_rdma_mesh():
        """(text, [(reason, fix)]) why jaccl cannot run."""
        if no_rdma:
            whys = []
            for h in no_rdma:
                if host_why[h] not in whys:
                    whys.append(host_why[h])
            return "; ".join(w for w, _f in whys), whys
        if missing:
            return ("no full mesh (no cable between %s)" % _join_limited("%s-%s" % tuple(p) for p in missing), [])
        bad = bad_cables(rdma_missing)
        return (
            "%s no cable that carries RDMA: %s"
            % (
                _join_limited("%s-%s" % tuple(p) for p in rdma_missing)
                + (" has" if len(rdma_missing) == 1 else " have"),
                named(bad),
            ),
            [f for e in bad for f in e["_pairs"]],
        )

    def why_no_rdma_ring():
        if no_rdma:
            return why_no_rdma_mesh()
        if not ring:
            return ("no ring (%s)" % "; ".join(notes), [])
        bad = no_rdma_cables
        return (
            "no ring of cables that carry RDMA (%s); cables that cannot: %s"
            % ("; ".join(rdma_notes) or "none", named(bad)),
            [f for e in bad for f in e["_pairs"]],
        )

    parts = ["%s, %s" % (_plural(n, "host"), _plural(len(inside), "cable"))]
    if outside:
        parts.append("%s to hosts outside this plan ignored" % _plural(outside, "cable"))
    if mesh:
        parts.append("full mesh")
    else:
        parts.append(
            "no full mesh: %s without a cable: %s"
            % (_plural(len(missing), "host pair"), _join_limited("%s-%s" % tuple(p) for p in missing))
        )
    if ring:
        parts.append("ring %s -> %s (%s per hop)" % (" -> ".join(ring), ring[0], _plural(width, "cable")))
    else:
        parts.append("no ring: %s" % "; ".join(notes))
    if ring and notes:
        parts.extend(notes)
    parts.append("RDMA on every host" if not no_rdma else "no RDMA on %s" % _join_limited(no_rdma))

    fix_items = []
    if backend == "auto":
        if rdma_mesh:
            chosen = "jaccl"
        elif rdma_ring:
            chosen = "jaccl-ring"
        elif ring:
            chosen = "ring"
        else:
            chosen = None
        if chosen == "jaccl":
            reason = "jaccl: RDMA on every host and a cable that carries RDMA between every pair"
        elif chosen == "jaccl-ring":
            text, fix_items = why_no_rdma_mesh()
            reason = "jaccl-ring, not jaccl: %s" % text
        elif chosen == "ring":
            text, fix_items = why_no_rdma_ring()
            reason = "ring, not jaccl or jaccl-ring: %s" % text
        else:
            reason = "no backend fits: MLX needs a full mesh (jaccl, with RDMA) or a ring"
        if rdma_required and chosen not in ("jaccl", "jaccl-ring"):
            text, fix_items = why_no_rdma_ring()
            reason = (
                "no backend: RDMA is required (mlx_cluster_rdma_required) but neither "
                "jaccl nor jaccl-ring fits: %s" % text
            )
            chosen = None
    else:
        lacks = []
        if backend == "jaccl" and not mesh:
            lacks.append("a full mesh (no cable between %s)" % _join_limited("%s-%s" % tuple(p) for p in missing))
        if backend in ("jaccl-ring", "ring") and not ring:
            lacks.append("a ring (%s)" % "; ".join(notes))
        if backend in ("jaccl", "jaccl-ring") and no_rdma:
            lacks.append("RDMA on %s" % _join_limited(no_rdma))
            fix_items += [host_why[h] for h in no_rdma]
        if backend == "jaccl" and mesh and not no_rdma and not rdma_mesh:
            text, items = why_no_rdma_mesh()
            lacks.append("a cable that carries RDMA between every pair (%s)" % text)
            fix_items += items
        if backend == "jaccl-ring" and ring and not no_rdma and not rdma_ring:
            text, items = why_no_rdma_ring()
            lacks.append("a ring of cables that carry RDMA (%s)" % text)
            fix_items += items
        if backend == "ring" and rdma_required:
            lacks.append("RDMA, which ring does not use (mlx_cluster_rdma_required is set)")
            fix_items.append(("", "set mlx_cluster_backend to auto, jaccl or jaccl-ring"))
        if lacks:
            fix = _fixes(fix_items)
            raise PlanError("backend %s needs %s%s" % (backend, " and ".join(lacks), ": fix: %s" % fix if fix else ""))
        chosen = backend
        reason = "%s: asked for (mlx_cluster_backend)" % backend
    used = {c["id"] for c in rdma_cables}
    if chosen in ("jaccl", "jaccl-ring") and no_rdma_cables:
        reason += "; not used for RDMA: %s" % named(no_rdma_cables)
        fix_items = fix_items + [f for e in no_rdma_cables for f in e["_pairs"]]
    if chosen == "jaccl":
        counts = {rdma_weights[i][j] for i in range(n) for j in range(i + 1, n)}
        if len(counts) > 1:
            reason += (
                "; %s per pair (pairs have %s cables that carry RDMA: as MLX, every pair "
                "gets the smallest count)" % (_plural(min(counts), "cable"), "/".join(str(k) for k in sorted(counts)))
            )
    parts.append("backend %s" % chosen if chosen else "no backend fits")
    parts.append(reason)
    return {
        "hosts": hosts,
        "mesh": mesh,
        "ring": ring,
        "ring_width": width if ring else 0,
        "ring_proven": proven,
        "backend": chosen,
        "backend_reason": reason,
        "backend_fix": _fixes(fix_items),
        "missing": missing,
        "rdma": rdma_by_host,
        "rdma_cables": sorted(used),
        "no_rdma": [{k: v for k, v in e.items() if not k.startswith("_")} for e in no_rdma_cables],
        "rdma_mesh": rdma_mesh,
        "rdma_missing": rdma_missing,
        "rdma_ring": rdma_ring,
        "rdma_ring_width": rdma_width if rdma_ring else 0,
        "message": "; ".join(parts),
    }


# --------------------------------------------------------------------------------------------
# ip_plan
# --------------------------------------------------------------------------------------------


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
    cables = _cables(links)
    ends = {}
    for c in cables:
        for side in ("a", "b"):
            key = (c[side]["host"], c[side]["iface"])
            if key in ends:
                raise PlanError(
                    "%s is an end of two cables (%s and %s): the links are inconsistent"
                    % (_end_name(*key), ends[key], c["id"])
                )
            ends[key] = c["id"]

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
                excluded.append((addr.network, _end_name(host, iface)))
    if current is None:
        now = {key: iface_addrs.get(key[0], {}).get(key[1], []) for key in ends}
    else:
        given = _host_iface_map(current, "current")
        now = {key: given.get(key[0], {}).get(key[1], []) for key in ends}

    base, slots = int(net.network_address), net.num_addresses // 4
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
    starts = [lo for lo, _hi in merged]

    def excluded_span(slot):
        i = bisect.bisect_right(starts, slot) - 1
        return merged[i] if i >= 0 and merged[i][1] >= slot else None

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

    new = [c for c in cables if c["id"] not in placed]
    blocked = sum(hi - lo + 1 for lo, hi in merged)
    free = slots - blocked - len(taken)
    if len(new) > free:
        sources = sorted({src for network, src in excluded if network.overlaps(net)})
        raise PlanError(
            "pool %s has %d /30 networks (%d excluded%s, %d kept by existing cables) but %d "
            "cables need one each: pass a larger pool (pool=..., e.g. a /%d)"
            % (
                net,
                slots,
                blocked,
                " by " + _join_limited(sources, 5) if sources else "",
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


# --------------------------------------------------------------------------------------------
# hostfile
# --------------------------------------------------------------------------------------------


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
    rdma_by_host = topology.get("rdma")
    if backend != "ring" and isinstance(rdma_by_host, Mapping):
        no_rdma = [h for h in hosts if not rdma_by_host.get(h)]
        if no_rdma:
            raise PlanError("backend %s needs RDMA on every host; not on %s" % (backend, _join_limited(no_rdma)))
    if backend == "jaccl" and not topology.get("mesh"):
        raise PlanError(
            "backend jaccl needs a full mesh; missing cables: %s"
            % _join_limited("%s-%s" % tuple(p) for p in topology.get("missing") or [])
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
                _join_limited("%s-%s" % tuple(p) for p in topology["rdma_missing"]),
                topology.get("backend_reason", ""),
                fix,
            )
        )

    rank = {h: i for i, h in enumerate(hosts)}

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

    def devices(entries):
        names = ["rdma_%s" % me["iface"] for _cid, me, _peer in entries]
        return names[0] if len(names) == 1 else names

    out = []
    if backend == "jaccl":
        if coordinators is None or not isinstance(coordinators, Mapping):
            raise PlanError(
                "backend jaccl needs coordinators: {host: address}; set "
                "mlx_cluster_coordinator_address for each host in the inventory"
            )
        # As MLX's configure_jaccl: every pair gets the smallest cable count of any pair.
        count = min(len(between(h, other)) for h in hosts for other in hosts if other != h)
        for h in hosts:
            rdma = [None if other == h else devices(between(h, other, count)) for other in hosts]
            out.append({"ssh": h, "ips": [_coordinator(h, coordinators, addresses)], "rdma": rdma})
    elif backend == "jaccl-ring":
        if coordinators is None or not isinstance(coordinators, Mapping):
            raise PlanError(
                "backend jaccl-ring needs coordinators: {host: address}; set "
                "mlx_cluster_coordinator_address for each host in the inventory"
            )
        n = len(ring)
        for i, h in enumerate(ring):
            neighbours = {ring[i - 1], ring[(i + 1) % n]}
            rdma = [devices(between(h, other, width)) if other in neighbours else None for other in ring]
            out.append({"ssh": h, "ips": [_coordinator(h, coordinators, addresses)], "rdma": rdma})
    else:
        for i, h in enumerate(ring):
            left = ring[i - 1]
            entries = between(h, left, width)
            if len(entries) < width:
                raise PlanError(
                    "ring_width is %d but the plan has %s between %s and %s"
                    % (width, _plural(len(entries), "cable"), h, left)
                )
            out.append({"ssh": h, "ips": [me["address"] for _cid, me, _peer in entries], "rdma": []})
    return {"backend": backend, "envs": list(envs), "hosts": out}


# --------------------------------------------------------------------------------------------
# dot
# --------------------------------------------------------------------------------------------


def _dot_string(text):
    """A DOT quoted string that shows ``text`` literally as a label (\\n = new line)."""
    text = str(text).replace("\\", "\\\\").replace('"', '\\"')
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\\n")
    text = "".join(ch if ch >= " " else " " for ch in text)
    return '"%s"' % text


def dot(links, topology=None, plan=None):
    """Graphviz DOT text: hosts as nodes, one edge per cable.

    Edge labels read ``en2/en3``, the speed (``80 Gb/s``) and, with a plan, the addresses
    (``10.208.x.1/.2``). TB4 and slower cables are orange and thick, one-sided cables dashed,
    cables that cannot carry RDMA (the topology's ``no_rdma``) say "no RDMA"; when no
    backend fits the topology, the host pairs a full mesh lacks are red dotted edges
    labelled "missing". Hosts without cables are drawn too, and Macs outside the inventory as
    grey dashed boxes. Node ids are generated (n0, n1, ...); host names only appear in quoted,
    escaped labels, so any name is safe.
    """
    cables = _cables(links)
    hosts = []
    if topology is not None:
        if not isinstance(topology, Mapping):
            raise PlanError("topology must be the result of mlx_topology")
        hosts.extend(h for h in topology.get("hosts") or [] if isinstance(h, str))
    if plan is not None and not isinstance(plan, Mapping):
        raise PlanError("plan must be the result of mlx_ip_plan")
    extra = sorted({c[s]["host"] for c in cables for s in ("a", "b")} - set(hosts))
    hosts.extend(extra)
    ids = {h: "n%d" % i for i, h in enumerate(hosts)}

    lines = [
        "graph mlx_cluster {",
        "  graph [overlap=false, splines=true];",
        "  node [shape=box, style=rounded];",
        "  edge [fontsize=10];",
    ]
    if topology is not None:
        summary = "backend: %s" % (topology.get("backend") or "none fits")
        if topology.get("backend") == "jaccl-ring" and topology.get("rdma_ring"):
            summary += "\nRDMA ring: %s cable(s) per hop" % topology.get("rdma_ring_width")
        elif topology.get("ring"):
            summary += "\nring: %s cable(s) per hop" % topology.get("ring_width")
        lines.append("  label=%s;" % _dot_string(summary))
    for h in hosts:
        lines.append("  %s [label=%s];" % (ids[h], _dot_string(h)))
    plan_cables = (plan or {}).get("cables") or {}
    no_rdma = {e.get("cable") for e in (topology or {}).get("no_rdma") or [] if isinstance(e, Mapping)}
    for c in cables:
        label = [
            "%s/%s" % (c["a"]["iface"], c["b"]["iface"]),
            "%s Gb/s" % c.get("speed_gbps") if c.get("speed_gbps") else "speed unknown",
        ]
        entry = plan_cables.get(c["id"])
        if isinstance(entry, Mapping):
            try:
                a_addr, b_addr = entry["a"]["address"], entry["b"]["address"]
                label.append("%s/.%s" % (a_addr, str(b_addr).rsplit(".", 1)[-1]))
            except (KeyError, TypeError):
                pass
        if c["id"] in no_rdma:
            label.append("no RDMA")
        attrs = ["label=%s" % _dot_string("\n".join(label))]
        if c.get("link_class") in ("TB4", "TB3"):
            attrs.extend(["color=orange", "penwidth=3"])
        if c.get("sighting") == "one-sided":
            attrs.append("style=dashed")
        lines.append("  %s -- %s [%s];" % (ids[c["a"]["host"]], ids[c["b"]["host"]], ", ".join(attrs)))
    for i, e in enumerate((links.get("external") or []) if isinstance(links, Mapping) else []):
        if not isinstance(e, Mapping) or e.get("host") not in ids:
            continue
        node = "x%d" % i
        lines.append(
            "  %s [label=%s, style=dashed, color=grey];"
            % (node, _dot_string("%s\n(not in inventory)" % (e.get("peer_name") or "unknown Mac")))
        )
        lines.append(
            "  %s -- %s [label=%s, style=dashed, color=grey];"
            % (ids[e["host"]], node, _dot_string(e.get("iface") or "?"))
        )
    if topology is not None and not topology.get("backend"):
        for pair in topology.get("missing") or []:
            if len(pair) == 2 and pair[0] in ids and pair[1] in ids:
                lines.append(
                    '  %s -- %s [label="missing", color=red, fontcolor=red, '
                    "style=dotted];" % (ids[pair[0]], ids[pair[1]])
                )
    lines.append("}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# the plan step: facts of every Mac + settings -> the cluster plan (mlx.cluster.mlx_cluster_plan)
# --------------------------------------------------------------------------------------------

# Where the toolkit keeps its files on a Mac when mlx_cluster_remote_dir is empty, and the
# hostfile's name there and in the artifacts directory (roles/hostfile's hostfile_name default).
DEFAULT_REMOTE_DIR = "~/mlx-cluster"
HOSTFILE_NAME = "hostfile.json"
# mlx_cluster_fallback_backend: what a launch runs on when RDMA cannot be brought up ("": none,
# the launch fails naming the cables and Macs to replug or reboot).
FALLBACK_CHOICES = ("", "ring")

# What discovery must read for a stage that runs later in the same run, by the stage's play
# tags (as in playbooks/*.yml): the network stage leaves alone a Mac whose links are in place
# and answer (probe_links), the hostfile stage one whose hostfile is right (read_hostfile); the
# power stage plans from the power settings (read_power, `pmset -g custom`); the preflight
# checks read the automatic-update settings (read_updates) and run no sudo check of their own
# on a Mac where `sudo -n` worked (probe_sudo). A run that selects none of these stages reads
# none of it.
STAGE_NEEDS = {
    ("network",): ("probe_links",),
    ("hostfile",): ("read_hostfile",),
    ("power",): ("read_wired_daemon", "read_power"),
    ("preflight", "rdma_check"): ("probe_sudo", "read_updates"),
}


def stage_runs(play_tags, run_tags=("all",), skip_tags=()):
    """Whether this run's tag selection (ansible_run_tags, ansible_skip_tags) runs the tasks of
    a play tagged `play_tags`, by Ansible's own rule (`never` only when named, `always` always,
    `all`/`tagged` select every play not tagged `never`)."""
    if isinstance(play_tags, str) or not isinstance(play_tags, (list, tuple)):
        raise PlanError("play_tags must be the play's list of tags, got %r" % (play_tags,))
    tags = set(play_tags)
    only = set(run_tags or ("all",))
    skip = set(skip_tags or ())
    if "all" in skip or "tagged" in skip or tags & skip:
        return False
    if "always" in tags and "always" not in skip:
        return True
    return bool(tags & only) or ("never" not in tags and bool({"all", "tagged"} & only))


def _remote_dir_setting(setting):
    setting = setting or DEFAULT_REMOTE_DIR
    if not isinstance(setting, str):
        raise PlanError("mlx_cluster_remote_dir must be a path, got %r" % (setting,))
    setting = setting.rstrip("/") or "/"
    if not (setting.startswith("/") or setting == "~" or setting.startswith("~/")):
        raise PlanError(
            "mlx_cluster_remote_dir %r is relative: give an absolute path (the same on "
            "every Mac, e.g. /opt/mlx-cluster) or one under ~ (each Mac's home, "
            "when every Mac has the same home directory)" % setting
        )
    why = unsafe_path(setting, "mlx_cluster_remote_dir", home=True)
    if why:
        raise PlanError(why)
    return setting


def discovery_request(
    run_tags=("all",), skip_tags=(), remote_dir_setting="", hostfile_name=HOSTFILE_NAME, wired_limit=""
):
    """What the discovery module reads besides the facts, for the stages this run runs:
    ``{probe_links, probe_sudo, read_power, read_updates: bool, read_files: [paths],
    cluster_dir: the toolkit's directory, checked on every run}``. The
    hostfile is read where the plan will put it (`~` is the Mac's home, expanded by the module,
    as :func:`remote_dir` expands it); the
    wired limit's LaunchDaemon when the power stage runs and `wired_limit`
    (mlx_cluster_wired_limit) is set."""
    needs = set()
    for play_tags, what in STAGE_NEEDS.items():
        if stage_runs(list(play_tags), run_tags, skip_tags):
            needs.update(what)
    base = _remote_dir_setting(remote_dir_setting)
    files = ["%s/%s" % (base.rstrip("/"), hostfile_name)] if "read_hostfile" in needs else []
    if "read_wired_daemon" in needs and str(wired_limit or "").strip():
        files.append(WIRED_PLIST_PATH)
    return {
        "probe_links": "probe_links" in needs,
        "probe_sudo": "probe_sudo" in needs,
        "read_power": "read_power" in needs,
        "read_updates": "read_updates" in needs,
        "read_files": files,
        "cluster_dir": base,
    }


HOSTFILE_MODE = "0600"


def hostfile_text(hostfile):
    """The hostfile as written on the controller and on every Mac: JSON as Ansible's
    to_nice_json(indent=2) prints it, one newline at the end."""
    return json.dumps(hostfile, indent=2, sort_keys=True, separators=(",", ": ")) + "\n"


def hostfile_writes(plan, files=None):
    """What a Mac needs written for its hostfile, as mlx_files takes it: ``[{path, content,
    mode}]``, or ``[]`` when no backend fits (no hostfile) or when `files` (discovery's
    ``files`` fact: ``{path: {sha256, mode}}``) shows the right one already there."""
    if plan.get("hostfile") is None:
        return []
    content = hostfile_text(plan["hostfile"])
    path = plan["hostfile_path"]
    if (files or {}).get(path) == {
        "sha256": hashlib.sha256(content.encode("utf-8")).hexdigest(),
        "mode": HOSTFILE_MODE,
    }:
        return []
    return [{"path": path, "content": content, "mode": HOSTFILE_MODE}]


def remote_dir(setting, homes):
    """The one absolute directory the toolkit uses on every Mac, from mlx_cluster_remote_dir
    (empty: ``~/mlx-cluster``) and each Mac's home directory (``{host: home}``).

    mlx.launch runs one command line on every Mac (interpreter, script and model paths are the
    same words everywhere), so the directory must be the same absolute path on all of them:
    ``~`` is expanded with each Mac's home, and Macs whose homes differ need an absolute
    mlx_cluster_remote_dir that is each Mac's user's own (``/opt/mlx-cluster``, made once per
    Mac; not below a folder every user can write, such as /Users/Shared, where another user
    could make it first)."""
    setting = _remote_dir_setting(setting)
    if not setting.startswith("~"):
        return setting
    resolved = {}
    for host in sorted(homes):
        home = homes[host]
        if not isinstance(home, str) or not home.startswith("/"):
            raise PlanError(
                "%s: its home directory is unknown (discovery returned %r), so %s "
                "cannot be resolved: set mlx_cluster_remote_dir to an absolute path" % (host, home, setting)
            )
        resolved[host] = home.rstrip("/") + setting[1:] if home != "/" else setting[1:] or "/"
    paths = sorted(set(resolved.values()))
    if len(paths) > 1:
        raise PlanError(
            "%s is a different directory on each Mac (%s): their home directories differ, and "
            "mlx.launch runs the same interpreter, script and model paths on every Mac. Set "
            "mlx_cluster_remote_dir to one absolute path that is each Mac's user's own, e.g. "
            "/opt/mlx-cluster, made once on each Mac with `sudo mkdir -p /opt/mlx-cluster && sudo "
            "chown <the login user> /opt/mlx-cluster` (not below /Users/Shared: every user can write "
            "there, and another could make the directory first)"
            % (setting, _join_limited("%s %s" % (h, p) for h, p in resolved.items()))
        )
    if not paths:
        raise PlanError("no hosts to resolve %s on" % setting)
    why = unsafe_path(paths[0], "mlx_cluster_remote_dir (%s in each Mac's home)" % setting)
    if why:
        raise PlanError(why)
    return paths[0]


def coordinator(host_vars):
    """The address a host is reached on for coordination: the inventory override
    (mlx_cluster_coordinator_address), else the address of the interface Ansible connects over
    (its mlx_cluster facts' mgmt.address)."""
    override = host_vars.get("mlx_cluster_coordinator_address") or ""
    return override or ((host_vars.get("mlx_cluster") or {}).get("mgmt") or {}).get("address")


def _home(host, facts):
    home = facts.get("home")
    if home is None:  # facts of an older discovery module: the home is where it measured disk
        home = (facts.get("disk") or {}).get("path")
    return home


def fallback(topo, addresses, backend, hostfile_name, envs=()):
    """What a launch runs on when the plan's RDMA backend cannot be brought up: None (no
    fallback set, or the plan is not RDMA), else ``{backend: "ring", from, hostfile,
    hostfile_name}``: the TCP ring over the same Thunderbolt cables and addresses (all the
    cables of the ring, not only those that carry RDMA), in ``<hostfile stem>-ring.json``."""
    if backend not in FALLBACK_CHOICES:
        raise PlanError(
            "fallback_backend must be one of %s, got %r" % (", ".join(repr(c) for c in FALLBACK_CHOICES), backend)
        )
    planned = topo.get("backend")
    if not backend or planned not in RDMA_BACKENDS:
        return None
    try:
        ring = hostfile(topo, addresses, envs=envs, backend=backend)
    except PlanError as exc:
        raise PlanError(
            "mlx_cluster_fallback_backend %s: no %s hostfile fits this wiring: %s" % (backend, backend, exc.message)
        ) from None
    stem = hostfile_name[: -len(".json")] if hostfile_name.endswith(".json") else hostfile_name
    return {"backend": backend, "from": planned, "hostfile": ring, "hostfile_name": "%s-%s.json" % (stem, backend)}


def make_plan(facts_by_host, settings):
    """The cluster plan, the one thing every later stage reads (as ``mlx_cluster_plan``).

    `facts_by_host`: ``{host: mlx_cluster facts}`` in inventory order (rank order).
    `settings`: ``hosts`` (the play's hosts, rank order), ``coordinators`` ({host: address}),
    ``ssh`` ({host: ssh target}), ``backend``, ``rdma_wanted``, ``rdma_required``,
    ``rdma_through_docks``, ``ip_pool``, ``exclude_networks``, ``envs``, ``remote_dir``,
    ``hostfile_name``, ``fallback_backend``.

    Returns ``{hosts, links, topology, ip_plan, coordinators, hostfile, ssh, remote_dir,
    hostfile_name, hostfile_path, fallback}``: hostfile is None when no backend fits the wiring
    (the topology says why); remote_dir and hostfile_path are the same absolute paths on every
    Mac; fallback is what `fallback()` gives.
    """
    hosts = list(settings.get("hosts") or facts_by_host)
    missing = [h for h in hosts if not isinstance(facts_by_host.get(h), Mapping)]
    if missing:
        raise PlanError(
            "no discovery facts for %s: run the discover stage on every Mac of the "
            "play (it always runs with site.yml)" % _join_limited(missing)
        )
    facts = {h: facts_by_host[h] for h in hosts}
    for h in hosts:
        for key in ("thunderbolt", "interfaces"):
            if key not in facts[h]:
                raise PlanError(
                    "%s: discovery facts lack %r (an older mlx_cluster_facts?): re-run the discover stage" % (h, key)
                )
    rdma_wanted = bool(settings.get("rdma_wanted", True))
    coordinators = dict(settings.get("coordinators") or {})
    found = links({h: facts[h]["thunderbolt"] for h in hosts})
    topo = topology(
        found,
        hosts,
        rdma={h: facts[h].get("rdma") for h in hosts} if rdma_wanted else False,
        backend=settings.get("backend") or "auto",
        rdma_through_docks=bool(settings.get("rdma_through_docks", False)),
        rdma_required=rdma_wanted and bool(settings.get("rdma_required", False)),
    )
    addresses = ip_plan(
        found,
        pool=settings.get("ip_pool") or DEFAULT_POOL,
        interfaces={h: facts[h]["interfaces"] for h in hosts},
        exclude=list(settings.get("exclude_networks") or []),
    )
    directory = remote_dir(settings.get("remote_dir"), {h: _home(h, facts[h]) for h in hosts})
    name = settings.get("hostfile_name") or HOSTFILE_NAME
    if "/" in name or name in (".", ".."):
        raise PlanError("hostfile_name %r must be a file name, not a path" % name)
    envs = list(settings.get("envs") or [])
    return {
        "hosts": hosts,
        "links": found,
        "topology": topo,
        "ip_plan": addresses,
        "coordinators": coordinators,
        "hostfile": (hostfile(topo, addresses, coordinators=coordinators, envs=envs) if topo.get("backend") else None),
        "ssh": dict(settings.get("ssh") or {}),
        "remote_dir": directory,
        "hostfile_name": name,
        "hostfile_path": "%s/%s" % (directory.rstrip("/"), name),
        "fallback": fallback(topo, addresses, settings.get("fallback_backend") or "", name, envs),
    }
