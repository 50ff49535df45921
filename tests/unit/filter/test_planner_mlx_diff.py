"""Differential tests: our planner against MLX's own mlx.distributed_config.

The same synthetic wiring becomes our `mlx_thunderbolt` facts and, for MLX, the
`system_profiler -json` / `networksetup` output its `extract_connectivity` parses (through a
fake `run`, see planner_synth.mlx_connectivity). Where we agree with MLX we test equality;
where we differ on purpose the difference is listed in INTENDED_DIFFERENCES and demonstrated
by the test named there.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ansible_collections.mlx.cluster.plugins.plugin_utils import (
    plan_addresses,
    plan_cables,
    plan_hostfile,
    plan_topology,
)
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import PlanError
from tests.budget import examples
from tests.unit.filter.planner_synth import (
    cable,
    find_port,
    make_facts,
    mesh_cables,
    mlx_connectivity,
    multi_meshes,
    tb_uuid,
    weights,
    wirings,
)

INTENDED_DIFFERENCES = {
    "docks": (
        "A Mac behind a dock or hub (nested _items) is a cable for us; MLX only looks at the "
        "first level of _items and misses it.",
        "test_difference_docks",
    ),
    "rdma_capable_links": (
        "RDMA runs only over cables that carry it (TB5 link, device PORT_ACTIVE at both ends, no "
        "dock unless opted in); MLX picks jaccl whenever the Thunderbolt graph is a mesh and every "
        "host lists some rdma_ device, whatever the cable's speed, dock or port state.",
        "test_difference_rdma_capable_links",
    ),
    "pool": (
        "Addresses come from 10.208.0.0/16 (configurable), one hashed /30 per cable, stable "
        "across runs; MLX numbers 192.168.x.y/30 sequentially, colliding with home/office LANs.",
        "test_difference_pool",
    ),
    "bottleneck_ring": (
        "Among full rings we pick the one whose weakest hop has the most cables; MLX takes the "
        "first longest ring its DFS enumerates, whatever its width.",
        "test_difference_bottleneck_ring",
    ),
    "ring_search_speed": (
        "Our ring search prunes and is polynomial on real wirings; MLX's extract_rings "
        "enumerates every simple cycle (seconds from 9 hosts on; see bench/planner.py).",
        "test_difference_ring_search_speed",
    ),
    "inconsistent_sightings": (
        "A sees B but B sees C: we report a 'miswired' problem and make no cable; MLX counts "
        "the stale one-way sighting (an asymmetric connectivity matrix).",
        "test_difference_inconsistent_sightings",
    ),
    "missing_iface": (
        "A cabled port without a networksetup entry is a problem with its fix; MLX crashes with a KeyError.",
        "test_difference_missing_iface",
    ),
    "external_peer": (
        "A cable to a Mac outside the inventory is reported in 'external'; MLX ignores it silently.",
        "test_difference_external_peer",
    ),
    "coordinator": (
        "The coordinator address comes from the inventory and is refused when link-local, "
        "CGNAT/Tailscale or loopback; MLX takes whatever `ipconfig getifaddr en0` (or en1) says.",
        "test_difference_coordinator",
    ),
}


def test_every_intended_difference_has_its_test():
    for name, (reason, test_name) in INTENDED_DIFFERENCES.items():
        assert reason and callable(globals().get(test_name)), name


# --------------------------------------------------------------------------------- agreement


def ours(hosts, cables):
    links = plan_cables.links(make_facts(hosts, cables))
    return links, weights(hosts, cables)


def our_matrix(hosts, links):
    idx = {h: i for i, h in enumerate(hosts)}
    m = [[0] * len(hosts) for _ in hosts]
    for c in links["cables"]:
        i, j = idx[c["a"]["host"]], idx[c["b"]["host"]]
        m[i][j] += 1
        m[j][i] += 1
    return m


@settings(max_examples=examples(100), deadline=None)
@given(wiring=wirings(max_hosts=8))
def test_connectivity_matrix_matches_mlx(wiring, mlx_config):
    hosts, cables = wiring
    links, _ = ours(hosts, cables)
    tb_hosts, rev = mlx_connectivity(make_facts(hosts, cables), hosts)
    assert mlx_config.make_connectivity_matrix(tb_hosts, rev) == our_matrix(hosts, links)


def test_connectivity_matrix_matches_mlx_one_cable_per_pair(mlx_config):
    hosts, cables = mesh_cables(5)
    links, _ = ours(hosts, cables)
    tb_hosts, rev = mlx_connectivity(make_facts(hosts, cables), hosts)
    assert mlx_config.make_connectivity_matrix(tb_hosts, rev) == our_matrix(hosts, links)


@settings(max_examples=examples(100), deadline=None)
@given(wiring=wirings(max_hosts=7, max_cables=18))
def test_rings_at_least_as_good_as_mlx(wiring, mlx_config):
    hosts, cables = wiring
    links, w = ours(hosts, cables)
    topo = plan_topology.topology(links, hosts)
    tb_hosts, rev = mlx_connectivity(make_facts(hosts, cables), hosts)
    rings = mlx_config.extract_rings(mlx_config.make_connectivity_matrix(tb_hosts, rev))
    mlx_full = bool(rings) and len(rings[0][0]) == len(hosts)
    assert (topo["ring"] is not None) == mlx_full
    if mlx_full:
        idx = {h: i for i, h in enumerate(hosts)}
        ring = topo["ring"]
        assert sorted(ring) == sorted(hosts)
        assert all(w[idx[ring[k]]][idx[ring[k - 1]]] for k in range(len(ring)))
        assert topo["ring_width"] >= rings[0][1]


def mlx_ip_ends(mlx_config, hosts, tb_hosts, rev):
    ipc = mlx_config.IPConfigurator(hosts, tb_hosts, rev)
    ends = {(hosts[i], iface) for (i, _j), entries in ipc.ips.items() for iface, _ip in entries}
    return ipc, ends


@settings(max_examples=examples(100), deadline=None)
@given(wiring=wirings(max_hosts=8))
def test_ip_configurator_assigns_the_same_cable_ends(wiring, mlx_config):
    hosts, cables = wiring
    links, _ = ours(hosts, cables)
    tb_hosts, rev = mlx_connectivity(make_facts(hosts, cables), hosts)
    _ipc, mlx_ends = mlx_ip_ends(mlx_config, hosts, tb_hosts, rev)
    plan = plan_addresses.ip_plan(links)
    our_ends = {(h, e["iface"]) for h, entries in plan["hosts"].items() for e in entries}
    assert our_ends == mlx_ends


def mlx_jaccl_rdma(ips, n):
    """configure_jaccl's matrix, reproduced (the real function ssh's and writes files)."""
    count = min(len(ips.ips[i, j]) for i in range(n) for j in range(n) if i != j)
    matrix = []
    for i in range(n):
        row = []
        for j in range(n):
            if i == j:
                row.append(None)
            else:
                devices = ["rdma_%s" % ips.ips[i, j][c][0] for c in range(count)]
                row.append(devices[0] if count == 1 else devices)
        matrix.append(row)
    return matrix


def mlx_jaccl_ring_rdma(ips, ring, count):
    """configure_jaccl_ring's matrix, reproduced."""
    n = len(ring)
    out = []
    for i, node in enumerate(ring):
        left, right = ring[i - 1], ring[(i + 1) % n]
        row = []
        for other in ring:
            if other not in (left, right):
                row.append(None)
            else:
                devices = ["rdma_%s" % ips.ips[node, other][c][0] for c in range(count)]
                row.append(devices[0] if count == 1 else devices)
        out.append(row)
    return out


