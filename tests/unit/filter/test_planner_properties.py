"""Invariants of the planner on random wirings (hypothesis)."""

from __future__ import annotations

import copy
import ipaddress
import json
import random

from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from ansible_collections.mlx.cluster.plugins.plugin_utils import plan_addresses, plan_cables, plan_topology
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import PlanError
from tests.budget import examples
from tests.unit.filter.planner_synth import brute_mesh, brute_ring, make_facts, weights, wirings

SETTINGS = settings(max_examples=examples(150), deadline=None)


def cid(c):
    (ha, ia), (hb, ib) = sorted([c["a"], c["b"]])
    return "%s:%s~%s:%s" % (ha, ia, hb, ib)


def as_interfaces(plan):
    """The interfaces facts a cluster converged on `plan` would report."""
    out = {}
    for host, entries in plan["hosts"].items():
        for e in entries:
            out.setdefault(host, {})[e["iface"]] = {"ipv4": [{"address": e["address"], "prefix": 30}]}
    return out


def shuffled(facts, seed):
    rnd = random.Random(seed)
    hosts = list(facts)
    rnd.shuffle(hosts)
    out = {}
    for h in hosts:
        f = copy.deepcopy(facts[h])
        rnd.shuffle(f["ports"])
        out[h] = f
    return out


def check_plan(plan, links, excluded=()):
    nets = []
    for c in links["cables"]:
        entry = plan["cables"][c["id"]]
        net = ipaddress.ip_network(entry["network"])
        a, b = ipaddress.ip_address(entry["a"]["address"]), ipaddress.ip_address(entry["b"]["address"])
        assert net.prefixlen == 30 and a in net and b in net and a != b
        assert a not in (net.network_address, net.broadcast_address)
        assert b not in (net.network_address, net.broadcast_address)
        assert (entry["a"]["host"], entry["a"]["iface"]) == (c["a"]["host"], c["a"]["iface"])
        assert net.subnet_of(ipaddress.ip_network(plan["pool"]))
        for x in excluded:
            assert not net.overlaps(ipaddress.ip_network(x))
        nets.append(net)
    assert len(plan["cables"]) == len(links["cables"])
    assert len(set(nets)) == len(nets)  # /30s are aligned: distinct means disjoint
    per_host = sum(len(v) for v in plan["hosts"].values())
    assert per_host == 2 * len(links["cables"])


@SETTINGS
@given(wirings(one_sided=True))
def test_links_recover_the_wiring(wiring):
    hosts, cables = wiring
    result = plan_cables.links(make_facts(hosts, cables))
    assert [c["id"] for c in result["cables"]] == sorted(cid(c) for c in cables)
    expected = {cid(c): ("both" if c["seen_by"] == "both" else "one-sided") for c in cables}
    assert {c["id"]: c["sighting"] for c in result["cables"]} == expected
    assert result["problems"] == [] and result["external"] == []


@SETTINGS
@given(
    wirings(), st.integers(20, 28), st.lists(st.tuples(st.integers(0, 255), st.integers(24, 30)), max_size=4), st.data()
)
def test_ip_plan_invariants(wiring, pool_prefix, holes, data):
    hosts, cables = wiring
    links = plan_cables.links(make_facts(hosts, cables))
    pool = ipaddress.ip_network("10.208.0.0/%d" % pool_prefix)
    excluded = [str(ipaddress.ip_network("10.208.%d.0/%d" % (third, prefix), strict=False)) for third, prefix in holes]
    # some exclusions come as a LAN on a non-cable interface instead
    lan_host = data.draw(st.sampled_from(hosts))
    interfaces = {lan_host: {"en0": {"ipv4": [{"address": "10.208.1.77", "prefix": 26}]}}}
    all_excluded = excluded + ["10.208.1.64/26"]
    free = {
        s for s in pool.subnets(new_prefix=30) if not any(s.overlaps(ipaddress.ip_network(x)) for x in all_excluded)
    }
    try:
        plan = plan_addresses.ip_plan(links, pool=str(pool), interfaces=interfaces, exclude=excluded)
    except PlanError as exc:
        event("pool exhausted")
        assert len(free) < len(links["cables"]), exc.message
        assert "pass a larger pool" in exc.message
        return
    check_plan(plan, links, all_excluded)


