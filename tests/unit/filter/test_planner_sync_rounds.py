"""The model's tree along the cables (plugin_utils/sync_plan.py, filter mlx_sync_rounds): for a
pipelined copy, each Mac's widest path (then fewest hops, load, rank) over the real plan of each
wiring (links -> ip plan -> tree), the LAN only for Macs with no Thunderbolt path, and
invariants on random wirings."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.mlx.cluster.plugins.plugin_utils import plan_addresses, plan_cables, sync_plan
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import PlanError
from tests.budget import examples
from tests.unit.filter.planner_synth import cable, make_facts, wirings


def plan_of(hosts, cables):
    """The parts of the cluster plan the rounds read, made by the planner itself."""
    found = plan_cables.links(make_facts(hosts, cables))
    return {"hosts": list(hosts), "links": found, "ip_plan": plan_addresses.ip_plan(found)}


def names(n):
    return ["m%d" % (i + 1) for i in range(n)]


def ring(n, speed=80):
    hosts = names(n)
    return hosts, [cable(hosts[i], "en2", hosts[(i + 1) % n], "en3", speed=speed) for i in range(n)]


def mesh(n):
    hosts = names(n)
    cables, port = [], {h: 2 for h in hosts}
    for i in range(n):
        for j in range(i + 1, n):
            a, b = hosts[i], hosts[j]
            cables.append(cable(a, "en%d" % port[a], b, "en%d" % port[b]))
            port[a] += 1
            port[b] += 1
    return hosts, cables


def chain(n):
    hosts = names(n)
    return hosts, [cable(hosts[i], "en2", hosts[i + 1], "en3") for i in range(n - 1)]


def rounds_of(hosts, cables, source="m1", fanout=0):
    return sync_plan.plan_rounds(plan_of(hosts, cables), source=source, fanout=fanout)


def pairs(result):
    """[[(src, dest, via), ...] per round]."""
    return [[(c["src"], c["dest"], c["via"]) for c in r] for r in result["rounds"]]


def address_of(plan, host, peer):
    """host's addresses on its cables to peer."""
    return {e["address"] for e in plan["ip_plan"]["hosts"][host] if e["peer_host"] == peer}


def check_tree(result, plan, hosts, source, fanout=0):
    """Every Mac but the source gets one copy, from a Mac one hop nearer the source (its round
    one less), over a cable between the two (to the receiver's address on it) or over the LAN;
    each copy's path is its sender's path and the sender."""
    have = {source} if source else set()
    got = []
    for k, copies in enumerate(result["rounds"], start=1):
        sent = {}
        for c in copies:
            assert c["round"] == k
            assert c["dest"] not in have, c
            assert c["src"] in have if c["src"] is not None else source is None, c
            if c["via"] == sync_plan.THUNDERBOLT:
                assert c["address"] in address_of(plan, c["dest"], c["src"]), c
                assert c["src_address"] in address_of(plan, c["src"], c["dest"]), c
                sent[c["src"]] = sent.get(c["src"], 0) + 1
            else:
                assert c["address"] is None and c["src"] == source, c
            got.append(c["dest"])
        have |= {c["dest"] for c in copies}
    assert sorted(got) == sorted(h for h in hosts if h != source)
    assert len(got) == len(set(got))
    assert sorted(result["copies"]) == sorted(got)
    for c in result["copies"].values():
        up = result["copies"].get(c["src"])
        assert c["path"] == ((up["path"] + [c["src"]]) if up else ([source] if source else [])), c
    if fanout and all(len(adjacent(plan, h)) <= fanout for h in hosts):
        # (over the limit only when no sender under it reaches a Mac: the star test)
        assert all(sent_by(result, h) <= fanout for h in hosts)


def sent_by(result, host):
    return sum(1 for c in result["copies"].values() if c["src"] == host and c["via"] == sync_plan.THUNDERBOLT)


def adjacent(plan, host):
    return {e["peer_host"] for e in plan["ip_plan"]["hosts"].get(host, [])}