COORDS = {"m%02d" % i: "10.1.0.%d" % (10 + i) for i in range(10)}


@pytest.mark.parametrize("n", [2, 3, 4, 6])
def test_jaccl_rdma_matrix_matches_mlx(n, mlx_config):
    hosts, cables = mesh_cables(n)
    links, _ = ours(hosts, cables)
    tb_hosts, rev = mlx_connectivity(make_facts(hosts, cables), hosts)
    ipc, _ = mlx_ip_ends(mlx_config, hosts, tb_hosts, rev)
    topo = plan_topology.topology(links, hosts, rdma=True)
    hf = plan_hostfile.hostfile(topo, plan_addresses.ip_plan(links), COORDS)
    assert hf["backend"] == "jaccl"
    assert [h["rdma"] for h in hf["hosts"]] == mlx_jaccl_rdma(ipc, n)


def jaccl_matrices(mlx_config, hosts, cables, order=None):
    """(ours, MLX's) jaccl rdma matrices for the same wiring, ranks in `order` (default hosts)."""
    order = order or hosts
    links, _ = ours(hosts, cables)
    tb_hosts, rev = mlx_connectivity(make_facts(hosts, cables), order)
    ipc, _ = mlx_ip_ends(mlx_config, order, tb_hosts, rev)
    coords = {h: "10.1.0.%d" % (10 + i) for i, h in enumerate(order)}
    hf = plan_hostfile.hostfile(plan_topology.topology(links, order, rdma=True), plan_addresses.ip_plan(links), coords)
    assert hf["backend"] == "jaccl"
    return [h["rdma"] for h in hf["hosts"]], mlx_jaccl_rdma(ipc, len(order))


