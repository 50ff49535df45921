"""mlx_planner.links: ports joined into cables, and what is wrong with the sightings."""

from __future__ import annotations

import copy
import json
import random

import pytest

from ansible_collections.mlx.cluster.plugins.plugin_utils import plan_cables, plan_topology
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import PlanError
from tests.unit.filter.planner_synth import cable, find_port, make_facts, tb_uuid


def _ids(result):
    return [c["id"] for c in result["cables"]]


def test_direct_cable_seen_from_both_ends():
    facts = make_facts(["m2", "m1"], [cable("m2", "en3", "m1", "en2")])
    result = plan_cables.links(facts)
    assert result["cables"] == [
        {
            "id": "m1:en2~m2:en3",
            "a": {"host": "m1", "iface": "en2", "domain_uuid": tb_uuid("m1", "en2")},
            "b": {"host": "m2", "iface": "en3", "domain_uuid": tb_uuid("m2", "en3")},
            "speed_gbps": 80,
            "link_class": "TB5",
            "sighting": "both",
            "via": [],
        }
    ]
    assert result["one_sided"] == result["external"] == result["problems"] == []
    assert result["warnings"] == []


def test_one_sided_dock_cable():
    facts = make_facts(["m1", "m2"], [cable("m1", "en2", "m2", "en3", via=["CalDigit TS4"], seen_by="b")])
    result = plan_cables.links(facts)
    [c] = result["cables"]
    assert c["sighting"] == "one-sided"
    assert c["via"] == ["CalDigit TS4"]
    assert result["one_sided"] == [c]
    assert result["problems"] == []
    [warning] = result["warnings"]
    assert "m1:en2~m2:en3" in warning and "one side only" in warning and "dock" in warning


def test_two_cables_between_one_pair_are_both_kept():
    facts = make_facts(["m1", "m2"], [cable("m1", "en2", "m2", "en2"), cable("m1", "en3", "m2", "en3")])
    assert _ids(plan_cables.links(facts)) == ["m1:en2~m2:en2", "m1:en3~m2:en3"]


def test_external_peer():
    facts = make_facts(["m1", "m2"], [cable("m1", "en2", "m2", "en2")])
    ext = find_port(make_facts(["m1", "m9"], [cable("m1", "en3", "m9", "en2")]), "m1", "en3")
    facts["m1"]["ports"].append(ext)
    result = plan_cables.links(facts)
    assert _ids(result) == ["m1:en2~m2:en2"]
    assert result["external"] == [
        {"host": "m1", "iface": "en3", "peer_name": "Mac Studio", "peer_uuid": tb_uuid("m9", "en2")}
    ]
    assert any("not in the inventory" in w and "m1:en3" in w for w in result["warnings"])


def test_miswired_or_stale_sighting():
    # m1:en2 says it sees m2:en3, but m2:en3 sees m3:en2 (and m3:en2 sees m2:en3 back).
    facts = make_facts(["m1", "m2", "m3"], [cable("m2", "en3", "m3", "en2")], empty_ports={"m1": ["en2"]})
    find_port(facts, "m1", "en2")["peer"] = {
        "domain_uuid": tb_uuid("m2", "en3"),
        "name": "Mac Studio",
        "model_id": None,
        "via": [],
    }
    result = plan_cables.links(facts)
    assert _ids(result) == ["m2:en3~m3:en2"]
    [problem] = result["problems"]
    assert problem["code"] == "miswired"
    assert problem["hosts"] == ["m1", "m2"]
    assert problem["ports"] == ["m1:en2", "m2:en3"]
    assert "miswired or stale" in problem["msg"] and "m3:en2" in problem["msg"]


def test_cabled_port_without_iface():
    facts = make_facts(["m1", "m2"], [cable("m1", "en2", "m2", "en3"), cable("m1", "en4", "m2", "en4")])
    port = find_port(facts, "m2", "en3")
    port["iface"] = None
    result = plan_cables.links(facts)
    assert _ids(result) == ["m1:en4~m2:en4"]
    [problem] = result["problems"]
    assert problem["code"] == "no_iface"
    assert problem["hosts"] == ["m2"] and problem["ports"] == ["m2:Thunderbolt 1"]
    assert "networksetup -detectnewhardware" in problem["fix"]


def test_empty_port_without_iface_is_only_a_warning():
    facts = make_facts(["m1", "m2"], [cable("m1", "en2", "m2", "en2")], empty_ports={"m1": ["en9"]})
    find_port(facts, "m1", "en9")["iface"] = None
    result = plan_cables.links(facts)
    assert result["problems"] == []
    assert any("harmless while the port is empty" in w for w in result["warnings"])