def test_mesh4_is_one_round_from_rank0_over_its_own_cables():
    hosts, cables = mesh(4)
    plan = plan_of(hosts, cables)
    result = sync_plan.plan_rounds(plan, source="m1")
    assert pairs(result) == [[("m1", "m2", "thunderbolt"), ("m1", "m3", "thunderbolt"), ("m1", "m4", "thunderbolt")]]
    assert result["depth"] == 1 and result["lan"] == [] and result["warnings"] == []
    check_tree(result, plan, hosts, "m1")


def test_ring4_goes_both_ways_in_two_rounds():
    hosts, cables = ring(4)
    result = rounds_of(hosts, cables)
    assert pairs(result) == [[("m1", "m2", "thunderbolt"), ("m1", "m4", "thunderbolt")], [("m2", "m3", "thunderbolt")]]


@pytest.mark.parametrize("n", [3, 4, 5, 8, 9, 16])
def test_ring_of_n_takes_ceil_half_rounds(n):
    hosts, cables = ring(n)
    plan = plan_of(hosts, cables)
    result = sync_plan.plan_rounds(plan, source="m1")
    assert result["depth"] == math.ceil((n - 1) / 2)
    check_tree(result, plan, hosts, "m1")


def test_ring8_depth_four_each_round_one_copy_each_way():
    hosts, cables = ring(8)
    result = rounds_of(hosts, cables)
    assert pairs(result) == [
        [("m1", "m2", "thunderbolt"), ("m1", "m8", "thunderbolt")],
        [("m2", "m3", "thunderbolt"), ("m8", "m7", "thunderbolt")],
        [("m3", "m4", "thunderbolt"), ("m7", "m6", "thunderbolt")],
        [("m4", "m5", "thunderbolt")],
    ]
    assert result["lan"] == [] and result["warnings"] == []


def test_mesh3_dock_goes_round_the_docked_leg_over_full_speed_cables():
    hosts = names(3)
    cables = [
        cable("m1", "en2", "m2", "en2", speed=80),
        cable("m1", "en3", "m3", "en2", speed=40, via=["CalDigit TS4"], seen_by="a"),
        cable("m2", "en3", "m3", "en3", speed=80),
    ]
    plan = plan_of(hosts, cables)
    result = sync_plan.plan_rounds(plan, source="m1")
    assert pairs(result) == [[("m1", "m2", "thunderbolt")], [("m2", "m3", "thunderbolt")]]
    m3 = result["copies"]["m3"]
    assert m3["speed_gbps"] == 80 and m3["bottleneck_gbps"] == 80 and m3["path"] == ["m1", "m2"]
    assert m3["address"] in address_of(plan, "m3", "m2")
    assert result["depth"] == 2
    check_tree(result, plan, hosts, "m1")


def mesh3_dock():
    hosts = names(3)
    return hosts, [
        cable("m1", "en2", "m2", "en2", speed=80),
        cable("m1", "en3", "m3", "en2", speed=40, via=["CalDigit TS4"], seen_by="a"),
        cable("m2", "en3", "m3", "en3", speed=80),
    ]


MODEL = {
    "config.json": {"size": 2_000, "mtime": 1},
    "model-00001-of-00004.safetensors": {"size": 50_000_000, "mtime": 1},
    "model-00002-of-00004.safetensors": {"size": 50_000_000, "mtime": 1},
    "model-00003-of-00004.safetensors": {"size": 50_000_000, "mtime": 1},
    "model-00004-of-00004.safetensors": {"size": 50_000_000, "mtime": 1},
    "model.safetensors.index.json": {"size": 30_000, "mtime": 1},
    "tokenizer.json": {"size": 7_000_000, "mtime": 1},
}


def test_mesh3_dock_the_docked_mac_gets_a_third_straight_over_the_dock_leg_the_rest_relayed():
    hosts, cables = mesh3_dock()
    plan = plan_of(hosts, cables)
    result = sync_plan.plan_rounds(plan, source="m1", files=MODEL)
    assert result["copies"]["m2"]["split"] is None
    split = result["copies"]["m3"]["split"]
    assert split["src"] == "m1" and split["share"] == 0.5 and split["speed_gbps"] == 40
    assert split["address"] in address_of(plan, "m3", "m1") and split["src_address"] in address_of(plan, "m1", "m3")
    # from the last file rsync sends, each that fits in half the bytes (104 MB of 207 MB, 2 % over at most)
    assert split["files"] == [
        "config.json",
        "model-00004-of-00004.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
    ]
    assert split["bytes"] == 57_032_000
    assert result["direct"] == dict(split, dest="m3")
    # without the files: the share alone; the tree itself is unchanged
    bare = sync_plan.plan_rounds(plan, source="m1")
    assert "files" not in bare["copies"]["m3"]["split"] and pairs(bare) == pairs(result)