def uneven(pairs, n=3):
    """A full mesh of n hosts m00.. with `pairs[(i, j)]` cables between i and j (default 1)."""
    hosts = ["m%02d" % i for i in range(n)]
    cables, used = [], {h: 1 for h in hosts}
    for i in range(n):
        for j in range(i + 1, n):
            for _ in range(pairs.get((i, j), 1)):
                used[hosts[i]] += 1
                used[hosts[j]] += 1
                cables.append(cable(hosts[i], "en%d" % used[hosts[i]], hosts[j], "en%d" % used[hosts[j]]))
    return hosts, cables


@pytest.mark.parametrize(
    "pairs, n, order, count",
    [
        pytest.param({(0, 1): 2}, 3, None, 1, id="one-pair-2-others-1"),
        pytest.param({(0, 1): 2}, 4, None, 1, id="mesh4_double"),
        pytest.param({(0, 1): 2, (2, 3): 2}, 4, [3, 1, 0, 2], 1, id="two-pairs-2-others-1-shuffled"),
        pytest.param({(0, 1): 3, (0, 2): 2, (1, 2): 2}, 3, None, 2, id="3-vs-2"),
        pytest.param({(0, 1): 3, (0, 2): 2, (1, 2): 2}, 3, [2, 0, 1], 2, id="3-vs-2-shuffled"),
        pytest.param({(0, 1): 2, (0, 2): 2, (1, 2): 2}, 3, [1, 2, 0], 2, id="all-2"),
        pytest.param({(0, 1): 3, (0, 2): 3, (0, 3): 2, (1, 2): 3, (1, 3): 3, (2, 3): 3}, 4, None, 2, id="3-vs-2-mesh4"),
    ],
)
def test_jaccl_rdma_matrix_matches_mlx_with_uneven_cabling(mlx_config, pairs, n, order, count):
    hosts, cables = uneven(pairs, n)
    order = [hosts[i] for i in order] if order else hosts
    mine, theirs = jaccl_matrices(mlx_config, hosts, cables, order)
    assert mine == theirs
    widths = {1 if isinstance(x, str) else len(x) for row in mine for x in row if x is not None}
    assert widths == {count}


@settings(max_examples=examples(80), deadline=None)
@given(wiring=multi_meshes(), data=st.data())
def test_jaccl_rdma_matrix_matches_mlx_for_any_multi_cable_mesh(mlx_config, wiring, data):
    hosts, cables = wiring
    order = data.draw(st.permutations(hosts))
    mine, theirs = jaccl_matrices(mlx_config, hosts, cables, list(order))
    assert mine == theirs


def test_jaccl_pair_lists_the_same_cables_at_both_ends():
    """JACCL connects device c of rank i to device c of rank j: both must be one cable."""
    hosts, cables = uneven({(0, 1): 3, (0, 2): 2, (1, 2): 2}, 3)
    links, _ = ours(hosts, cables)
    plan = plan_addresses.ip_plan(links)
    ends = {(c["a"]["host"], c["a"]["iface"]): (c["b"]["host"], c["b"]["iface"]) for c in plan["cables"].values()}
    ends.update({v: k for k, v in list(ends.items())})
    hf = plan_hostfile.hostfile(plan_topology.topology(links, hosts, rdma=True), plan, COORDS)
    rows = [h["rdma"] for h in hf["hosts"]]
    for i, hi in enumerate(hosts):
        for j, hj in enumerate(hosts):
            if i != j:
                assert [ends[(hi, d[len("rdma_") :])] for d in rows[i][j]] == [
                    (hj, d[len("rdma_") :]) for d in rows[j][i]
                ]