@pytest.mark.parametrize(
    "speed_a, speed_b, speed, link_class",
    [
        pytest.param(80, 80, 80, "TB5", id="tb5"),
        pytest.param(120, 80, 80, "TB5", id="min-of-ends"),
        pytest.param(80, 40, 40, "TB4", id="tb4-end"),
        pytest.param(40, 40, 40, "TB4", id="tb4"),
        pytest.param(20, 40, 20, "TB3", id="tb3"),
        pytest.param(None, 40, 40, "TB4", id="one-end-unknown"),
        pytest.param(None, None, None, None, id="unknown"),
    ],
)
def test_speed_is_the_slower_end(speed_a, speed_b, speed, link_class):
    facts = make_facts(["m1", "m2"], [cable("m1", "en2", "m2", "en2", speed=speed_a, speed_b=speed_b)])
    [c] = plan_cables.links(facts)["cables"]
    assert (c["speed_gbps"], c["link_class"]) == (speed, link_class)


def test_independent_of_dict_and_port_order():
    facts = make_facts(
        ["a", "b", "c", "d"],
        [
            cable("a", "en2", "b", "en2"),
            cable("b", "en3", "c", "en2"),
            cable("c", "en3", "d", "en2"),
            cable("d", "en3", "a", "en3", seen_by="a", via=["Dock"]),
            cable("a", "en4", "c", "en4"),
        ],
    )
    expected = plan_cables.links(facts)
    rnd = random.Random(7)
    for _ in range(10):
        hosts = list(facts)
        rnd.shuffle(hosts)
        shuffled = {}
        for h in hosts:
            f = copy.deepcopy(facts[h])
            rnd.shuffle(f["ports"])
            shuffled[h] = f
        assert json.dumps(plan_cables.links(shuffled)) == json.dumps(expected)


def test_accepts_mlx_cluster_facts():
    facts = make_facts(["m1", "m2"], [cable("m1", "en2", "m2", "en2")])
    wrapped = {h: {"thunderbolt": f, "rdma": {}} for h, f in facts.items()}
    assert plan_cables.links(wrapped) == plan_cables.links(facts)


def test_loopback_cable():
    facts = make_facts(["m1", "m2"], [cable("m1", "en2", "m1", "en3")])
    result = plan_cables.links(facts)
    assert result["cables"] == []
    assert [p["code"] for p in result["problems"]] == ["loopback"]


def test_duplicate_domain_uuid():
    facts = make_facts(["m1", "m2"], [cable("m1", "en2", "m2", "en2")])
    facts["m3"] = copy.deepcopy(facts["m2"])  # facts copied between hosts
    result = plan_cables.links(facts)
    assert "duplicate_uuid" in [p["code"] for p in result["problems"]]
    assert result["cables"] == []


def test_two_one_sided_sightings_of_one_port():
    facts = make_facts(
        ["m1", "m2", "m3"], [cable("m1", "en2", "m2", "en2", seen_by="a", via=["Hub"])], empty_ports={"m3": ["en2"]}
    )
    find_port(facts, "m3", "en2")["peer"] = {
        "domain_uuid": tb_uuid("m2", "en2"),
        "name": "x",
        "model_id": None,
        "via": ["Hub"],
    }
    result = plan_cables.links(facts)
    assert result["cables"] == []
    [problem] = result["problems"]
    assert problem["code"] == "miswired" and problem["hosts"] == ["m1", "m2", "m3"]


def test_host_without_facts_is_a_warning():
    facts = make_facts(["m1", "m2"], [cable("m1", "en2", "m2", "en2")])
    facts["m3"] = None
    result = plan_cables.links(facts)
    assert len(result["cables"]) == 1
    assert any(w.startswith("m3: no Thunderbolt facts") for w in result["warnings"])


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param([], id="list"),
        pytest.param({"m1": "nope"}, id="facts-not-mapping"),
        pytest.param({"m1": {"ports": "nope"}}, id="ports-not-list"),
        pytest.param({"": {"ports": []}}, id="empty-host"),
        pytest.param(
            {"m1": {"ports": [{"iface": "en2", "receptacle": 1}, {"iface": "en2", "receptacle": 2}]}},
            id="duplicate-iface",
        ),
    ],
)
def test_bad_input(bad):
    with pytest.raises(PlanError):
        plan_cables.links(bad)