@pytest.mark.parametrize("wiring", [mesh(4), ring(8), chain(4)], ids=["mesh4", "ring8", "chain4"])
def test_no_split_where_no_relayed_mac_has_a_cable_from_the_source(wiring):
    hosts, cables = wiring
    result = rounds_of(hosts, cables)
    assert all(c["split"] is None for c in result["copies"].values()) and result["direct"] is None


def test_one_split_per_tree_the_nearest_then_first_relayed_mac():
    # m3 and m4 both through m2 (80) and both with a dock leg from m1 (40): m3 alone is split
    hosts = names(4)
    cables = [
        cable("m1", "en2", "m2", "en2"),
        cable("m1", "en3", "m3", "en2", speed=40),
        cable("m1", "en4", "m4", "en2", speed=40),
        cable("m2", "en3", "m3", "en3"),
        cable("m2", "en4", "m4", "en3"),
        cable("m3", "en4", "m4", "en4"),
    ]
    result = rounds_of(hosts, cables)
    assert [(c["src"], c["dest"]) for c in result["rounds"][1]] == [("m2", "m3"), ("m2", "m4")]
    assert result["direct"]["dest"] == "m3" and result["copies"]["m3"]["split"]["src"] == "m1"
    assert result["copies"]["m4"]["split"] is None


def test_a_split_counts_against_fanout_and_a_thin_direct_cable_is_not_worth_one():
    hosts, cables = mesh3_dock()
    assert rounds_of(hosts, cables, fanout=1)["copies"]["m3"]["split"] is None  # m1 sends m2 its one copy
    assert rounds_of(hosts, cables, fanout=2)["copies"]["m3"]["split"]["src"] == "m1"
    thin = [dict(c, speed=5, speed_b=5) if c["speed"] == 40 else c for c in cables]  # 5 / 80 < 10 %
    assert rounds_of(hosts, thin)["copies"]["m3"]["split"] is None


def test_split_files_takes_the_last_files_that_fit_and_never_all_of_them():
    files = {"a": {"size": 10}, "b": {"size": 50}, "c": {"size": 30}, "d": {"size": 10}}
    assert sync_plan.split_files(files, 0.5) == (["a", "c", "d"], ["b"])  # d, then c; b does not fit; a does
    # two equal shards and a small file: half the bytes is one shard and the small file's half;
    # the slack lets the shard go with the small file
    shards = {"s1": {"size": 1000}, "s2": {"size": 1000}, "z.json": {"size": 10}}
    assert sync_plan.split_files(shards, 0.5) == (["s2", "z.json"], ["s1"])
    assert sync_plan.split_files(files, 0.05) == ([], ["a", "b", "c", "d"])
    assert sync_plan.split_files({"one": {"size": 100}}, 0.9) == ([], ["one"])
    assert sync_plan.split_files({}, 0.5) == ([], [])
    with pytest.raises(PlanError, match="'b' needs a size in bytes"):
        sync_plan.split_files({"b": {"mtime": 1}}, 0.5)


def test_a_wider_path_wins_over_fewer_hops_and_equal_widths_take_fewer_hops():
    # m1-m4 direct at 20; m1-m2-m3-m4 at 80: three hops at 80 beat one at 20
    hosts = names(4)
    cables = [
        cable("m1", "en2", "m2", "en2", speed=80),
        cable("m2", "en3", "m3", "en2", speed=80),
        cable("m3", "en3", "m4", "en2", speed=80),
        cable("m1", "en3", "m4", "en3", speed=20),
    ]
    plan = plan_of(hosts, cables)
    result = sync_plan.plan_rounds(plan, source="m1")
    assert result["copies"]["m4"]["path"] == ["m1", "m2", "m3"] and result["depth"] == 3
    check_tree(result, plan, hosts, "m1")
    # the direct cable at 80 too: one hop
    cables[3]["speed"] = cables[3]["speed_b"] = 80
    result = rounds_of(hosts, cables)
    assert result["copies"]["m4"]["src"] == "m1" and result["copies"]["m3"]["path"] in (["m1", "m2"], ["m1", "m4"])
    # the bottleneck is the slowest cable of the way: m3 behind a 40 from m2, m4 behind it
    cables[3]["speed"] = cables[3]["speed_b"] = 20
    cables[1]["speed"] = cables[1]["speed_b"] = 40
    result = rounds_of(hosts, cables)
    assert result["copies"]["m4"]["bottleneck_gbps"] == 40 and result["copies"]["m4"]["path"] == ["m1", "m2", "m3"]