@settings(max_examples=examples(60), deadline=None)
@given(wiring=wirings(min_hosts=3, max_hosts=7, max_cables=16))
def test_ring_hostfiles_match_mlx_for_the_same_ring(wiring, mlx_config):
    """Given our ring, MLX's configure_ring / configure_jaccl_ring pick the same cable ends."""
    hosts, cables = wiring
    # every cable TB5 and direct, so that RDMA may use each (MLX does not look; see
    # test_difference_rdma_capable_links)
    cables = [dict(c, speed=80, speed_b=80) for c in cables]
    links, _ = ours(hosts, cables)
    topo = plan_topology.topology(links, hosts, rdma=True)
    assume(topo["ring"] is not None and not topo["mesh"])  # a ring to compare (drawn again otherwise)
    tb_hosts, rev = mlx_connectivity(make_facts(hosts, cables), hosts)
    ipc, _ = mlx_ip_ends(mlx_config, hosts, tb_hosts, rev)
    idx = {h: i for i, h in enumerate(hosts)}
    ring = [idx[h] for h in topo["ring"]]
    width = topo["ring_width"]
    plan = plan_addresses.ip_plan(links)
    coords = {h: "10.1.0.%d" % (10 + i) for i, h in enumerate(hosts)}
    jr = plan_hostfile.hostfile(topo, plan, coords)
    assert jr["backend"] == "jaccl-ring"
    mlx_rows = mlx_jaccl_ring_rdma(ipc, ring, width)

    # which `width` cables of a thicker hop, in which order: MLX's (hosts order, iface names)
    assert [h["rdma"] for h in jr["hosts"]] == mlx_rows
    # ring backend: ips = this host's addresses towards the previous rank (configure_ring)
    rh = plan_hostfile.hostfile(topo, plan, backend="ring")
    addr_to_end = {e["address"]: (h, e["iface"]) for h, es in plan["hosts"].items() for e in es}
    for rank, node in enumerate(ring):
        peer = ring[rank - 1]
        mlx_ifaces = {ipc.ips[node, peer][c][0] for c in range(width)}
        our_ifaces = [addr_to_end[a][1] for a in rh["hosts"][rank]["ips"]]
        assert len(our_ifaces) == width
        assert our_ifaces == [ipc.ips[node, peer][c][0] for c in range(width)]
        assert set(our_ifaces) == mlx_ifaces


# ----------------------------------------------------------------------- intended differences


def test_difference_docks(mlx_config):
    hosts = ["m1", "m2", "m3"]
    cables = [
        cable("m1", "en2", "m2", "en2"),
        cable("m2", "en3", "m3", "en3", via=["CalDigit TS4"], seen_by="a"),
        cable("m3", "en4", "m1", "en4", via=["OWC Hub", "CalDigit TS4"]),
    ]
    links, _ = ours(hosts, cables)
    tb_hosts, rev = mlx_connectivity(make_facts(hosts, cables), hosts)
    theirs = mlx_config.make_connectivity_matrix(tb_hosts, rev)
    assert our_matrix(hosts, links) == [[0, 1, 1], [1, 0, 1], [1, 1, 0]]
    assert theirs == [[0, 1, 0], [1, 0, 0], [0, 0, 0]]
    assert plan_topology.topology(links, hosts)["ring"] == ["m1", "m2", "m3"]
    assert len(mlx_config.extract_rings(theirs)[0][0]) < 3


def test_difference_rdma_capable_links(mlx_config):
    hosts, cables = mesh_cables(3)
    cables = [cable(*c["a"], *c["b"], speed=40) if {c["a"][0], c["b"][0]} == {"m00", "m02"} else c for c in cables]
    links, _ = ours(hosts, cables)
    tb_hosts, rev = mlx_connectivity(make_facts(hosts, cables), hosts)
    # MLX: a mesh (it never reads the link speed) and RDMA devices everywhere -> configure_jaccl
    assert mlx_config.check_valid_mesh(hosts, mlx_config.make_connectivity_matrix(tb_hosts, rev), False)
    topo = plan_topology.topology(links, hosts, rdma=True)
    assert topo["mesh"] and topo["backend"] == "ring"
    assert [e["name"] for e in topo["no_rdma"]] == ["m00:en4 <-> m02:en2"]
    with pytest.raises(PlanError, match="m00:en4 <-> m02:en2 .TB4 40 Gb/s"):
        plan_topology.topology(links, hosts, rdma=True, backend="jaccl")


def test_difference_pool(mlx_config):
    hosts, cables = mesh_cables(4)
    links, _ = ours(hosts, cables)
    tb_hosts, rev = mlx_connectivity(make_facts(hosts, cables), hosts)
    ipc, mlx_ends = mlx_ip_ends(mlx_config, hosts, tb_hosts, rev)
    mlx_addrs = [ip for entries in ipc.ips.values() for _iface, ip in entries]
    assert all(a.startswith("192.168.0.") for a in mlx_addrs)
    plan = plan_addresses.ip_plan(links)
    ours_addrs = [e["address"] for es in plan["hosts"].values() for e in es]
    assert all(a.startswith("10.208.") for a in ours_addrs)
    assert {(h, e["iface"]) for h, es in plan["hosts"].items() for e in es} == mlx_ends