def test_real_captures_through_mlx_tb(read_fixture):
    """Cross-layer: two captured Mac Studios cabled together, through the real fact parser."""
    from ansible_collections.mlx.cluster.plugins.module_utils import mlx_tb

    hw = read_fixture("networksetup_hwports_studio_with_bridge.txt")
    facts = {
        "studio-a": mlx_tb.thunderbolt_facts(read_fixture("sp_direct_studio_a.json"), hw),
        "studio-b": mlx_tb.thunderbolt_facts(read_fixture("sp_direct_studio_b.json"), hw),
    }
    result = plan_cables.links(facts)
    assert [(c["id"], c["sighting"]) for c in result["cables"]] == [("studio-a:en2~studio-b:en3", "both")]
    assert result["problems"] == []


# ------------------------------------------------- ports without a domain UUID (partial output)


def test_port_without_uuid_is_matched_from_the_side_that_sees_it():
    """m2:en3 lacks its own UUID but sees m1:en2, which sees a UUID no port owns: that UUID
    is m2:en3's, and the cable is kept (with a warning saying so)."""
    facts = make_facts(["m1", "m2"], [cable("m1", "en2", "m2", "en3")])
    find_port(facts, "m2", "en3")["domain_uuid"] = None
    links = plan_cables.links(facts)
    assert [c["id"] for c in links["cables"]] == ["m1:en2~m2:en3"]
    assert links["cables"][0]["sighting"] == "both"
    assert links["cables"][0]["b"]["domain_uuid"] == tb_uuid("m2", "en3")
    assert links["external"] == [] and links["unmatched"] == [] and links["problems"] == []
    assert any("m2:en3 has no domain UUID in system_profiler; it sees m1:en2" in w for w in links["warnings"])


def test_port_without_uuid_or_peer_is_named_not_dropped():
    """Neither its UUID nor its peer: the cable cannot be placed. It does not vanish: it is
    an `unmatched` entry, the other end's 'external' warning points at it, preflight names it."""
    from ansible_collections.mlx.cluster.plugins.plugin_utils.preflight import preflight

    facts = make_facts(
        ["m1", "m2", "m3"],
        [cable("m1", "en2", "m2", "en3"), cable("m1", "en3", "m3", "en2"), cable("m2", "en2", "m3", "en3")],
    )
    port = find_port(facts, "m2", "en3")
    port["domain_uuid"], port["peer"] = None, None
    links = plan_cables.links(facts)
    assert [c["id"] for c in links["cables"]] == ["m1:en3~m3:en2", "m2:en2~m3:en3"]
    (u,) = links["unmatched"]
    assert (u["host"], u["iface"], u["port"], u["peer"]) == ("m2", "en3", "m2:en3", None)
    assert "m2:en3 is cabled but system_profiler gave no domain UUID" in u["msg"]
    assert "domain_uuid_key" in u["fix"] and "m2" in u["fix"]
    assert [e["iface"] for e in links["external"]] == ["en2"]
    assert any(
        "m1:en2: cable to a Mac not in the inventory" in w and "or to m2:en3, whose domain UUID is unknown" in w
        for w in links["warnings"]
    )
    # the planner goes on (ring over the rest), and preflight names the port
    topo = plan_topology.topology(links, ["m1", "m2", "m3"], rdma=True)
    assert topo["backend"] is None and topo["missing"] == [["m1", "m2"]]
    found = [
        p
        for p in preflight({h: {} for h in ("m1", "m2", "m3")}, links, topo)
        if p["port"] == "en3" and p["host"] == "m2"
    ]
    assert [(p["severity"], p["check"]) for p in found] == [("warning", "wiring")]


def test_two_ports_without_uuid_seeing_the_same_port_are_both_named():
    facts = make_facts(["m1", "m2", "m3"], [cable("m1", "en2", "m2", "en3")], empty_ports={"m3": ["en5"]})
    find_port(facts, "m2", "en3")["domain_uuid"] = None
    stray = find_port(facts, "m3", "en5")
    stray.update(domain_uuid=None, status="connected", peer=dict(find_port(facts, "m2", "en3")["peer"]))
    links = plan_cables.links(facts)
    assert links["cables"] == []
    assert sorted(u["port"] for u in links["unmatched"]) == ["m2:en3", "m3:en5"]


def test_empty_port_without_uuid_is_harmless():
    facts = make_facts(["m1", "m2"], [cable("m1", "en2", "m2", "en3")], empty_ports={"m1": ["en4"]})
    find_port(facts, "m1", "en4")["domain_uuid"] = None
    links = plan_cables.links(facts)
    assert len(links["cables"]) == 1 and links["unmatched"] == []
