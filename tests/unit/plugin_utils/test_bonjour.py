"""plugin_utils/bonjour.py: what the Bonjour browse found -> the hosts of mac_cluster (pure)."""

from __future__ import annotations

import random

import pytest

from ansible_collections.mlx.cluster.plugins.plugin_utils import bonjour

SSH, SFTP = bonjour.SERVICE_TYPES
LAN = ["192.168.1.0/24", "127.0.0.0/8"]


def rec(instance, server, addresses, type_=SSH, port=22):
    return {"type": type_, "instance": instance, "server": server, "port": port, "addresses": addresses}


@pytest.mark.parametrize(
    ("server", "instance", "name"),
    [
        pytest.param("Studio-1.local.", "Studio 1", "Studio-1", id="local-host-name"),
        pytest.param("studio-2.local", "Studio 2", "studio-2", id="no-trailing-dot"),
        pytest.param("MAC-MINI.LOCAL.", "Mac mini", "MAC-MINI", id="case-kept"),
        pytest.param("Ann’s Mac.local.", "Ann’s MacBook Pro", "Ann-s-MacBook-Pro", id="not-a-label-instance"),
        pytest.param(None, "Mac Studio (2)", "Mac-Studio-2", id="no-server"),
        pytest.param("x_y.local.", "---", None, id="nothing-usable"),
        pytest.param("studio-1.lab.example.", "Studio", "Studio", id="not-local-falls-to-instance"),
    ],
)
def test_host_name(server, instance, name):
    assert bonjour.host_name(server, instance) == name


def test_natural_order():
    names = ["studio-10", "studio-2", "Studio-3", "studio-1", "mini", "studio-2b"]
    assert sorted(names, key=bonjour.natural_key) == [
        "mini",
        "studio-1",
        "studio-2",
        "studio-2b",
        "Studio-3",
        "studio-10",
    ]


@pytest.mark.parametrize(
    ("addresses", "networks", "chosen", "noted"),
    [
        pytest.param(["169.254.3.4", "192.168.1.20"], LAN, "192.168.1.20", False, id="link-local-never"),
        pytest.param(["10.208.0.1", "192.168.1.20"], LAN, "192.168.1.20", False, id="lan-over-thunderbolt"),
        # a LAN wide enough to hold the Thunderbolt pool: the cable's end is lower, not chosen
        pytest.param(["10.208.0.1", "10.250.1.20"], ["10.0.0.0/8"], "10.250.1.20", False, id="wide-lan-holds-the-pool"),
        pytest.param(["192.168.1.30", "192.168.1.20"], LAN, "192.168.1.20", False, id="lowest-on-lan"),
        pytest.param(["169.254.3.4"], LAN, None, False, id="only-link-local"),
        pytest.param(["10.208.0.1"], LAN, None, False, id="only-thunderbolt-pool"),
        # the controller cabled to this Mac: its /30 is the controller's too, but never the LAN
        pytest.param(["10.50.0.2", "10.1.0.9"], ["10.50.0.0/30"], "10.1.0.9", True, id="controller-own-cable"),
        pytest.param(["10.50.0.2"], ["10.50.0.0/30"], None, False, id="only-the-cable"),
        # the controller on another subnet (a Bonjour gateway): the lowest address left, said so
        pytest.param(["172.16.5.9", "169.254.1.1"], LAN, "172.16.5.9", True, id="other-subnet"),
        pytest.param(["172.16.5.9"], [], "172.16.5.9", True, id="networks-unknown"),
        pytest.param(["127.0.0.1", "0.0.0.0", "224.0.0.251"], [], None, False, id="never-special"),
        # a link-local network of the controller's is not a LAN to prefer
        pytest.param(["169.254.3.4", "192.168.1.20"], ["169.254.0.0/16"], "192.168.1.20", True, id="ll-controller"),
    ],
)
def test_choose_address(addresses, networks, chosen, noted):
    address, note = bonjour.choose_address(addresses, networks)
    assert address == chosen
    assert bool(note) is noted
    if note:
        assert chosen in note


def test_exclude_networks_is_the_thunderbolt_pool_by_default_and_can_change():
    assert bonjour.choose_address(["10.208.4.1"], [])[0] is None
    assert bonjour.choose_address(["10.208.4.1"], [], exclude=[])[0] == "10.208.4.1"
    assert bonjour.choose_address(["10.77.0.1", "10.208.4.1"], [], exclude=["10.77.0.0/16"])[0] == "10.208.4.1"


CLUSTER = [
    rec("Studio 10", "studio-10.local.", ["192.168.1.40", "169.254.7.1"]),
    rec("Studio 2", "studio-2.local.", ["192.168.1.12"]),
    rec("Studio 2", "studio-2.local.", ["192.168.1.12", "10.208.0.2"], type_=SFTP),
    rec("Studio 1", "studio-1.local.", ["10.208.0.1", "192.168.1.11", "169.254.9.9"]),
    rec("Studio 1", "studio-1.local.", ["192.168.1.11"], type_=SFTP),
]


