# -*- coding: utf-8 -*-
"""The cables -> the topology (``topology()``): is it a full mesh, what is the best ring, which
MLX backend fits (mlx.cluster.mlx_topology). Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_launch import BACKENDS
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rdma import FIX_ENABLE
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_cables import validated_cables
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import PlanError, cable_name, join_limited, plural

# Depth-first steps one Hamiltonian-cycle search may take before it gives up (and says so).
RING_SEARCH_BUDGET = 200_000

# The ring search recurses once per host; keep well inside Python's recursion limit.
RING_SEARCH_MAX_HOSTS = 256


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
        return "hosts with fewer than 2 cabled neighbours: %s" % join_limited(
            "%s (%d)" % (names[i], bin(adj[i]).count("1")) for i in low
        )
    groups = _components(adj, range(n))
    if len(groups) > 1:
        return "the cables form %d separate groups: %s" % (
            len(groups),
            "; ".join("{%s}" % join_limited((names[i] for i in g), 6) for g in groups),
        )
    cut = _articulation_points(adj)
    if cut:
        return "every ring would have to pass %s twice (%s the only link between two groups of hosts)" % (
            join_limited(names[i] for i in cut),
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


# The fewest cables to add for a ring are searched exactly (over every order of the hosts, as a
# table of 2^n x n entries) up to this many hosts; above it, a ring from joining the cables'
# paths end to end is suggested, which may need more cables than the fewest.
RING_FIX_EXACT_HOSTS = 12


def _fewest_to_add(adj):
    """The ring through every host that reuses the most cables (adds the fewest), as a list of
    host indices from 0: an exact search over subsets (Held-Karp with costs 0 for a cable that is
    there, 1 for one to add), ties broken towards lower indices, so the answer is deterministic."""
    n = len(adj)
    full = (1 << n) - 1
    inf = n + 1
    best = [[inf] * n for _ in range(1 << n)]
    came = [[-1] * n for _ in range(1 << n)]
    best[1][0] = 0
    for mask in range(1, full + 1, 2):  # every set holding host 0
        row = best[mask]
        for v in _bits(mask):
            here = row[v]
            if here >= inf:
                continue
            for w in range(n):
                if mask >> w & 1:
                    continue
                cost = here + (0 if adj[v] >> w & 1 else 1)
                nxt = mask | 1 << w
                if cost < best[nxt][w] or (cost == best[nxt][w] and v < came[nxt][w]):
                    best[nxt][w] = cost
                    came[nxt][w] = v
    last = min(range(1, n), key=lambda v: (best[full][v] + (0 if adj[v] & 1 else 1), v))
    order, mask, v = [], full, last
    while v != -1:
        order.append(v)
        mask, v = mask ^ (1 << v), came[mask][v]
    return order[::-1]


def _joined_paths(adj):
    """A ring through every host from the cables' own paths joined end to end (greedy: cables at
    hosts with the fewest first), as a list of host indices."""
    n = len(adj)
    paths = {i: [i] for i in range(n)}  # keyed by the path's id, its first host at the start
    where = list(range(n))  # host -> the id of its path
    degree = [bin(a).count("1") for a in adj]
    cables = sorted(
        ((u, w) for u in range(n) for w in _bits(adj[u]) if u < w),
        key=lambda e: (min(degree[e[0]], degree[e[1]]), max(degree[e[0]], degree[e[1]]), e),
    )
    for u, w in cables:
        pu, pw = where[u], where[w]
        a, b = paths[pu], paths[pw]
        if pu == pw or u not in (a[0], a[-1]) or w not in (b[0], b[-1]):
            continue
        if a[-1] != u:
            a.reverse()
        if b[0] != w:
            b.reverse()
        a.extend(b)
        del paths[pw]
        for h in b:
            where[h] = pu
    order = [h for key in sorted(paths) for h in paths[key]]
    i = order.index(0)
    return order[i:] + order[:i]


def _ring_fix(adj, names):
    """When no ring exists and no one cable closes a path: the cables to add for a ring, and
    that ring (the fewest up to RING_FIX_EXACT_HOSTS hosts), or None for two hosts."""
    n = len(adj)
    if n < 3:
        return None
    exact = n <= RING_FIX_EXACT_HOSTS
    ring = _canonical(_fewest_to_add(adj) if exact else _joined_paths(adj))
    hops = list(zip(ring, ring[1:] + ring[:1]))
    new = [tuple(sorted((u, w))) for u, w in hops if not adj[u] >> w & 1]
    return "%s %s (%s) would make the ring %s (each needs a free Thunderbolt port on both Macs)" % (
        "adding" if exact else "for example, adding",
        plural(len(new), "cable"),
        ", ".join("%s-%s" % (names[u], names[w]) for u, w in sorted(new)),
        " -> ".join(names[i] for i in ring + ring[:1]),
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
        closing = _closing_cable(base_adj, names, budget) or _ring_fix(base_adj, names)
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
    closing = _closing_cable(base_adj, names, budget) or _ring_fix(base_adj, names)
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
                why[h] = ("no RDMA on %s" % h, FIX_ENABLE)
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
                why[h] = ("RDMA is disabled on %s (rdma_ctl status)" % h, FIX_ENABLE)
            else:
                why[h] = (
                    "%s has no RDMA device (ibv_devices lists none: Thunderbolt 4 hardware or macOS before 26.2)" % h,
                    "use Thunderbolt 5 Macs on macOS 26.2+ and enable RDMA (rdma_ctl enable from Recovery)",
                )
    return usable, devices, why


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
    hosts, cables, rdma_hosts, backend = _arguments(links, hosts, rdma, backend, rdma_through_docks, rdma_required)
    shape = _cable_shape(hosts, cables)
    _add_rdma_shape(shape, *rdma_hosts, rdma_through_docks)
    parts = _summary(shape)
    if backend == "auto":
        chosen, reason, fix_items = _auto_backend(shape, rdma_required)
    else:
        chosen, reason, fix_items = _asked_backend(shape, backend, rdma_required)
    reason, fix_items = _rdma_use_notes(shape, chosen, reason, fix_items)
    parts.append("backend %s" % chosen if chosen else "no backend fits")
    parts.append(reason)
    return _result(shape, chosen, reason, fix_items, parts)


def _arguments(links, hosts, rdma, backend, rdma_through_docks, rdma_required):
    """topology()'s arguments checked, in that order: (hosts, cables, _rdma_hosts(), backend)."""
    hosts = _host_list(hosts)
    cables = validated_cables(links)
    rdma_hosts = _rdma_hosts(rdma, hosts)
    if backend is None:
        backend = "auto"
    if backend != "auto" and backend not in BACKENDS:
        raise PlanError("backend must be auto, %s; got %r" % (", ".join(BACKENDS), backend))
    for name, value in (("rdma_through_docks", rdma_through_docks), ("rdma_required", rdma_required)):
        if not isinstance(value, bool):
            raise PlanError("%s must be true or false, got %r" % (name, value))
    return hosts, cables, rdma_hosts, backend


