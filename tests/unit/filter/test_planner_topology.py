"""mlx_planner.topology: mesh, best ring, backend, and what is missing."""

from __future__ import annotations

import time

import pytest

from ansible_collections.mlx.cluster.plugins.plugin_utils import plan_cables, plan_topology
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import PlanError
from tests.unit.filter.planner_synth import cable, make_facts, mesh_cables, ring_cables, torus_cables


def links_of(hosts, cables):
    return plan_cables.links(make_facts(hosts, cables))


def chain(names, **kw):
    """Cables a-b, b-c, ... with distinct ifaces."""
    return [cable(x, "en%d" % (10 + i), y, "en%d" % (30 + i), **kw) for i, (x, y) in enumerate(zip(names, names[1:]))]


def test_full_mesh_with_rdma_is_jaccl():
    hosts, cables = mesh_cables(4)
    topo = plan_topology.topology(links_of(hosts, cables), hosts, rdma=True)
    assert topo["mesh"] is True and topo["missing"] == []
    assert topo["backend"] == "jaccl"
    assert topo["ring"] == ["m00", "m01", "m02", "m03"] and topo["ring_width"] == 1
    assert topo["ring_proven"] is True


def test_ring_with_rdma_is_jaccl_ring_and_canonical():
    hosts, cables = ring_cables(5)
    order = ["r02", "r00", "r04", "r01", "r03"]  # the first host given is the ring's start
    topo = plan_topology.topology(links_of(hosts, cables), order, rdma=True)
    assert topo["mesh"] is False
    assert topo["backend"] == "jaccl-ring"
    # start at order[0]; of its two neighbours (r01, r03) the one listed first in `order` next
    assert topo["ring"] == ["r02", "r01", "r00", "r04", "r03"]
    assert "ring r02 -> r01 -> r00 -> r04 -> r03 -> r02 (1 cable per hop)" in topo["message"]


def test_ring_without_rdma_everywhere_is_ring():
    hosts, cables = ring_cables(4)
    rdma = {h: True for h in hosts}
    rdma["r02"] = False
    topo = plan_topology.topology(links_of(hosts, cables), hosts, rdma=rdma)
    assert topo["backend"] == "ring"
    assert "no RDMA on r02" in topo["message"]


def test_rdma_mapping_missing_host_counts_as_false():
    hosts, cables = mesh_cables(3)
    topo = plan_topology.topology(links_of(hosts, cables), hosts, rdma={"m00": True, "m01": True})
    assert topo["rdma"] == {"m00": True, "m01": True, "m02": False}
    assert topo["backend"] == "ring"


@pytest.mark.parametrize("rdma, backend", [(True, "jaccl"), (False, "ring")])
def test_two_hosts_are_mesh_and_ring(rdma, backend):
    links = links_of(["a", "b"], [cable("a", "en2", "b", "en2"), cable("a", "en3", "b", "en3")])
    topo = plan_topology.topology(links, ["b", "a"], rdma=rdma)
    assert topo["mesh"] is True and topo["ring"] == ["b", "a"] and topo["ring_width"] == 2
    assert topo["backend"] == backend


def test_path_nothing_fits_says_what_is_missing():
    hosts = ["a", "b", "c", "d"]
    topo = plan_topology.topology(links_of(hosts, chain(hosts)), hosts, rdma=True)
    assert topo["backend"] is None and topo["ring"] is None and topo["ring_width"] == 0
    assert topo["missing"] == [["a", "c"], ["a", "d"], ["b", "d"]]
    msg = topo["message"]
    assert "fewer than 2 cabled neighbours: a (1), d (1)" in msg
    assert "a cable between a and d would close the path a -> b -> c -> d" in msg
    assert "no backend fits" in msg


def test_a_star_is_told_which_cables_would_make_a_ring():
    """One Mac cabled to each of three others (no single cable closes a path): the plan names
    the fewest cables to add, and the ring they make."""
    hosts = ["a", "b", "c", "d"]
    cables = [cable("a", "en%d" % (10 + i), h, "en%d" % (30 + i)) for i, h in enumerate(hosts[1:])]
    topo = plan_topology.topology(links_of(hosts, cables), hosts)
    assert topo["ring"] is None
    assert "fewer than 2 cabled neighbours: b (1), c (1), d (1)" in topo["message"]
    assert "adding 2 cables (b-c, c-d) would make the ring a -> b -> c -> d -> a" in topo["message"], topo["message"]


def test_two_separate_pairs_are_told_which_cables_join_them_into_a_ring():
    hosts = ["a", "b", "c", "d"]
    cables = [cable("a", "en10", "b", "en10"), cable("c", "en11", "d", "en11")]
    topo = plan_topology.topology(links_of(hosts, cables), hosts)
    assert "adding 2 cables (a-d, b-c) would make the ring a -> b -> c -> d -> a" in topo["message"], topo["message"]


def _ring_of(text, names):
    """(the ring, the cables to add) read back from _ring_fix's sentence, as name lists."""
    added = text.split("(", 1)[1].split(")", 1)[0].split(", ")
    ring = text.split("would make the ring ", 1)[1].split(" (", 1)[0].split(" -> ")
    return ring, {tuple(sorted(c.split("-"))) for c in added}