def test_difference_bottleneck_ring(mlx_config):
    # Ring a-b-c-d has 1 cable per hop; ring a-c-b-d has 2 per hop.
    hosts = ["a", "b", "c", "d"]
    pairs = [
        ("a", "b"),
        ("b", "c"),
        ("c", "d"),
        ("d", "a"),
        ("a", "c"),
        ("a", "c"),
        ("b", "c"),
        ("b", "d"),
        ("b", "d"),
        ("a", "d"),
    ]
    cables = [cable(x, "en%d" % (2 + k), y, "en%d" % (20 + k)) for k, (x, y) in enumerate(pairs)]
    links, _ = ours(hosts, cables)
    tb_hosts, rev = mlx_connectivity(make_facts(hosts, cables), hosts)
    mlx_ring, mlx_width = mlx_config.extract_rings(mlx_config.make_connectivity_matrix(tb_hosts, rev))[0]
    assert (mlx_ring, mlx_width) == ([0, 1, 2, 3], 1)
    topo = plan_topology.topology(links, hosts)
    assert (topo["ring"], topo["ring_width"]) == (["a", "c", "b", "d"], 2)


def test_difference_ring_search_speed(mlx_config):
    hosts, cables = mesh_cables(8)
    links, w = ours(hosts, cables)
    # the best of five each, interleaved: a preempted run moves one sample, not the minimum
    ours_s, theirs_s = [], []
    for _ in range(5):
        t = time.perf_counter()
        plan_topology.topology(links, hosts)
        ours_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        mlx_config.extract_rings(w)
        theirs_s.append(time.perf_counter() - t)
    assert min(ours_s) * 10 < min(theirs_s), (min(ours_s), min(theirs_s))


def test_difference_inconsistent_sightings(mlx_config):
    hosts = ["m1", "m2", "m3"]
    facts = make_facts(hosts, [cable("m2", "en3", "m3", "en2")], empty_ports={"m1": ["en2"]})
    find_port(facts, "m1", "en2")["peer"] = {
        "domain_uuid": tb_uuid("m2", "en3"),
        "name": "Mac Studio",
        "model_id": None,
        "via": [],
    }
    links = plan_cables.links(facts)
    assert [p["code"] for p in links["problems"]] == ["miswired"]
    assert our_matrix(hosts, links) == [[0, 0, 0], [0, 0, 1], [0, 1, 0]]
    tb_hosts, rev = mlx_connectivity(facts, hosts)
    assert mlx_config.make_connectivity_matrix(tb_hosts, rev) == [[0, 1, 0], [0, 0, 1], [0, 1, 0]]


def test_difference_missing_iface():
    hosts = ["m1", "m2"]
    facts = make_facts(hosts, [cable("m1", "en2", "m2", "en2"), cable("m1", "en3", "m2", "en3")])
    find_port(facts, "m2", "en3")["iface"] = None
    links = plan_cables.links(facts)
    assert [p["code"] for p in links["problems"]] == ["no_iface"]
    assert len(links["cables"]) == 1
    with pytest.raises(KeyError, match="Thunderbolt 2"):
        mlx_connectivity(facts, hosts)


def test_difference_external_peer(mlx_config):
    hosts = ["m1", "m2"]
    facts = make_facts(["m1", "m2", "m9"], [cable("m1", "en2", "m2", "en2"), cable("m1", "en3", "m9", "en3")])
    del facts["m9"]
    links = plan_cables.links(facts)
    assert [(e["host"], e["iface"]) for e in links["external"]] == [("m1", "en3")]
    tb_hosts, rev = mlx_connectivity(facts, hosts)
    assert mlx_config.make_connectivity_matrix(tb_hosts, rev) == [[0, 1], [1, 0]]  # nothing to see


def test_difference_coordinator():
    hosts, cables = mesh_cables(2)
    links, _ = ours(hosts, cables)
    topo = plan_topology.topology(links, hosts, rdma=True)
    with pytest.raises(PlanError, match="link-local .*set mlx_cluster_coordinator_address for m00"):
        plan_hostfile.hostfile(topo, plan_addresses.ip_plan(links), {"m00": "169.254.10.1", "m01": "10.1.0.11"})