class _Shape:
    """What the cables between the plan's hosts form, for topology()'s steps.

    _cable_shape sets, for every cable between two of ``hosts``: ``hosts``, ``index`` ({host:
    position}), ``n``, ``inside`` (those cables), ``outside`` (how many others), ``weights``
    (cables per pair), ``missing`` (pairs without one), ``mesh``, ``ring`` (host names or
    None) and _ring_search's ``width``, ``notes`` and ``proven``.

    _add_rdma_shape sets the same for the cables that carry RDMA: ``rdma_by_host``,
    ``host_why`` ({host: (why, fix)} of a host without RDMA), ``no_rdma_hosts``,
    ``rdma_cables``, ``no_rdma_cables`` (one entry per other cable between two RDMA hosts,
    with its ``_pairs`` of (reason, fix) and its ``_hosts``), ``rdma_weights``,
    ``rdma_missing``, ``rdma_mesh``, ``rdma_ring``, ``rdma_width`` and ``rdma_notes``.
    """


def _cable_shape(hosts, cables):
    """The mesh and the best ring of the cables between two of ``hosts`` (a _Shape)."""
    s = _Shape()
    s.hosts, s.index, s.n = hosts, {h: i for i, h in enumerate(hosts)}, len(hosts)
    s.inside = [c for c in cables if c["a"]["host"] in s.index and c["b"]["host"] in s.index]
    s.outside = len(cables) - len(s.inside)
    s.weights = _weights(s.inside, s.index, s.n)
    s.missing = _missing_pairs(hosts, s.weights)
    s.mesh = not s.missing
    cycle, s.width, s.notes, s.proven = _ring_search(s.weights, hosts)
    s.ring = [hosts[i] for i in cycle] if cycle else None
    s.cycle = cycle
    return s


def _missing_pairs(hosts, weights):
    n = len(hosts)
    return [[hosts[i], hosts[j]] for i in range(n) for j in range(i + 1, n) if not weights[i][j]]