@pytest.mark.parametrize("seed", range(40))
def test_the_cables_to_add_make_a_ring_and_are_the_fewest(seed):
    """Random wirings of 3-7 hosts without a ring: the suggested ring passes every host once over
    cables that are there or suggested, and no order of the hosts needs fewer new cables."""
    import itertools
    import random

    rnd = random.Random(seed)
    n = rnd.randint(3, 7)
    names = ["h%d" % i for i in range(n)]
    edges = {(i, j) for i in range(n) for j in range(i + 1, n) if rnd.random() < 0.35}
    adj = [0] * n
    for i, j in edges:
        adj[i] |= 1 << j
        adj[j] |= 1 << i
    fewest = min(
        sum((min(u, w), max(u, w)) not in edges for u, w in zip((0, *p), (*p, 0)))
        for p in itertools.permutations(range(1, n))
    )
    if fewest == 0:
        return  # this wiring has a ring: nothing to suggest
    text = plan_topology._ring_fix(adj, names)
    ring, added = _ring_of(text, names)
    assert ring[0] == ring[-1] and sorted(ring[:-1]) == sorted(names), text
    for u, w in zip(ring, ring[1:]):
        pair = tuple(sorted((u, w)))
        assert (names.index(pair[0]), names.index(pair[1])) in edges or pair in added, (text, pair)
    assert len(added) == fewest, (text, fewest)


def test_above_the_exact_search_a_ring_from_joined_paths_is_suggested():
    n = plan_topology.RING_FIX_EXACT_HOSTS + 1
    names = ["h%d" % i for i in range(n)]
    adj = [0] * n
    for i in range(1, n):  # a star: h0 cabled to every other host
        adj[0] |= 1 << i
        adj[i] |= 1 << 0
    text = plan_topology._ring_fix(adj, names)
    assert text.startswith("for example, adding %d cables" % (n - 2)), text
    ring, added = _ring_of(text, names)
    assert sorted(ring[:-1]) == sorted(names) and len(added) == n - 2, text


def test_two_triangles_sharing_a_host():
    hosts = ["a", "b", "c", "d", "e"]
    cables = chain(["a", "b", "c", "a"]) + [
        cable("c", "en50", "d", "en50"),
        cable("d", "en51", "e", "en51"),
        cable("e", "en52", "c", "en52"),
    ]
    topo = plan_topology.topology(links_of(hosts, cables), hosts)
    assert topo["ring"] is None
    assert "pass c twice" in topo["message"]


def test_disconnected_groups():
    hosts = ["a", "b", "c", "d", "e", "f"]
    cables = chain(["a", "b", "c", "a"]) + chain(["d", "e", "f", "d"], speed=40)
    topo = plan_topology.topology(links_of(hosts, [dict(c) for c in cables]), hosts)
    assert topo["ring"] is None
    assert "2 separate groups: {a, b, c}; {d, e, f}" in topo["message"]


PETERSEN = [
    (0, 1),
    (1, 2),
    (2, 3),
    (3, 4),
    (4, 0),
    (0, 5),
    (1, 6),
    (2, 7),
    (3, 8),
    (4, 9),
    (5, 7),
    (7, 9),
    (9, 6),
    (6, 8),
    (8, 5),
]


def test_petersen_graph_has_no_ring_exhaustive():
    hosts = ["p%d" % i for i in range(10)]
    cables = [cable(hosts[i], "en%d" % (2 + k), hosts[j], "en%d" % (20 + k)) for k, (i, j) in enumerate(PETERSEN)]
    topo = plan_topology.topology(links_of(hosts, cables), hosts)
    assert topo["ring"] is None and topo["ring_proven"] is True
    assert "no ring passes through every host once (exhaustive search)" in topo["message"]
    assert "a cable between" in topo["message"]  # Petersen has Hamiltonian paths


def test_prefers_the_widest_ring():
    # Ring a-b-c-d (1 cable per hop) versus ring a-c-b-d (2 cables per hop).
    hosts = ["a", "b", "c", "d"]
    cables = chain(["a", "b", "c", "d", "a"])
    for k, (x, y) in enumerate([("a", "c"), ("a", "c"), ("b", "c"), ("b", "d"), ("b", "d"), ("a", "d")]):
        cables.append(cable(x, "en%d" % (60 + k), y, "en%d" % (80 + k)))
    topo = plan_topology.topology(links_of(hosts, cables), hosts)
    assert topo["ring"] == ["a", "c", "b", "d"] and topo["ring_width"] == 2


def test_cables_to_hosts_outside_the_plan_are_ignored():
    hosts, cables = mesh_cables(3)
    topo = plan_topology.topology(links_of(hosts, cables), ["m00", "m01"])
    assert topo["backend"] == "ring" and topo["ring_width"] == 1
    assert "2 cables to hosts outside this plan ignored" in topo["message"]


