# -*- coding: utf-8 -*-
"""The planner's first step: every Mac's Thunderbolt facts -> the cables between them
(``links()``), each seen from both ends and checked (mlx.cluster.mlx_links). Pure functions.

MLX's own ``mlx.distributed_config`` (``mlx/_distributed_utils/config.py``) is the reference;
where we differ on purpose the docstrings say so (and ``tests/unit/filter`` demonstrates it).
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import PlanError, end_name, join_limited

_LINK_CLASS_RANK = {"TB3": 3, "TB4": 4, "TB5": 5}


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
        return end_name(self.host, self.label)


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
        "id": "%s~%s" % (end_name(a.host, a.iface), end_name(b.host, b.iface)),
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
    ports = _collect_ports(facts_by_host, warnings)
    by_uuid = {}
    for p in ports:
        if p.uuid is not None:
            by_uuid.setdefault(p.uuid, []).append(p)
    unmatched = _ports_without_uuid(ports, by_uuid, warnings)
    problems += _duplicate_uuids(by_uuid)
    both, one_sided_cands = _sightings(ports, by_uuid, unmatched, external, problems, warnings)
    accepted = _one_sided_accepted(both, one_sided_cands, by_uuid, problems)
    cables = _cables_with_interfaces(both, accepted, ports, problems, warnings)
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


def _collect_ports(facts_by_host, warnings):
    """Every host's Thunderbolt ports (_Port), in a stable order; a host without facts warned
    about; two receptacles on one interface refused."""
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
    return ports


def _duplicate_uuids(by_uuid):
    """A problem for each domain UUID more than one port reports."""
    problems = []
    for uuid in sorted(by_uuid):
        owners = by_uuid[uuid]
        if len(owners) > 1:
            problems.append(
                _problem(
                    "duplicate_uuid",
                    owners,
                    "Thunderbolt domain UUID %s is reported by %s: facts copied between hosts, or "
                    "two inventory names for one Mac" % (uuid, join_limited(p.name for p in owners)),
                    "gather facts again and make sure each inventory host is a different Mac",
                )
            )
    return problems


def _owner(by_uuid, uuid):
    """The one port whose domain UUID is `uuid`, or None (none, or several)."""
    found = by_uuid.get(uuid) or []
    return found[0] if len(found) == 1 else None


def _sightings(ports, by_uuid, unmatched, external, problems, warnings):
    """What each port sees -> ({pair of UUIDs: (p, q)} seen from both ends, [(p, q)] seen from
    p only); a peer outside the inventory goes to `external`, a loop or a miswiring to
    `problems`."""
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
                    "; or to %s, whose domain UUID is unknown" % join_limited(maybe, 4) if maybe else "",
                )
            )
            continue
        q = _owner(by_uuid, p.peer_uuid)
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
            problems.append(_miswired(p, q, by_uuid))
    return both, one_sided_cands


def _miswired(p, q, by_uuid):
    """p sees q, but q sees a third port (or a UUID no one or several ports own)."""
    r = _owner(by_uuid, q.peer_uuid)
    if r is not None:
        sees = r.name
    else:
        sees = "domain UUID %s (%s)" % (
            q.peer_uuid,
            "not in the inventory" if q.peer_uuid not in by_uuid else "ambiguous",
        )
    return _problem(
        "miswired",
        [p, q],
        "%s sees %s, but %s sees %s: miswired or stale facts" % (p.name, q.name, q.name, sees),
        "check the cables on %s and %s, then gather facts again" % (p.host, q.host),
    )


def _one_sided_accepted(both, one_sided_cands, by_uuid, problems):
    """The one-sided sightings that claim no port another cable uses, and no port several
    others see ([(p, q)]); the others are problems."""
    used = {u for key in both for u in key}
    by_target = {}
    for p, q in one_sided_cands:
        by_target.setdefault(q.uuid, []).append(p)
    accepted = []
    for uuid in sorted(by_target):
        seers = by_target[uuid]
        q = _owner(by_uuid, uuid)
        if uuid in used or len(seers) > 1:
            if uuid in used:
                why = "%s sees %s, which is cabled to another port" % (seers[0].name, q.name)
            else:
                why = "%s all see %s, which has one cable" % (join_limited(p.name for p in seers), q.name)
            problems.append(
                _problem(
                    "miswired",
                    seers + [q],
                    why + ": miswired or stale facts",
                    "check the cables on %s, then gather facts again"
                    % join_limited(sorted({p.host for p in seers} | {q.host})),
                )
            )
            continue
        accepted.append((seers[0], q))
    return accepted


def _cables_with_interfaces(both, accepted, ports, problems, warnings):
    """The cables whose two ends have a network interface; a cabled port without one is a
    problem (its fix: networksetup -detectnewhardware), an empty one a warning."""
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
    return cables


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
                        "matched" % (q.name, p.name, join_limited(x.name for x, _ in pairs)),
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


def validated_cables(links_):
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
