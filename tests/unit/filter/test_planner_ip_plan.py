"""mlx_planner.ip_plan: one /30 per cable, clear of existing networks, stable."""

from __future__ import annotations

import ipaddress

import pytest

from ansible_collections.mlx.cluster.plugins.plugin_utils import plan_addresses, plan_cables
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import PlanError
from tests.unit.filter.planner_synth import cable, make_facts, mesh_cables, ring_cables


def links_of(hosts, cables):
    return plan_cables.links(make_facts(hosts, cables))


def net(plan, cid):
    return ipaddress.ip_network(plan["cables"][cid]["network"])


TWO = links_of(["m1", "m2"], [cable("m1", "en2", "m2", "en3")])


def test_one_cable():
    plan = plan_addresses.ip_plan(TWO)
    entry = plan["cables"]["m1:en2~m2:en3"]
    network = ipaddress.ip_network(entry["network"])
    assert network.prefixlen == 30 and network.subnet_of(ipaddress.ip_network("10.208.0.0/16"))
    first, second = list(network.hosts())
    assert entry["a"] == {"host": "m1", "iface": "en2", "address": str(first)}
    assert entry["b"] == {"host": "m2", "iface": "en3", "address": str(second)}
    assert (entry["prefix"], entry["netmask"], entry["kept"]) == (30, "255.255.255.252", False)
    assert plan["pool"] == "10.208.0.0/16"
    assert plan["hosts"] == {
        "m1": [
            {
                "iface": "en2",
                "address": str(first),
                "prefix": 30,
                "netmask": "255.255.255.252",
                "peer_host": "m2",
                "peer_iface": "en3",
                "peer_address": str(second),
                "cable": "m1:en2~m2:en3",
            }
        ],
        "m2": [
            {
                "iface": "en3",
                "address": str(second),
                "prefix": 30,
                "netmask": "255.255.255.252",
                "peer_host": "m1",
                "peer_iface": "en2",
                "peer_address": str(first),
                "cable": "m1:en2~m2:en3",
            }
        ],
    }


def test_default_pool_is_not_192_168():
    assert not ipaddress.ip_network(plan_addresses.DEFAULT_POOL).overlaps(ipaddress.ip_network("192.168.0.0/16"))
    assert "192.168" in plan_addresses.ip_plan.__doc__


def test_same_wiring_same_plan_in_any_order():
    hosts, cables = mesh_cables(5)
    links = links_of(hosts, cables)
    reordered = dict(links, cables=list(reversed(links["cables"])))
    assert plan_addresses.ip_plan(links) == plan_addresses.ip_plan(reordered)


def test_lan_on_another_interface_pushes_the_plan_around_it():
    hosts, cables = mesh_cables(4)
    links = links_of(hosts, cables)
    interfaces = {
        "m00": {
            "en0": {"ipv4": [{"address": "10.208.3.7", "prefix": 17}], "up": True},
            "lo0": {"ipv4": [{"address": "127.0.0.1", "prefix": 8}]},
        }
    }
    plan = plan_addresses.ip_plan(links, interfaces=interfaces)
    lan = ipaddress.ip_network("10.208.0.0/17")
    assert all(not net(plan, cid).overlaps(lan) for cid in plan["cables"])
    assert plan["excluded"] == [{"network": "10.208.0.0/17", "source": "m00:en0"}]


def test_exclude_argument():
    hosts, cables = mesh_cables(4)
    plan = plan_addresses.ip_plan(links_of(hosts, cables), exclude=["10.208.128.0/17", "fd00::/8"])
    assert all(net(plan, cid).subnet_of(ipaddress.ip_network("10.208.0.0/17")) for cid in plan["cables"])


def test_addresses_already_on_both_ends_are_kept():
    interfaces = {
        "m1": {"en2": {"ipv4": [{"address": "10.208.77.6", "prefix": 30}]}},
        "m2": {"en3": {"ipv4": [{"address": "10.208.77.5", "prefix": 30}]}},
    }
    entry = plan_addresses.ip_plan(TWO, interfaces=interfaces)["cables"]["m1:en2~m2:en3"]
    assert entry["network"] == "10.208.77.4/30" and entry["kept"] is True
    # kept as they are, even with a above b: nothing is renumbered
    assert (entry["a"]["address"], entry["b"]["address"]) == ("10.208.77.6", "10.208.77.5")


def test_current_argument_overrides_interfaces():
    current = {"m1": {"en2": ["10.208.9.1/30"]}, "m2": {"en3": [{"address": "10.208.9.2", "prefix": 30}]}}
    interfaces = {
        "m1": {"en2": {"ipv4": [{"address": "10.208.77.6", "prefix": 30}]}},
        "m2": {"en3": {"ipv4": [{"address": "10.208.77.5", "prefix": 30}]}},
    }
    entry = plan_addresses.ip_plan(TWO, interfaces=interfaces, current=current)["cables"]["m1:en2~m2:en3"]
    assert entry["network"] == "10.208.9.0/30"