def _add_rdma_shape(s, rdma_by_host, devices, host_why, through_docks):
    """Add to _Shape ``s`` which cables carry RDMA and the mesh and ring they form."""
    s.rdma_by_host, s.host_why = rdma_by_host, host_why
    s.no_rdma_hosts = [h for h in s.hosts if not rdma_by_host[h]]
    s.rdma_cables, s.no_rdma_cables = _rdma_cables(s.inside, rdma_by_host, devices, through_docks)
    s.rdma_weights = _weights(s.rdma_cables, s.index, s.n)
    s.rdma_missing = _missing_pairs(s.hosts, s.rdma_weights)
    s.rdma_mesh = not s.no_rdma_hosts and not s.rdma_missing
    if s.no_rdma_hosts:
        rdma_cycle, s.rdma_width, s.rdma_notes = None, 0, []
    elif len(s.rdma_cables) == len(s.inside):
        rdma_cycle, s.rdma_width, s.rdma_notes = s.cycle, s.width, s.notes
    else:
        rdma_cycle, s.rdma_width, s.rdma_notes, _p = _ring_search(s.rdma_weights, s.hosts)
    s.rdma_ring = [s.hosts[i] for i in rdma_cycle] if rdma_cycle else None


def _rdma_cables(inside, rdma_by_host, devices, through_docks):
    """Which cables can carry RDMA (only asked between two RDMA hosts): (cables, entries of
    the others)."""
    rdma_cables, no_rdma_cables = [], []
    for c in inside:
        if not (rdma_by_host[c["a"]["host"]] and rdma_by_host[c["b"]["host"]]):
            continue
        reasons = _rdma_cable_reasons(c, devices, through_docks)
        if reasons:
            no_rdma_cables.append(
                {
                    "cable": c["id"],
                    "name": cable_name(c["a"], c["b"]),
                    "reasons": [r for r, _f in reasons],
                    "fix": _fixes(reasons),
                    "_pairs": reasons,
                    "_hosts": frozenset((c["a"]["host"], c["b"]["host"])),
                }
            )
        else:
            rdma_cables.append(c)
    return rdma_cables, no_rdma_cables


def _named(entries):
    """Cables that cannot carry RDMA, by name with their reasons (the first 6)."""
    return join_limited(("%s (%s)" % (e["name"], "; ".join(e["reasons"])) for e in entries), 6)


def _why_no_rdma_mesh(s):
    """(text, [(reason, fix)]) why jaccl cannot run."""
    if s.no_rdma_hosts:
        whys = []
        for h in s.no_rdma_hosts:
            if s.host_why[h] not in whys:
                whys.append(s.host_why[h])
        return "; ".join(w for w, _f in whys), whys
    if s.missing:
        return ("no full mesh (no cable between %s)" % join_limited("%s-%s" % tuple(p) for p in s.missing), [])
    keep = {frozenset(p) for p in s.rdma_missing}
    bad = [e for e in s.no_rdma_cables if e["_hosts"] in keep]
    return (
        "%s no cable that carries RDMA: %s"
        % (
            join_limited("%s-%s" % tuple(p) for p in s.rdma_missing)
            + (" has" if len(s.rdma_missing) == 1 else " have"),
            _named(bad),
        ),
        [f for e in bad for f in e["_pairs"]],
    )


def _why_no_rdma_ring(s):
    """(text, [(reason, fix)]) why jaccl-ring cannot run."""
    if s.no_rdma_hosts:
        return _why_no_rdma_mesh(s)
    if not s.ring:
        return ("no ring (%s)" % "; ".join(s.notes), [])
    bad = s.no_rdma_cables
    return (
        "no ring of cables that carry RDMA (%s); cables that cannot: %s"
        % ("; ".join(s.rdma_notes) or "none", _named(bad)),
        [f for e in bad for f in e["_pairs"]],
    )


def _summary(s):
    """The message's first parts: hosts and cables, the mesh, the ring, RDMA on the hosts."""
    parts = ["%s, %s" % (plural(s.n, "host"), plural(len(s.inside), "cable"))]
    if s.outside:
        parts.append("%s to hosts outside this plan ignored" % plural(s.outside, "cable"))
    if s.mesh:
        parts.append("full mesh")
    else:
        parts.append(
            "no full mesh: %s without a cable: %s"
            % (plural(len(s.missing), "host pair"), join_limited("%s-%s" % tuple(p) for p in s.missing))
        )
    if s.ring:
        parts.append("ring %s -> %s (%s per hop)" % (" -> ".join(s.ring), s.ring[0], plural(s.width, "cable")))
    else:
        parts.append("no ring: %s" % "; ".join(s.notes))
    if s.ring and s.notes:
        parts.extend(s.notes)
    parts.append("RDMA on every host" if not s.no_rdma_hosts else "no RDMA on %s" % join_limited(s.no_rdma_hosts))
    return parts