@SETTINGS
@given(wirings(one_sided=True), st.integers(0, 2**32))
def test_deterministic_under_shuffles(wiring, seed):
    hosts, cables = wiring
    facts = make_facts(hosts, cables)
    interfaces = {
        h: {"en0": {"ipv4": [{"address": "192.168.1.%d" % (i + 2), "prefix": 24}]}} for i, h in enumerate(hosts)
    }
    links = plan_cables.links(facts)
    plan = plan_addresses.ip_plan(links, interfaces=interfaces)
    topo = plan_topology.topology(links, hosts)
    links2 = plan_cables.links(shuffled(facts, seed))
    rev_ifaces = dict(reversed(list(interfaces.items())))
    assert json.dumps(links2) == json.dumps(links)
    assert json.dumps(plan_addresses.ip_plan(links2, interfaces=rev_ifaces)) == json.dumps(plan)
    assert plan_topology.topology(links2, hosts) == topo


@SETTINGS
@given(wirings(max_cables=12), st.data())
def test_adding_or_removing_a_cable_keeps_the_others(wiring, data):
    hosts, cables = wiring
    assume(cables)
    links = plan_cables.links(make_facts(hosts, cables))
    plan = plan_addresses.ip_plan(links)
    # remove one cable from a converged cluster
    drop = data.draw(st.sampled_from(cables))
    fewer = plan_cables.links(make_facts(hosts, [c for c in cables if c is not drop]))
    after = plan_addresses.ip_plan(fewer, interfaces=as_interfaces(plan))
    for c in fewer["cables"]:
        assert after["cables"][c["id"]] == dict(plan["cables"][c["id"]], kept=True)
    # add one cable to a converged cluster
    i, j = data.draw(st.sampled_from([(x, y) for x in hosts for y in hosts if x < y]))
    extra = dict(cables[0], a=(i, "en99"), b=(j, "en98"), seen_by="both", via=[])
    more = plan_cables.links(make_facts(hosts, cables + [extra]))
    after = plan_addresses.ip_plan(more, interfaces=as_interfaces(plan))
    for c in links["cables"]:
        assert after["cables"][c["id"]] == dict(plan["cables"][c["id"]], kept=True)
    check_plan(after, more)
    # without current addresses the hash alone keeps the others, unless home slots collide
    slots = 2**14
    homes = [plan_addresses._slot_home(c["id"], slots) for c in more["cables"]]
    if len(set(homes)) == len(homes):
        fresh = plan_addresses.ip_plan(more)
        for c in links["cables"]:
            assert fresh["cables"][c["id"]] == plan["cables"][c["id"]]


def ring_is_valid(ring, hosts, w, idx):
    assert sorted(ring) == sorted(hosts) and len(set(ring)) == len(ring)
    hops = [w[idx[ring[k]]][idx[ring[(k + 1) % len(ring)]]] for k in range(len(ring))]
    assert all(hops), "a hop without a cable"
    return min(hops)


@SETTINGS
@given(wirings(max_hosts=10, max_cables=30))
def test_ring_found_is_a_real_ring(wiring):
    hosts, cables = wiring
    links = plan_cables.links(make_facts(hosts, cables))
    topo = plan_topology.topology(links, hosts)
    w = weights(hosts, cables)
    idx = {h: i for i, h in enumerate(hosts)}
    if topo["ring"]:
        assert topo["ring"][0] == hosts[0]
        assert ring_is_valid(topo["ring"], hosts, w, idx) == topo["ring_width"]
    assert topo["missing"] == [
        [hosts[i], hosts[j]] for i in range(len(hosts)) for j in range(i + 1, len(hosts)) if not w[i][j]
    ]


@settings(max_examples=examples(300), deadline=None)
@given(wirings(max_hosts=7, max_cables=24))
def test_agrees_with_brute_force(wiring):
    hosts, cables = wiring
    links = plan_cables.links(make_facts(hosts, cables))
    topo = plan_topology.topology(links, hosts)
    w = weights(hosts, cables)
    best_w, best = brute_ring(w)
    event("mesh" if topo["mesh"] else "ring, width %d" % best_w if best else "no ring")
    assert topo["mesh"] == brute_mesh(w)
    assert topo["ring_proven"] is True
    assert (topo["ring"] is not None) == (best is not None)
    assert topo["ring_width"] == best_w
    if best is not None:
        assert topo["ring"] == [hosts[i] for i in best]  # also the lexicographically smallest
    else:
        assert "no ring" in topo["message"]