@pytest.mark.parametrize(
    "backend, rdma, match",
    [
        pytest.param("jaccl", True, "needs a full mesh \\(no cable between r00-r02, r01-r03\\)", id="jaccl-no-mesh"),
        pytest.param("jaccl-ring", {"r00": True}, "needs RDMA on r01, r02, r03", id="jaccl-ring-no-rdma"),
        pytest.param("jaccl", False, "full mesh .* and RDMA on r00, r01, r02, r03", id="jaccl-neither"),
    ],
)
def test_explicit_backend_must_fit(backend, rdma, match):
    hosts, cables = ring_cables(4)
    with pytest.raises(PlanError, match=match):
        plan_topology.topology(links_of(hosts, cables), hosts, rdma=rdma, backend=backend)


def test_explicit_ring_backend_without_a_ring():
    hosts = ["a", "b", "c"]
    with pytest.raises(PlanError, match="backend ring needs a ring \\(hosts with fewer than 2"):
        plan_topology.topology(links_of(hosts, chain(hosts)), hosts, backend="ring")


def test_explicit_backend_that_fits():
    hosts, cables = mesh_cables(3)
    topo = plan_topology.topology(links_of(hosts, cables), hosts, rdma=True, backend="jaccl-ring")
    assert topo["backend"] == "jaccl-ring"


@pytest.mark.parametrize(
    "hosts, kw, match",
    [
        pytest.param(["a"], {}, "at least 2 hosts", id="one-host"),
        pytest.param(["a", "a"], {}, "lists a more than once", id="duplicate"),
        pytest.param("ab", {}, "must be a list", id="string"),
        pytest.param(["a", "b"], {"backend": "mpi"}, "backend must be", id="backend"),
        pytest.param(["a", "b"], {"rdma": "yes"}, "rdma must be", id="rdma"),
        pytest.param(["a", "b"], {"rdma": {"a": "yes"}}, "rdma\\[a\\] must be", id="rdma-map"),
    ],
)
def test_bad_arguments(hosts, kw, match):
    with pytest.raises(PlanError, match=match):
        plan_topology.topology({"cables": []}, hosts, **kw)


def test_budget_exhaustion_is_reported_honestly(monkeypatch):
    hosts = ["p%d" % i for i in range(10)]
    cables = [cable(hosts[i], "en%d" % (2 + k), hosts[j], "en%d" % (20 + k)) for k, (i, j) in enumerate(PETERSEN)]
    monkeypatch.setattr(plan_topology, "RING_SEARCH_BUDGET", 3)
    topo = plan_topology.topology(links_of(hosts, cables), hosts)
    assert topo["ring"] is None and topo["ring_proven"] is False
    assert "gave up after 3 steps: a ring may still exist" in topo["message"]
    assert "exhaustive" not in topo["message"]


def test_budget_exhaustion_at_a_wider_ring_is_reported(monkeypatch):
    # Two cables on every Petersen edge (no ring of width 2, but proving it takes a search)
    # plus a one-cable ring: with a tiny budget the width-1 ring is found and the message
    # says that a wider one was not ruled out.
    hosts = ["p%d" % i for i in range(10)]
    cables = []
    for k, (i, j) in enumerate(PETERSEN):
        cables.append(cable(hosts[i], "en%d" % (2 + k), hosts[j], "en%d" % (40 + k)))
        cables.append(cable(hosts[i], "ex%d" % (2 + k), hosts[j], "ex%d" % (40 + k)))
    order = [0, 5, 1, 7, 2, 8, 3, 9, 4, 6]
    for k in range(10):
        cables.append(cable(hosts[order[k]], "ey%d" % k, hosts[order[(k + 1) % 10]], "ez%d" % k))
    links = links_of(hosts, cables)
    topo = plan_topology.topology(links, hosts)
    assert topo["ring_width"] == 1 and topo["ring_proven"] is True
    monkeypatch.setattr(plan_topology, "RING_SEARCH_BUDGET", 20)
    topo = plan_topology.topology(links, hosts)
    assert topo["ring_width"] == 1 and topo["ring_proven"] is False
    assert "a ring with 2 cables per hop may exist: the search gave up after 20 steps" in topo["message"]


def _fastest_ms(fn, runs=3):
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        best = min(best, (time.perf_counter() - t) * 1000)
    return best


@pytest.mark.parametrize(
    "case, build",
    [
        pytest.param("ring64", lambda: ring_cables(64), id="ring-64"),
        pytest.param("torus8x8", lambda: torus_cables(8, 8), id="torus-8x8"),
        pytest.param("torus4x5", lambda: torus_cables(4, 5), id="torus-4x5"),
        pytest.param("mesh8", lambda: mesh_cables(8), id="mesh-8"),
        pytest.param("mesh9", lambda: mesh_cables(9), id="mesh-9"),
    ],
)
def test_fast_on_large_clusters(case, build):
    hosts, cables = build()
    links = links_of(hosts, cables)
    topo = plan_topology.topology(links, hosts)
    assert topo["ring"] is not None and sorted(topo["ring"]) == sorted(hosts)
    assert _fastest_ms(lambda: plan_topology.topology(links, hosts)) < 50