def test_equal_widths_and_hops_spread_the_senders_load():
    # m1 to m2 and m3; m4 and m5 each cabled to both m2 and m3: one each, not both from m2
    hosts = names(5)
    cables = [
        cable("m1", "en2", "m2", "en2"),
        cable("m1", "en3", "m3", "en2"),
        cable("m2", "en3", "m4", "en2"),
        cable("m3", "en3", "m4", "en3"),
        cable("m2", "en4", "m5", "en2"),
        cable("m3", "en4", "m5", "en3"),
    ]
    result = rounds_of(hosts, cables)
    assert result["copies"]["m4"]["src"] == "m2" and result["copies"]["m5"]["src"] == "m3"


def test_a_chain_is_passed_down_one_hop_per_round():
    hosts, cables = chain(5)
    assert pairs(rounds_of(hosts, cables)) == [[("m%d" % i, "m%d" % (i + 1), "thunderbolt")] for i in range(1, 5)]
    # from the middle: both ways at once
    assert pairs(rounds_of(hosts, cables, source="m3")) == [
        [("m3", "m2", "thunderbolt"), ("m3", "m4", "thunderbolt")],
        [("m2", "m1", "thunderbolt"), ("m4", "m5", "thunderbolt")],
    ]


def test_two_islands_the_other_one_seeded_over_the_lan_at_its_centre():
    hosts = names(5)
    cables = [cable("m1", "en2", "m2", "en2"), cable("m3", "en2", "m4", "en2"), cable("m4", "en3", "m5", "en2")]
    plan = plan_of(hosts, cables)
    result = sync_plan.plan_rounds(plan, source="m1")
    assert pairs(result) == [
        [("m1", "m2", "thunderbolt"), ("m1", "m4", "lan")],
        [("m4", "m3", "thunderbolt"), ("m4", "m5", "thunderbolt")],
    ]
    assert result["lan"] == ["m4"]
    assert result["islands"] == [["m1", "m2"], ["m3", "m4", "m5"]]
    assert len(result["warnings"]) == 1
    warning = result["warnings"][0]
    for word in ("m3, m4, m5", "management network", "m4 gets the model from m1", "m3, m5", "Fix"):
        assert word in warning, warning
    check_tree(result, plan, hosts, "m1")


def test_one_mac_alone():
    plan = plan_of(["m1"], [])
    assert sync_plan.plan_rounds(plan, source="m1")["rounds"] == []
    # from the controller: one copy over the LAN, nothing to warn about
    result = sync_plan.plan_rounds(plan, source=None)
    assert pairs(result) == [[(None, "m1", "lan")]] and result["warnings"] == []


def test_macs_without_any_cable_each_get_a_lan_copy_named_in_a_warning():
    result = rounds_of(names(3), [])
    assert pairs(result) == [[("m1", "m2", "lan"), ("m1", "m3", "lan")]]
    assert [w.split(":")[0] for w in result["warnings"]] == [
        "no Thunderbolt path from m1 to m2",
        "no Thunderbolt path from m1 to m3",
    ]


def test_from_the_controller_one_lan_copy_then_the_cables():
    hosts, cables = ring(4)
    result = rounds_of(hosts, cables, source=None)
    assert pairs(result) == [
        [(None, "m1", "lan")],
        [("m1", "m2", "thunderbolt"), ("m1", "m4", "thunderbolt")],
        [("m2", "m3", "thunderbolt")],
    ]
    assert result["warnings"] == []