def _auto_backend(s, rdma_required):
    """backend auto: the best one that fits, (chosen or None, reason, [(reason, fix)])."""
    fix_items = []
    if s.rdma_mesh:
        chosen = "jaccl"
    elif s.rdma_ring:
        chosen = "jaccl-ring"
    elif s.ring:
        chosen = "ring"
    else:
        chosen = None
    if chosen == "jaccl":
        reason = "jaccl: RDMA on every host and a cable that carries RDMA between every pair"
    elif chosen == "jaccl-ring":
        text, fix_items = _why_no_rdma_mesh(s)
        reason = "jaccl-ring, not jaccl: %s" % text
    elif chosen == "ring":
        text, fix_items = _why_no_rdma_ring(s)
        reason = "ring, not jaccl or jaccl-ring: %s" % text
    else:
        reason = "no backend fits: MLX needs a full mesh (jaccl, with RDMA) or a ring"
    if rdma_required and chosen not in ("jaccl", "jaccl-ring"):
        text, fix_items = _why_no_rdma_ring(s)
        reason = (
            "no backend: RDMA is required (mlx_cluster_rdma_required) but neither jaccl nor jaccl-ring fits: %s" % text
        )
        chosen = None
    return chosen, reason, fix_items


def _asked_backend(s, backend, rdma_required):
    """An explicit backend: (backend, reason, []) when it fits, else PlanError naming what it
    lacks and the fix."""
    lacks, fix_items = [], []
    if backend == "jaccl" and not s.mesh:
        lacks.append("a full mesh (no cable between %s)" % join_limited("%s-%s" % tuple(p) for p in s.missing))
    if backend in ("jaccl-ring", "ring") and not s.ring:
        lacks.append("a ring (%s)" % "; ".join(s.notes))
    if backend in ("jaccl", "jaccl-ring") and s.no_rdma_hosts:
        lacks.append("RDMA on %s" % join_limited(s.no_rdma_hosts))
        fix_items += [s.host_why[h] for h in s.no_rdma_hosts]
    if backend == "jaccl" and s.mesh and not s.no_rdma_hosts and not s.rdma_mesh:
        text, items = _why_no_rdma_mesh(s)
        lacks.append("a cable that carries RDMA between every pair (%s)" % text)
        fix_items += items
    if backend == "jaccl-ring" and s.ring and not s.no_rdma_hosts and not s.rdma_ring:
        text, items = _why_no_rdma_ring(s)
        lacks.append("a ring of cables that carry RDMA (%s)" % text)
        fix_items += items
    if backend == "ring" and rdma_required:
        lacks.append("RDMA, which ring does not use (mlx_cluster_rdma_required is set)")
        fix_items.append(("", "set mlx_cluster_backend to auto, jaccl or jaccl-ring"))
    if lacks:
        fix = _fixes(fix_items)
        raise PlanError("backend %s needs %s%s" % (backend, " and ".join(lacks), ": fix: %s" % fix if fix else ""))
    return backend, "%s: asked for (mlx_cluster_backend)" % backend, fix_items


def _rdma_use_notes(s, chosen, reason, fix_items):
    """With jaccl or jaccl-ring: the reason and fixes get the cables left out of RDMA and, for
    jaccl, the uneven cable counts per pair."""
    if chosen in ("jaccl", "jaccl-ring") and s.no_rdma_cables:
        reason += "; not used for RDMA: %s" % _named(s.no_rdma_cables)
        fix_items = fix_items + [f for e in s.no_rdma_cables for f in e["_pairs"]]
    if chosen == "jaccl":
        counts = {s.rdma_weights[i][j] for i in range(s.n) for j in range(i + 1, s.n)}
        if len(counts) > 1:
            reason += (
                "; %s per pair (pairs have %s cables that carry RDMA: as MLX, every pair "
                "gets the smallest count)" % (plural(min(counts), "cable"), "/".join(str(k) for k in sorted(counts)))
            )
    return reason, fix_items


def _result(s, chosen, reason, fix_items, parts):
    """topology()'s answer."""
    return {
        "hosts": s.hosts,
        "mesh": s.mesh,
        "ring": s.ring,
        "ring_width": s.width if s.ring else 0,
        "ring_proven": s.proven,
        "backend": chosen,
        "backend_reason": reason,
        "backend_fix": _fixes(fix_items),
        "missing": s.missing,
        "rdma": s.rdma_by_host,
        "rdma_cables": sorted({c["id"] for c in s.rdma_cables}),
        "no_rdma": [{k: v for k, v in e.items() if not k.startswith("_")} for e in s.no_rdma_cables],
        "rdma_mesh": s.rdma_mesh,
        "rdma_missing": s.rdma_missing,
        "rdma_ring": s.rdma_ring,
        "rdma_ring_width": s.rdma_width if s.rdma_ring else 0,
        "message": "; ".join(parts),
    }