def test_the_cluster_in_stable_order_whatever_the_answers_order():
    first = bonjour.choose_hosts(CLUSTER, LAN)
    assert [(h["name"], h["address"], h["port"], h["instance"]) for h in first["hosts"]] == [
        ("studio-1", "192.168.1.11", 22, "Studio 1"),
        ("studio-2", "192.168.1.12", 22, "Studio 2"),
        ("studio-10", "192.168.1.40", 22, "Studio 10"),
    ]
    assert first["warnings"] == []
    assert first["seen"] == ["studio-1", "studio-2", "studio-10"]
    rng = random.Random(7)
    for _ in range(20):
        shuffled = [dict(r, addresses=rng.sample(r["addresses"], len(r["addresses"]))) for r in CLUSTER]
        rng.shuffle(shuffled)
        assert bonjour.choose_hosts(shuffled, list(reversed(LAN))) == first


def test_a_mac_announcing_only_sftp_ssh_is_kept_and_its_ssh_port_taken():
    got = bonjour.choose_hosts(
        [
            rec("Mini", "mini.local.", ["192.168.1.5"], type_=SFTP, port=2222),
            rec("Air", "air.local.", ["192.168.1.6"], type_=SFTP, port=2200),
            rec("Air", "air.local.", ["192.168.1.6"], port=22),
        ],
        LAN,
    )
    assert [(h["name"], h["port"]) for h in got["hosts"]] == [("air", 22), ("mini", 2222)]


def test_mdns_names_are_one_host_whatever_their_case():
    got = bonjour.choose_hosts([rec("S", "Studio-1.local.", ["192.168.1.2"]), rec("S", "studio-1.local.", [])], LAN)
    assert [h["name"] for h in got["hosts"]] == ["Studio-1"] and got["warnings"] == []


@pytest.mark.parametrize(
    ("patterns", "kept"),
    [
        pytest.param([], ["studio-1", "studio-2", "studio-10"], id="none-keeps-all"),
        pytest.param([r"^studio-\d$"], ["studio-1", "studio-2"], id="on-the-name"),
        pytest.param(["Studio 10"], ["studio-10"], id="on-the-instance"),
        pytest.param(["-1$", "-2$"], ["studio-1", "studio-2"], id="any-of-them"),
        pytest.param(["laptop"], [], id="none-matches"),
    ],
)
def test_name_patterns(patterns, kept):
    assert [h["name"] for h in bonjour.choose_hosts(CLUSTER, LAN, patterns)["hosts"]] == kept


def test_a_pattern_that_is_not_a_regular_expression_is_named():
    with pytest.raises(ValueError, match=r"name pattern '\(studio' is not a regular expression"):
        bonjour.choose_hosts(CLUSTER, LAN, ["(studio"])


def test_macs_left_out_are_named_in_warnings():
    got = bonjour.choose_hosts(
        [
            rec("Studio 1", "studio-1.local.", ["192.168.1.11"]),
            rec("Bridge Only", "bridge-only.local.", ["169.254.1.2", "10.208.0.5"]),
            rec("Slow Mac", None, []),
            rec("Slow Mac", None, [], type_=SFTP),
            # resolved under one type, not the other: one Mac, no warning
            rec("Studio 1", None, [], type_=SFTP),
        ],
        LAN,
    )
    assert [h["name"] for h in got["hosts"]] == ["studio-1"]
    assert len(got["warnings"]) == 2, got["warnings"]
    slow, only = got["warnings"]
    assert (
        only.startswith("bridge-only announced only addresses")
        and "(10.208.0.5, 169.254.1.2: link-local or Thunderbolt)" in only
    )
    assert "'Slow Mac' announced" in slow and "did not resolve" in slow and "longer timeout" in slow
    assert got["seen"] == ["bridge-only", "Slow Mac", "studio-1"]


def test_a_mac_on_another_subnet_is_kept_with_a_warning():
    got = bonjour.choose_hosts([rec("Far", "far.local.", ["172.16.0.9", "169.254.0.3"])], LAN)
    assert got["hosts"][0]["address"] == "172.16.0.9"
    assert got["warnings"] == [
        "far: none of its addresses is on this controller's networks (192.168.1.0/24): took 172.16.0.9"
    ]


def test_two_macs_that_come_to_one_name_keep_the_first():
    got = bonjour.choose_hosts(
        [rec("Lab Mac", "lab mac.local.", ["192.168.1.3"]), rec("Lab-Mac", "Lab-Mac.local.", ["192.168.1.4"])], LAN
    )
    assert [(h["name"], h["address"]) for h in got["hosts"]] == [("Lab-Mac", "192.168.1.3")]
    assert got["warnings"] == ["Lab-Mac (Lab-Mac.local.) has the name of lab mac.local.: left out"]


def test_nothing_found_says_what_was_browsed_for_how_long_and_the_fix():
    msg = bonjour.nothing_found(bonjour.SERVICE_TYPES, 5.0)
    assert "_ssh._tcp.local and _sftp-ssh._tcp.local" in msg and "within 5 s" in msg
    for fix in (
        "Remote Login on in System Settings > General > Sharing",
        "same LAN",
        "inventory/mac_cluster/hosts.yml",
    ):
        assert fix in msg
    unmatched = bonjour.nothing_found(bonjour.SERVICE_TYPES, 2.5, ["m1", "m2"], ["^studio"])
    assert "(m1, m2) matches name_patterns ['^studio']" in unmatched and "2.5 s" in unmatched
    unusable = bonjour.nothing_found(bonjour.SERVICE_TYPES, 2, ["m1"])
    assert "1 Mac(s) announced" in unusable and "warnings above" in unusable