def test_fanout_one_makes_a_mesh_a_chain_and_a_star_goes_over_it():
    hosts, cables = mesh(4)
    plan = plan_of(hosts, cables)
    result = sync_plan.plan_rounds(plan, source="m1", fanout=1)
    assert pairs(result) == [
        [("m1", "m2", "thunderbolt")],
        [("m2", "m3", "thunderbolt")],
        [("m3", "m4", "thunderbolt")],
    ]
    check_tree(result, plan, hosts, "m1", fanout=1)
    # a star: only m1 reaches the others, so it sends to all three, over the limit
    hosts = names(4)
    star = [cable("m1", "en%d" % (i + 1), "m%d" % i, "en2") for i in (2, 3, 4)]
    result = rounds_of(hosts, star, fanout=1)
    assert pairs(result) == [[("m1", "m2", "thunderbolt"), ("m1", "m3", "thunderbolt"), ("m1", "m4", "thunderbolt")]]


def test_the_fastest_of_two_cables_and_the_least_loaded_sender():
    hosts = names(3)
    cables = [
        cable("m1", "en2", "m2", "en2", speed=40),
        cable("m1", "en3", "m2", "en3", speed=80),
        cable("m2", "en4", "m3", "en2", speed=80),
        cable("m1", "en4", "m3", "en3", speed=80),
    ]
    plan = plan_of(hosts, cables)
    result = sync_plan.plan_rounds(plan, source="m1")
    assert result["copies"]["m2"]["speed_gbps"] == 80
    assert result["copies"]["m2"]["address"] in address_of(plan, "m2", "m1")
    assert result["copies"]["m2"]["dest_iface"] == "en3"
    # ring4 from the controller, m3 wanted by m2 and m4: the first in rank order when equal
    hosts, cables = ring(4)
    cables[2]["speed"] = cables[2]["speed_b"] = 40  # m3-m4 slower: m3 still from m2
    assert rounds_of(hosts, cables)["copies"]["m3"]["src"] == "m2"
    cables[1]["speed"] = cables[1]["speed_b"] = 20  # m2-m3 slower still: from m4
    assert rounds_of(hosts, cables)["copies"]["m3"]["src"] == "m4"


def test_the_other_cables_between_the_same_two_macs_go_with_the_copy():
    """The copy's cable is the fastest; the others between the same two Macs are listed with it,
    best first, each with the receiver's address on it and its name in messages."""
    hosts = names(3)
    cables = [
        cable("m1", "en2", "m2", "en2", speed=40),
        cable("m1", "en3", "m2", "en3", speed=80),
        cable("m1", "en5", "m2", "en5", speed=80),
        cable("m2", "en4", "m3", "en2", speed=80),
    ]
    plan = plan_of(hosts, cables)
    m2 = sync_plan.plan_rounds(plan, source="m1")["copies"]["m2"]
    ways = [m2] + m2["more"]
    assert [(w["src_iface"], w["dest_iface"], w["speed_gbps"]) for w in ways] == [
        ("en3", "en3", 80),
        ("en5", "en5", 80),
        ("en2", "en2", 40),
    ]
    assert {w["address"] for w in ways} == address_of(plan, "m2", "m1")
    assert [w["label"] for w in ways] == ["m1:en3 <-> m2:en3", "m1:en5 <-> m2:en5", "m1:en2 <-> m2:en2"]
    assert all("more" not in w for w in m2["more"])
    # one cable: nothing more; over the LAN: no cable at all
    m3 = sync_plan.plan_rounds(plan, source="m1")["copies"]["m3"]
    assert m3["more"] == [] and m3["label"] == "m2:en4 <-> m3:en2"
    (lan,) = [c for c in sync_plan.plan_rounds(plan, source=None)["copies"].values() if c["via"] == "lan"]
    assert lan["more"] == [] and lan["label"] is None


