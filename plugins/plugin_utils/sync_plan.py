# -*- coding: utf-8 -*-
"""Who copies the model to whom, round by round, along the Thunderbolt cables (controller side).

The model sync stage (`model_sync_source: tree`) spreads the model like a breadth-first tree:
in every round each Mac that already has the model copies it to peers that do not, each copy
over one of the sender's own cables, to the receiver's address on that cable. A mesh is one
round; a ring of N Macs is ceil((N-1)/2) rounds, the copies going both ways round the ring.

- fanout: how many copies one Mac sends in one round. 0 (the default) means one per cabled
  peer at once: each cable is its own link, and on a Mac each rsync-over-ssh stream has its own
  core, so copies over different cables do not share a bottleneck (bench/model_sync.py
  measures it on the simulated cluster, where every namespace shares the machine's cores).
  1 sends to one peer at a time (a pipeline of doubling rounds).
- Several cables between the same two Macs: the copy takes the fastest (then the lowest cable
  id). A receiver with several senders in reach takes the least loaded one this round, then the
  fastest cable, then the first in rank order.
- Macs with no Thunderbolt path from the source (another island of cables, or no cable at all)
  get one copy per island over the management network, from the source, in the first round,
  to the island's Mac from which the island is shallowest; that Mac then passes it on over its
  own cables. Each such island is named in a warning. LAN copies do not count against fanout
  (another link).
- source None is the controller: it has no Thunderbolt cable, so every island (rank 0's
  included) is seeded over the management network in the first round.

Pure: no Ansible import. The filter `mlx.cluster.mlx_sync_rounds` is its face, over the plan.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from ansible_collections.mlx.cluster.plugins.plugin_utils.planner import PlanError

__all__ = ["LAN", "THUNDERBOLT", "cables_from_plan", "plan_rounds", "sync_rounds"]

THUNDERBOLT = "thunderbolt"
LAN = "lan"
CONTROLLER_NAME = "the controller"


def _names(hosts):
    if not isinstance(hosts, (list, tuple)) or not all(isinstance(h, str) and h for h in hosts):
        raise PlanError("hosts must be a list of inventory names in rank order, got %r" % (hosts,))
    seen = set()
    dupes = sorted({h for h in hosts if h in seen or seen.add(h)})
    if dupes:
        raise PlanError("hosts lists %s more than once" % ", ".join(dupes))
    return list(hosts)


def _end(cable, side):
    end = cable.get(side) if isinstance(cable, Mapping) else None
    if not isinstance(end, Mapping) or not isinstance(end.get("host"), str) or not end.get("address"):
        raise PlanError("cable %r: end %s needs a host and an address (a cable of the ip plan)"
                        % (cable.get("id") if isinstance(cable, Mapping) else cable, side))
    return end


def _pair_links(cables, rank):
    """{(sender, receiver): copy fields over the best cable between them} for hosts in rank."""
    best = {}
    for cable in cables or ():
        a, b = _end(cable, "a"), _end(cable, "b")
        if a["host"] not in rank or b["host"] not in rank or a["host"] == b["host"]:
            continue
        speed = cable.get("speed_gbps") or 0
        for s, r in ((a, b), (b, a)):
            key = (s["host"], r["host"])
            choice = (-speed, str(cable.get("id") or ""))
            if key in best and best[key][0] <= choice:
                continue
            best[key] = (choice, {"address": r["address"], "src_address": s["address"],
                                  "src_iface": s.get("iface"), "dest_iface": r.get("iface"),
                                  "cable": cable.get("id"), "speed_gbps": cable.get("speed_gbps")})
    return {k: v[1] for k, v in best.items()}


def _islands(hosts, adj):
    """Connected groups of Macs by cable, each in rank order; groups ordered by their first Mac."""
    seen, out = set(), []
    for h in hosts:
        if h in seen:
            continue
        group, todo = [], [h]
        seen.add(h)
        while todo:
            x = todo.pop()
            group.append(x)
            for y in adj[x]:
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
        out.append(sorted(group, key=hosts.index))
    return out


def _eccentricity(start, adj):
    dist, todo = {start: 0}, deque([start])
    while todo:
        x = todo.popleft()
        for y in adj[x]:
            if y not in dist:
                dist[y] = dist[x] + 1
                todo.append(y)
    return max(dist.values())


def _lan_copy(dest, src):
    return {"dest": dest, "src": src, "via": LAN, "address": None, "src_address": None,
            "src_iface": None, "dest_iface": None, "cable": None, "speed_gbps": None}


def _island_warning(source, island, root):
    others = [h for h in island if h != root]
    where = source or CONTROLLER_NAME
    text = ("no Thunderbolt path from %s to %s: %s gets the model from %s over the management "
            "network (much slower)" % (where, ", ".join(island), root, where))
    if others:
        text += " and passes it on to %s over Thunderbolt" % ", ".join(others)
    return text + (". Fix: cable %s to the others, directly or through a Mac that is" % root)


def sync_rounds(hosts, cables, source=None, fanout=0):
    """Rounds of copies that bring the model from `source` to every Mac in `hosts`.

    hosts: inventory names in rank order (the Macs to serve; cables to others are ignored).
    cables: ``[{id, speed_gbps, a: {host, iface, address}, b: {...}}]`` (the ip plan's cables
    with the links' speeds: :func:`cables_from_plan`).
    source: the Mac that has the model (in hosts), or None for the controller.
    fanout: most Thunderbolt copies one Mac sends per round; 0 = one per cabled peer.

    Returns ``{source, fanout, rounds: [[copy, ...], ...], copies: {dest: copy}, depth, lan:
    [dest, ...], islands: [[host, ...], ...], warnings: [...]}``, a copy being ``{round, dest,
    src, via: thunderbolt|lan, address (dest's on the cable; None over the LAN), src_address,
    src_iface, dest_iface, cable, speed_gbps}``. The source itself gets no copy; ``src`` None is
    the controller. Same input, same output.
    """
    hosts = _names(hosts)
    if source is not None and source not in hosts:
        raise PlanError("the model's source %r is not one of the Macs (%s)" % (source, ", ".join(hosts)))
    if isinstance(fanout, bool) or not isinstance(fanout, int) or fanout < 0:
        raise PlanError("fanout must be 0 (one copy per cabled peer at once) or a positive number "
                        "of copies per Mac and round, got %r" % (fanout,))
    rank = {h: i for i, h in enumerate(hosts)}
    links = _pair_links(cables, rank)
    adj = {h: [] for h in hosts}
    for s, r in sorted(links, key=lambda k: (rank[k[0]], rank[k[1]])):
        adj[s].append(r)
    islands = _islands(hosts, adj)

    warnings, seeds = [], []
    for island in islands:
        if source in island:
            continue
        root = min(island, key=lambda h: (_eccentricity(h, adj), rank[h]))
        seeds.append(_lan_copy(root, source))
        if source is not None or len(islands) > 1:
            warnings.append(_island_warning(source, island, root))

    have = {source} if source is not None else set()
    rounds = []
    while len(have) < len(hosts):
        copies = list(seeds) if not rounds else []
        taken = {c["dest"] for c in copies}
        load = {h: 0 for h in have}
        wanting = []
        for u in hosts:
            if u in have or u in taken:
                continue
            senders = [h for h in adj[u] if h in have]
            if senders:
                wanting.append((len(senders), rank[u], u, senders))
        for _, _, u, senders in sorted(wanting):
            free = [h for h in senders if not fanout or load[h] < fanout]
            if not free:
                continue
            src = min(free, key=lambda h: (load[h], -(links[(h, u)]["speed_gbps"] or 0), rank[h]))
            load[src] += 1
            copies.append(dict(links[(src, u)], dest=u, src=src, via=THUNDERBOLT))
        if not copies:  # cannot happen: every island is seeded; kept as a guard against a loop
            raise PlanError("no copy can reach %s" % ", ".join(h for h in hosts if h not in have))
        copies.sort(key=lambda c: rank[c["dest"]])
        for c in copies:
            c["round"] = len(rounds) + 1
            have.add(c["dest"])
        rounds.append(copies)
    by_dest = {c["dest"]: c for r in rounds for c in r}
    return {
        "source": source,
        "fanout": fanout,
        "rounds": rounds,
        "copies": {h: by_dest[h] for h in hosts if h in by_dest},
        "depth": len(rounds),
        "lan": [c["dest"] for r in rounds for c in r if c["via"] == LAN],
        "islands": islands,
        "warnings": warnings,
    }


def cables_from_plan(plan):
    """The cluster plan's cables as :func:`sync_rounds` reads them (ip plan ends, link speeds)."""
    if not isinstance(plan, Mapping) or not isinstance(plan.get("ip_plan"), Mapping):
        raise PlanError("the input must be the cluster plan (mlx_cluster_plan), with ip_plan and links")
    speeds = {c.get("id"): c.get("speed_gbps")
              for c in ((plan.get("links") or {}).get("cables") or []) if isinstance(c, Mapping)}
    cables = plan["ip_plan"].get("cables") or {}
    return [{"id": cid, "speed_gbps": speeds.get(cid), "a": dict(c["a"]), "b": dict(c["b"])}
            for cid, c in sorted(cables.items())]


def plan_rounds(plan, source=None, hosts=None, fanout=0):
    """:func:`sync_rounds` over the cluster plan: its hosts (or `hosts`, e.g. the Macs still in
    the play, kept in the plan's rank order) and its cables."""
    cables = cables_from_plan(plan)
    order = list(plan.get("hosts") or [])
    if hosts is not None:
        unknown = [h for h in hosts if h not in order]
        if unknown:
            raise PlanError("%s not in the plan's hosts (%s)" % (", ".join(unknown), ", ".join(order)))
        order = [h for h in order if h in set(hosts)]
    return sync_rounds(order, cables, source=source, fanout=fanout)