@pytest.mark.parametrize(
    "a, b",
    [
        pytest.param("10.208.9.1/30", "10.208.10.2/30", id="different-networks"),
        pytest.param("10.208.9.1/24", "10.208.9.2/24", id="not-a-30"),
        pytest.param("10.209.9.1/30", "10.209.9.2/30", id="outside-pool"),
        pytest.param("10.208.9.0/30", "10.208.9.1/30", id="network-address"),
        pytest.param("10.208.9.1/30", "10.208.9.1/30", id="same-address"),
        pytest.param("10.208.9.1/30", None, id="one-end-only"),
    ],
)
def test_current_addresses_that_are_not_a_valid_30_are_replaced(a, b):
    current = {"m1": {"en2": [a]}, "m2": {"en3": [b] if b else []}}
    entry = plan_addresses.ip_plan(TWO, current=current)["cables"]["m1:en2~m2:en3"]
    assert entry["kept"] is False
    assert entry == plan_addresses.ip_plan(TWO)["cables"]["m1:en2~m2:en3"]


def test_current_addresses_in_an_excluded_network_are_replaced():
    current = {"m1": {"en2": ["10.208.9.1/30"]}, "m2": {"en3": ["10.208.9.2/30"]}}
    entry = plan_addresses.ip_plan(TWO, current=current, exclude=["10.208.9.0/24"])["cables"]["m1:en2~m2:en3"]
    assert entry["kept"] is False and entry["network"] != "10.208.9.0/30"


def test_one_30_claimed_by_two_cables_goes_to_the_first():
    links = links_of(["m1", "m2", "m3"], [cable("m1", "en2", "m2", "en2"), cable("m2", "en3", "m3", "en3")])
    current = {
        "m1": {"en2": ["10.208.9.1/30"]},
        "m2": {"en2": ["10.208.9.2/30"], "en3": ["10.208.9.1/30"]},
        "m3": {"en3": ["10.208.9.2/30"]},
    }
    plan = plan_addresses.ip_plan(links, current=current)
    assert plan["cables"]["m1:en2~m2:en2"]["network"] == "10.208.9.0/30"
    assert plan["cables"]["m2:en3~m3:en3"]["network"] != "10.208.9.0/30"


def test_adding_a_cable_moves_no_other():
    hosts, cables = ring_cables(6)
    before = plan_addresses.ip_plan(links_of(hosts, cables))
    after = plan_addresses.ip_plan(links_of(hosts, cables + [cable("r00", "en9", "r03", "en9")]))
    for cid, entry in before["cables"].items():
        assert after["cables"][cid] == entry


def test_smallest_pool_holds_one_cable():
    plan = plan_addresses.ip_plan(TWO, pool="10.1.2.4/30")
    assert plan["cables"]["m1:en2~m2:en3"]["network"] == "10.1.2.4/30"


def test_exhaustion_says_how_many():
    hosts, cables = ring_cables(3)
    with pytest.raises(
        PlanError, match="pool 10.1.2.0/29 has 2 /30 networks .* but 3 cables need one each: pass a larger pool"
    ):
        plan_addresses.ip_plan(links_of(hosts, cables), pool="10.1.2.0/29")


def test_exhaustion_by_exclusion_names_the_source():
    hosts, cables = ring_cables(3)
    interfaces = {"r00": {"en0": {"ipv4": [{"address": "10.1.2.1", "prefix": 29}]}}}
    with pytest.raises(
        PlanError,
        match="pool 10.1.2.0/28 has 4 /30 networks \\(2 excluded by r00:en0, 0 kept by existing cables\\) but 3 cables",
    ):
        plan_addresses.ip_plan(links_of(hosts, cables), pool="10.1.2.0/28", interfaces=interfaces)


@pytest.mark.parametrize(
    "pool, match",
    [
        pytest.param("fd00::/64", "not IPv4", id="ipv6"),
        pytest.param("10.0.0.0/31", "smaller than one /30", id="31"),
        pytest.param("10.208.1.0/16", "not a CIDR network", id="host-bits"),
        pytest.param("banana", "not a CIDR network", id="garbage"),
        pytest.param("169.254.0.0/16", "link-local", id="link-local"),
        pytest.param("100.64.0.0/16", "CGNAT", id="cgnat"),
        pytest.param("100.0.0.0/8", "CGNAT", id="contains-cgnat"),
        pytest.param("127.0.0.0/24", "loopback", id="loopback"),
        pytest.param("224.1.0.0/16", "multicast", id="multicast"),
        pytest.param(24, "IPv4 CIDR string", id="not-a-string"),
    ],
)
def test_bad_pool(pool, match):
    with pytest.raises(PlanError, match=match):
        plan_addresses.ip_plan(TWO, pool=pool)


@pytest.mark.parametrize(
    "kw, match",
    [
        pytest.param({"exclude": ["nope"]}, "exclude: 'nope' is not a CIDR", id="exclude"),
        pytest.param({"exclude": "10.0.0.0/8"}, "exclude must be a list", id="exclude-str"),
        pytest.param(
            {"interfaces": {"m1": {"en0": {"ipv4": [{"address": "x", "prefix": 24}]}}}},
            "interfaces m1:en0: bad address",
            id="interfaces",
        ),
        pytest.param({"interfaces": ["m1"]}, "interfaces must map", id="interfaces-list"),
        pytest.param({"current": {"m1": {"en2": [42]}}}, "bad address entry", id="current"),
    ],
)
def test_bad_arguments(kw, match):
    with pytest.raises(PlanError, match=match):
        plan_addresses.ip_plan(TWO, **kw)


def test_inconsistent_links():
    links = {"cables": TWO["cables"] + [dict(TWO["cables"][0], id="other")]}
    with pytest.raises(PlanError, match="m1:en2 is an end of two cables"):
        plan_addresses.ip_plan(links)
    with pytest.raises(PlanError, match="result of mlx_links"):
        plan_addresses.ip_plan({"nope": []})