def test_with_spread_two_cables_straight_to_a_mac_count_together():
    """m2 has two 40 Gb/s cables from m1, and 80 Gb/s ones through m3. Counted by its fastest
    cable (rsync, one cable), m2's way through m3 is wider: a relay, and the direct cable's
    half as a split. Counted together (the copy without ssh uses both), the direct pair is as
    wide and one hop: straight from m1, no relay, no split."""
    hosts = names(3)
    cables = [
        cable("m1", "en2", "m2", "en2", speed=40),
        cable("m1", "en3", "m2", "en3", speed=40),
        cable("m1", "en4", "m3", "en2", speed=80),
        cable("m3", "en3", "m2", "en4", speed=80),
    ]
    plan = plan_of(hosts, cables)
    one = sync_plan.plan_rounds(plan, source="m1")
    assert one["copies"]["m2"]["src"] == "m3" and one["copies"]["m2"]["bottleneck_gbps"] == 80
    assert one["direct"]["dest"] == "m2" and one["direct"]["share"] == 0.5
    both = sync_plan.plan_rounds(plan, source="m1", spread=True)
    m2 = both["copies"]["m2"]
    assert (m2["src"], m2["round"], m2["bottleneck_gbps"], len(m2["more"])) == ("m1", 1, 80, 1)
    assert both["direct"] is None and both["depth"] == 1
    # a pair's cables together only where the copy crosses them: m3's hop is still one cable
    assert both["copies"]["m3"]["bottleneck_gbps"] == 80


def test_macs_gone_from_the_play_are_routed_around():
    hosts, cables = ring(4)
    result = sync_plan.plan_rounds(plan_of(hosts, cables), source="m1", hosts=["m4", "m1", "m3"])
    assert pairs(result) == [[("m1", "m4", "thunderbolt")], [("m4", "m3", "thunderbolt")]]


def test_the_same_wiring_in_any_order_gives_the_same_rounds():
    hosts, cables = ring(8)
    cables += [cable("m1", "en5", "m5", "en5"), cable("m3", "en5", "m7", "en5")]
    want = rounds_of(hosts, cables)
    for seed in range(5):
        shuffled = list(cables)
        random.Random(seed).shuffle(shuffled)
        plan = plan_of(hosts, shuffled)
        plan["ip_plan"]["cables"] = dict(reversed(list(plan["ip_plan"]["cables"].items())))
        assert sync_plan.plan_rounds(plan, source="m1") == want


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"source": "m9"}, "the model's source 'm9' is not one of the Macs"),
        ({"source": "m1", "fanout": -1}, "fanout must be 0"),
        ({"source": "m1", "fanout": True}, "fanout must be 0"),
        ({"source": "m1", "hosts": ["m1", "x"]}, "x not in the plan's hosts"),
    ],
    ids=["source", "fanout-negative", "fanout-bool", "hosts"],
)
def test_bad_arguments_say_what_is_wrong(kwargs, words):
    hosts, cables = ring(3)
    with pytest.raises(PlanError, match=words):
        sync_plan.plan_rounds(plan_of(hosts, cables), **kwargs)


def test_not_a_plan_and_duplicate_hosts_are_refused():
    with pytest.raises(PlanError, match="must be the cluster plan"):
        sync_plan.plan_rounds({"hosts": ["m1"]}, source="m1")
    with pytest.raises(PlanError, match="lists m1 more than once"):
        sync_plan.sync_rounds(["m1", "m1"], [], source="m1")


def bfs_depth(hosts, cables, source):
    adj = {h: set() for h in hosts}
    for c in cables:
        (a, _), (b, _) = c["a"], c["b"]
        adj[a].add(b)
        adj[b].add(a)
    dist, todo = {source: 0}, [source]
    while todo:
        x = todo.pop(0)
        for y in sorted(adj[x]):
            if y not in dist:
                dist[y] = dist[x] + 1
                todo.append(y)
    return dist


def widest(hosts, plan, source):
    """{host: the widest bottleneck (Gb/s) of any cable path from source}, by brute relaxation."""
    speed = {}
    for c in sync_plan.cables_from_plan(plan):
        a, b, s = c["a"]["host"], c["b"]["host"], c["speed_gbps"] or 0
        for k in ((a, b), (b, a)):
            speed[k] = max(speed.get(k, 0), s)
    best = {source: float("inf")}
    for _ in hosts:
        for (a, b), s in speed.items():
            if a in best and min(best[a], s) > best.get(b, -1):
                best[b] = min(best[a], s)
    return best


