# -*- coding: utf-8 -*-
"""Who copies the model to whom along the Thunderbolt cables (controller side).

The model sync stage (`model_sync_source: tree`) spreads the model down a tree whose copies
all run at once, pipelined: a Mac passes each file on as soon as that file is complete in its
own copy (module model_rsync, option wait_for), so a chain of Macs costs about one copy, not
one copy per hop. What bounds a pipelined copy is the slowest cable on the way, so each Mac
gets the model over the path from the source that is the widest:

- the path whose slowest cable is the fastest (widest path); then the fewest hops; then the
  sender with the fewest copies to send so far (load spread); then rank order. The tree is
  grown like Prim's: the next Mac attached is the one with the best such path through the Macs
  already attached, which gives every Mac its widest path, and among equally wide ones the
  fewest hops given the tree above it. A mesh is one hop from the source, a ring two chains
  going both ways, a Mac behind a dock leg at half speed is reached through a Mac on full-speed
  cables when there is one.
- fanout: most copies one Mac sends (they all run at once). 0 (the default): no limit, each
  cable is its own link and on a Mac each rsync-over-ssh stream has its own core. With a
  limit, a sender that has its share is passed over while another path reaches the Mac; a Mac
  that only full senders reach still gets its copy from the best of them (over the limit).
- Several cables between the same two Macs: the fastest (then the lowest cable id) is the
  copy's cable; the others are listed with it (``more``, best first). The copy without ssh
  (model_send) spreads its connections over all of them (``spread``): the tree then counts the
  pair as wide as its cables together (two 40 Gb/s cables: 80), so a Mac with two cables
  straight from its sender is not sent through a relay for a wider single cable. rsync takes
  the first cable alone, and the tree counts that one.
- Macs with no Thunderbolt path from the source (another island of cables, or no cable at all)
  get one copy per island over the management network, from the source, to the island's Mac
  from which the island is shallowest; that Mac then passes it on over its own cables. Each
  such island is named in a warning. LAN copies do not count against fanout (another link).
- source None is the controller: it has no Thunderbolt cable, so every island (rank 0's
  included) is seeded over the management network.

- A Mac reached through another Mac (a relay) that also has a cable straight from the source
  gets its model two ways at once (``split``): the source sends a share of the files over that
  cable while the relay passes on the rest. The relay's own Mac needs the whole model over the
  relay path anyway, so the direct cable carries what it can in that time: the share is the
  direct cable's speed over the relay path's slowest cable (a half-speed dock leg: half the
  model), and the relay, whose passes cost more than one long copy, the rest. The direct share
  is taken from the files the source sends last (rsync sends in name order), which the relay's
  sender gets last too; a file may overshoot the share by SPLIT_SLACK (equal shards whose
  count does not split evenly with the small files). One such split per tree (``direct``):
  the source's own fork in the copy task, which has no copy of its own to make, sends it, at the
  same time as every other copy; a second would wait for the first. The nearest such Mac, then
  the first in rank order, gets it. It counts against fanout; a share under MIN_SPLIT_SHARE is
  not worth a second copy.

The copies are also grouped by hops from the source (``rounds``; ``depth`` = hops of the
deepest Mac), which is how the plan is shown; they are not run round by round.

Pure: no Ansible import. The filter `mlx.cluster.mlx_sync_rounds` is its face, over the plan.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import PlanError, cable_name

__all__ = ["LAN", "THUNDERBOLT", "cables_from_plan", "plan_rounds", "split_files", "sync_rounds"]

THUNDERBOLT = "thunderbolt"
LAN = "lan"
CONTROLLER_NAME = "the controller"
# Below this share of the model, a second copy to the same Mac costs more than it saves.
MIN_SPLIT_SHARE = 0.1
# How far over its share a split's files may go (see the module docstring).
SPLIT_SLACK = 0.02


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
        raise PlanError(
            "cable %r: end %s needs a host and an address (a cable of the ip plan)"
            % (cable.get("id") if isinstance(cable, Mapping) else cable, side)
        )
    return end


def _pair_links(cables, rank):
    """{(sender, receiver): copy fields over the best cable between them} for hosts in rank;
    ``more``: the other cables between the same two Macs, best first (the copy without ssh
    spreads its connections over all of them)."""
    found = {}
    for cable in cables or ():
        a, b = _end(cable, "a"), _end(cable, "b")
        if a["host"] not in rank or b["host"] not in rank or a["host"] == b["host"]:
            continue
        speed = cable.get("speed_gbps") or 0
        for s, r in ((a, b), (b, a)):
            found.setdefault((s["host"], r["host"]), []).append(
                (
                    (-speed, str(cable.get("id") or "")),
                    {
                        "address": r["address"],
                        "src_address": s["address"],
                        "src_iface": s.get("iface"),
                        "dest_iface": r.get("iface"),
                        "cable": cable.get("id"),
                        "speed_gbps": cable.get("speed_gbps"),
                        # how messages name it: sender and port, receiver and port
                        "label": cable_name(s, r),
                    },
                )
            )
    links = {}
    for key, ways in found.items():
        ways = [way for _, way in sorted(ways, key=lambda w: w[0])]
        links[key] = dict(ways[0], more=ways[1:])
    return links


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
    return {
        "dest": dest,
        "src": src,
        "via": LAN,
        "address": None,
        "src_address": None,
        "src_iface": None,
        "dest_iface": None,
        "cable": None,
        "speed_gbps": None,
        "label": None,
        "more": [],
        "split": None,
    }


def split_files(files, share):
    """The files a direct copy sends when a Mac gets `share` of the model straight from the
    source (see ``split`` in the module docstring): walking the files from the last rsync sends
    (name order) to the first, each one that still fits in `share` of the bytes (SPLIT_SLACK
    over at most). Returns (the direct copy's files, the relay's files), each in name order;
    ([], all) when none fits, and never every file.

    files: {relpath: {size, ...}} (model_manifest's files)."""
    if not isinstance(files, Mapping):
        raise PlanError("files must be the model's files {relpath: {size, mtime}}, got %r" % (files,))
    sizes = {}
    for rel, entry in files.items():
        size = entry.get("size") if isinstance(entry, Mapping) else None
        if not isinstance(rel, str) or isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise PlanError("files: %r needs a size in bytes, got %r" % (rel, entry))
        sizes[rel] = size
    budget = share * (1 + SPLIT_SLACK) * sum(sizes.values())
    direct = set()
    for rel in sorted(sizes, reverse=True):
        if sizes[rel] <= budget:
            direct.add(rel)
            budget -= sizes[rel]
    if len(direct) == len(sizes):  # only when the model is empty: nothing to split
        direct = set()
    return sorted(direct), sorted(set(sizes) - direct)


def _add_split(by_dest, links, rank, source, load, fanout, files, spread):
    """Gives the first relayed copy (nearest, then rank order) with a cable straight from the
    source its direct share, while the source is under fanout; returns the direct copy (the
    split with its ``dest``) or None."""
    for dest in sorted(by_dest, key=lambda h: (by_dest[h]["round"], rank[h])):
        copy = by_dest[dest]
        direct = links.get((source, dest))
        width = copy["bottleneck_gbps"]
        if copy["via"] != THUNDERBOLT or copy["src"] == source or direct is None or not width:
            continue
        speed = _width(direct, spread)
        share = speed / width if speed > 0 else 0  # < 1: a relay is chosen only over a wider way
        if share < MIN_SPLIT_SHARE or (fanout and load[source] >= fanout):
            continue
        split = dict(direct, src=source, share=round(share, 3))
        if files is not None:
            split["files"], _ = split_files(files, share)
            if not split["files"]:
                continue
            split["bytes"] = sum(files[f]["size"] for f in split["files"])
        load[source] += 1
        copy["split"] = split
        return dict(split, dest=dest)
    return None


def _island_warning(source, island, root):
    others = [h for h in island if h != root]
    where = source or CONTROLLER_NAME
    text = "no Thunderbolt path from %s to %s: %s gets the model from %s over the management network (much slower)" % (
        where,
        ", ".join(island),
        root,
        where,
    )
    if others:
        text += " and passes it on to %s over Thunderbolt" % ", ".join(others)
    return text + (". Fix: cable %s to the others, directly or through a Mac that is" % root)


def _width(link, spread):
    """What a copy between two Macs carries: its cable's speed, or with `spread` (the copy
    spreads over every cable between them) the speeds of all of them together."""
    return (link["speed_gbps"] or 0) + (sum(m["speed_gbps"] or 0 for m in link["more"]) if spread else 0)


def _grow_tree(hosts, links, adj, rank, reached, by_dest, fanout, spread):
    """Attach the Macs not reached yet, one copy at a time: the widest way first (the slowest
    cable on it), then the fewest hops, the least loaded sender, rank order; a sender at
    `fanout` copies only when no other can. Fills `reached` and `by_dest`; -> each Mac's load."""
    load = {h: 0 for h in hosts}
    while len(reached) < len(hosts):
        best = None
        for u in sorted(reached, key=rank.get):
            width, hops, _ = reached[u]
            for v in adj[u]:
                if v in reached:
                    continue
                link = links[(u, v)]
                # a LAN-seeded island: its widths count from its root (the LAN is another link)
                w = _width(link, spread) if width is None else min(width, _width(link, spread))
                over = bool(fanout) and load[u] >= fanout
                key = (over, -w, hops + 1, load[u], rank[v], rank[u])
                if best is None or key < best[0]:
                    best = (key, u, v, w)
        if best is None:  # cannot happen: every island is seeded; kept as a guard against a loop
            raise PlanError("no copy can reach %s" % ", ".join(h for h in hosts if h not in reached))
        _, u, v, w = best
        width, hops, path = reached[u]
        load[u] += 1
        reached[v] = (None if width is None else w, hops + 1, path + [v])
        by_dest[v] = dict(
            links[(u, v)],
            dest=v,
            src=u,
            via=THUNDERBOLT,
            round=hops + 1,
            path=list(path),
            bottleneck_gbps=None if width is None else w,
            split=None,
        )
    return load


def sync_rounds(hosts, cables, source=None, fanout=0, files=None, spread=False):
    """The tree of copies that brings the model from `source` to every Mac in `hosts`.

    hosts: inventory names in rank order (the Macs to serve; cables to others are ignored).
    cables: ``[{id, speed_gbps, a: {host, iface, address}, b: {...}}]`` (the ip plan's cables
    with the links' speeds: :func:`cables_from_plan`).
    source: the Mac that has the model (in hosts), or None for the controller.
    fanout: most Thunderbolt copies one Mac sends; 0 = no limit (see the module docstring).
    files: the model's files {relpath: {size, mtime}}, to choose each split's files; None = the
    splits' shares only.
    spread: each copy goes over every cable between its two Macs (the copy without ssh): a
    pair's width is their speeds together; False (rsync): its fastest cable's.

    Returns ``{source, fanout, rounds: [[copy, ...], ...], copies: {dest: copy}, depth, lan:
    [dest, ...], direct, islands: [[host, ...], ...], warnings: [...]}``, a copy being ``{round, dest,
    src, path, bottleneck_gbps, via: thunderbolt|lan, address (dest's on the cable; None over
    the LAN), src_address, src_iface, dest_iface, cable, speed_gbps, label, more, split}``: ``round`` is the copy's
    hops from the source (1 = straight from it), ``path`` the Macs the model passes through
    before this copy (the source first, ``src`` last; the controller left out),
    ``bottleneck_gbps`` the narrowest hop on the way (a hop's cables together with `spread`;
    None when the way has a LAN copy). The
    copies all run at once; ``rounds`` groups them by hops, ``depth`` is the deepest. The
    source itself gets no copy; ``src`` None is the controller. ``split`` is None, or the
    direct copy of a relayed Mac's share: ``{src (the source), share, address, src_address,
    src_iface, dest_iface, cable, speed_gbps, label, more}``, with ``files`` (its files, which the relayed
    copy then leaves out) and ``bytes`` when `files` is given; ``direct`` is that split with its
    ``dest`` (at most one per tree), or None. ``more``: the other cables between the copy's two
    Macs, best first, each ``{address, src_address, src_iface, dest_iface, cable, speed_gbps,
    label}`` ([] for one cable, and over the LAN); ``label`` names a cable in messages
    (``m1:en2 <-> m2:en3``, plan_common.cable_name; None over the LAN). Same input, same output.
    """
    hosts = _names(hosts)
    if source is not None and source not in hosts:
        raise PlanError("the model's source %r is not one of the Macs (%s)" % (source, ", ".join(hosts)))
    if isinstance(fanout, bool) or not isinstance(fanout, int) or fanout < 0:
        raise PlanError(
            "fanout must be 0 (no limit: one copy per cabled peer at once) or a positive "
            "number of copies per Mac, got %r" % (fanout,)
        )
    rank = {h: i for i, h in enumerate(hosts)}
    links = _pair_links(cables, rank)
    adj = {h: [] for h in hosts}
    for s, r in sorted(links, key=lambda k: (rank[k[0]], rank[k[1]])):
        adj[s].append(r)
    islands = _islands(hosts, adj)

    by_dest, warnings = {}, []
    # attached Mac -> (bottleneck over the cables, or None after a LAN copy; hops; path to it)
    reached = {source: (float("inf"), 0, [])} if source is not None else {}
    for island in islands:
        if source in island:
            continue
        root = min(island, key=lambda h: (_eccentricity(h, adj), rank[h]))
        by_dest[root] = dict(_lan_copy(root, source), round=1, path=[source] if source else [], bottleneck_gbps=None)
        reached[root] = (None, 1, ([source] if source else []) + [root])
        if source is not None or len(islands) > 1:
            warnings.append(_island_warning(source, island, root))
    if source is not None:
        reached[source] = (float("inf"), 0, [source])

    load = _grow_tree(hosts, links, adj, rank, reached, by_dest, fanout, spread)
    direct = _add_split(by_dest, links, rank, source, load, fanout, files, spread) if source is not None else None
    copies = {h: by_dest[h] for h in hosts if h in by_dest}
    depth = max((c["round"] for c in copies.values()), default=0)
    rounds = [[c for c in copies.values() if c["round"] == k] for k in range(1, depth + 1)]
    return {
        "source": source,
        "fanout": fanout,
        "rounds": rounds,
        "copies": copies,
        "depth": depth,
        "lan": [c["dest"] for r in rounds for c in r if c["via"] == LAN],
        "direct": direct,
        "islands": islands,
        "warnings": warnings,
    }


def cables_from_plan(plan):
    """The cluster plan's cables as :func:`sync_rounds` reads them (ip plan ends, link speeds)."""
    if not isinstance(plan, Mapping) or not isinstance(plan.get("ip_plan"), Mapping):
        raise PlanError("the input must be the cluster plan (mlx_cluster_plan), with ip_plan and links")
    speeds = {
        c.get("id"): c.get("speed_gbps")
        for c in ((plan.get("links") or {}).get("cables") or [])
        if isinstance(c, Mapping)
    }
    cables = plan["ip_plan"].get("cables") or {}
    return [
        {"id": cid, "speed_gbps": speeds.get(cid), "a": dict(c["a"]), "b": dict(c["b"])}
        for cid, c in sorted(cables.items())
    ]


def plan_rounds(plan, source=None, hosts=None, fanout=0, files=None, spread=False):
    """:func:`sync_rounds` over the cluster plan: its hosts (or `hosts`, e.g. the Macs still in
    the play, kept in the plan's rank order) and its cables."""
    cables = cables_from_plan(plan)
    order = list(plan.get("hosts") or [])
    if hosts is not None:
        unknown = [h for h in hosts if h not in order]
        if unknown:
            raise PlanError("%s not in the plan's hosts (%s)" % (", ".join(unknown), ", ".join(order)))
        order = [h for h in order if h in set(hosts)]
    return sync_rounds(order, cables, source=source, fanout=fanout, files=files, spread=spread)


def receives_by_cable(copies, host, play_hosts):
    """Whether `host` gets its copy of the tree (`copies`, plan_rounds()'s) over a Thunderbolt
    cable without ssh in this run: its copy comes over a cable, from another Mac (not the
    controller), and every Mac on its way is still in the play (`play_hosts`). The one rule for
    where a receiver starts (roles/mlx_cluster cables.yml) and which Macs the models stage leaves
    to their receiver (roles/model_sync)."""
    copy = copies.get(host) if isinstance(copies, Mapping) else None
    if not isinstance(copy, Mapping):
        return False
    left = set(play_hosts)
    return (
        copy.get("via") == "thunderbolt"
        and copy.get("src") is not None
        and all(h in left for h in copy.get("path") or [])
    )


def copied(source_files, hosts, before, received, sent=None):
    """What the models stage moved to each Mac in this run, for artifacts/model_sync.json (the
    report's metrics): ``{host: {"bytes", "files", "via"}}``, and ``cables`` (``[{"cable",
    "bytes"}]``, by cable name) for a Mac whose senders said what each cable carried.

    `source_files`: the source's manifest ``{relpath: {size, ...}}``; `before`: ``{host:
    model_manifest's result for the destination before the copy}`` (a skipped or missing result:
    not measured that way); `received`: ``{host: model_receive's finished result}`` for the Macs
    that got theirs over a cable without ssh (their receiver counts the bytes that arrived, a
    resumed file its rest). Any other Mac (rsync: from the controller, from rank 0, along the
    tree) is credited with the files whose size differed from the source's before the copy: what
    it lacked, so what the copy sent (rsync's delta transfer may send less of a changed file).
    A Mac measured neither way is left out. `sent`: ``{host: [model_send's `cables` entries of
    every send to it]}`` (its own sender's, and the tree's direct share's)."""
    out = {}
    for host in hosts:
        got = received.get(host) if isinstance(received, Mapping) else None
        if isinstance(got, Mapping) and isinstance(got.get("bytes"), int):
            out[host] = {"bytes": got["bytes"], "files": len(got.get("copied") or []), "via": "thunderbolt"}
            by_cable = {}
            for way in (sent or {}).get(host) or ():
                if isinstance(way, Mapping) and isinstance(way.get("bytes"), int):
                    name = str(way.get("cable") or way.get("address") or "?")
                    by_cable[name] = by_cable.get(name, 0) + way["bytes"]
            if by_cable:
                out[host]["cables"] = [{"cable": name, "bytes": n} for name, n in sorted(by_cable.items())]
            continue
        had = before.get(host) if isinstance(before, Mapping) else None
        if not isinstance(had, Mapping) or not isinstance(had.get("files"), Mapping):
            continue
        lacked = [
            name
            for name, f in source_files.items()
            if (had["files"].get(name) or {}).get("size") != (f or {}).get("size")
        ]
        out[host] = {
            "bytes": sum(int((source_files[n] or {}).get("size") or 0) for n in lacked),
            "files": len(lacked),
            "via": "rsync",
        }
    return out