@settings(max_examples=examples(120), deadline=None)
@given(wirings(min_hosts=2, max_hosts=10), st.integers(0, 3), st.data())
def test_every_mac_served_once_by_a_holder_over_its_cable(wiring, fanout, data):
    hosts, cables = wiring
    source = data.draw(st.sampled_from(hosts + [None]))
    plan = plan_of(hosts, cables)
    result = sync_plan.plan_rounds(plan, source=source, fanout=fanout)
    check_tree(result, plan, hosts, source, fanout=fanout)
    if source is not None:
        dist = bfs_depth(hosts, cables, source)
        lan = set(result["lan"])
        assert lan.isdisjoint(dist)  # the LAN only where no cable path leads
        assert len(lan) == len(result["islands"]) - 1 == len(result["warnings"])
        if not fanout:  # each Mac of the source's island over its widest path
            width = widest(hosts, plan, source)
            for h in dist:
                if h != source:
                    assert result["copies"][h]["bottleneck_gbps"] == width[h], h
                    if len({c["speed"] for c in cables}) == 1:  # all one speed: fewest hops
                        assert result["copies"][h]["round"] == dist[h], h
    for c in result["copies"].values():  # a split: the source's own cable to a Mac it relays to
        if c["split"] is not None:
            assert source is not None and c["src"] != source and c["split"]["src"] == source, c
            assert c["split"]["address"] in address_of(plan, c["dest"], source), c
            assert sync_plan.MIN_SPLIT_SHARE <= c["split"]["share"] < 1, c
    assert sync_plan.plan_rounds(plan, source=source, fanout=fanout) == result


def test_the_filter_is_the_same_function_and_names_itself_in_errors(filters, filter_error):
    hosts, cables = ring(4)
    plan = plan_of(hosts, cables)
    assert filters["mlx_sync_rounds"](plan, "m1") == sync_plan.plan_rounds(plan, source="m1")
    # empty or null: the controller (model_sync_tree_from: controller)
    assert (
        filters["mlx_sync_rounds"](plan, "")
        == filters["mlx_sync_rounds"](plan, None)
        == sync_plan.plan_rounds(plan, source=None)
    )
    with pytest.raises(filter_error, match="^mlx_sync_rounds: the model's source 'm9'"):
        filters["mlx_sync_rounds"](plan, "m9")
    with pytest.raises(filter_error, match="^mlx_sync_rounds: fanout must be"):
        filters["mlx_sync_rounds"](plan, "m1", fanout="2")
    assert filters["mlx_sync_rounds"](plan, "m1", spread=True) == sync_plan.plan_rounds(plan, source="m1", spread=True)
    with pytest.raises(filter_error, match="^mlx_sync_rounds: spread must be true when"):
        filters["mlx_sync_rounds"](plan, "m1", spread="yes")


def test_a_receiver_only_where_the_copy_comes_over_a_cable_from_a_mac_still_in_the_play(filters, filter_error):
    """receives_by_cable (filter mlx_sync_by_cable): the one rule cables.yml starts receivers by
    and model_sync leaves Macs to them by."""
    hosts, cables = ring(4)
    copies = rounds_of(hosts, cables, source=None)["copies"]  # m1 over the LAN, m2 m4 from m1, m3 via m2
    everyone = list(hosts)
    by_cable = {h: sync_plan.receives_by_cable(copies, h, everyone) for h in hosts}
    assert by_cable == {"m1": False, "m2": True, "m3": True, "m4": True}
    # the Mac on m3's way (m2) left the play: m3's copy cannot come, m4's still does
    gone = [h for h in hosts if h != "m2"]
    assert [sync_plan.receives_by_cable(copies, h, gone) for h in ("m3", "m4")] == [False, True]
    # a Mac the tree does not list, and a copy from the controller over the cables' planner
    assert sync_plan.receives_by_cable(copies, "m9", everyone) is False
    assert sync_plan.receives_by_cable({"m2": {"via": "thunderbolt", "src": None, "path": []}}, "m2", ["m2"]) is False
    assert filters["mlx_sync_by_cable"](copies, "m3", everyone) is True
    with pytest.raises(filter_error, match="^mlx_sync_by_cable: play_hosts must be"):
        filters["mlx_sync_by_cable"](copies, "m3", "m1,m2")
