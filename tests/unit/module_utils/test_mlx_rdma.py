"""plugins/module_utils/mlx_rdma.py on captured outputs (tests/fixtures)."""

from __future__ import annotations

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils import mlx_tb
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rdma import (
    FIX_ENABLE,
    ParseError,
    iface_of,
    normalise_gid,
    parse_ibv_devices,
    parse_ibv_devinfo,
    parse_rdma_ctl,
    rdma_facts,
)

DEVICE_KEYS = {"name", "iface", "port_state", "active_mtu", "ipv4_gid", "gids"}
PROBLEM_KEYS = {"code", "iface", "msg", "fix"}


def test_parse_error_is_shared_with_mlx_tb():
    assert ParseError is mlx_tb.ParseError


@pytest.mark.parametrize(
    "fixture, expected",
    [
        pytest.param("ibv_devices_header_only.txt", [], id="empty-header-only"),
        pytest.param("ibv_devices_no_devices_found.txt", [], id="empty-no-ib-devices-found"),
        pytest.param("ibv_devices_3.txt", ["rdma_en2", "rdma_en3", "rdma_en4"], id="three-devices"),
        pytest.param("ibv_devices_6.txt", [f"rdma_en{i}" for i in range(2, 8)], id="six-devices"),
    ],
)
def test_parse_ibv_devices(read_fixture, fixture, expected):
    assert parse_ibv_devices(read_fixture(fixture)) == expected


def test_parse_ibv_devices_rejects_an_error_text():
    assert parse_ibv_devices("") == []
    with pytest.raises(ParseError) as info:
        parse_ibv_devices("Failed to get IB devices list: Function not implemented\n")
    assert info.value.command == "ibv_devices"


# fixture -> [(name, port_state, ipv4 GIDs present, gids)]
DEVINFO_CASES = [
    pytest.param(
        "ibv_devinfo_v_mini_active_ipv4.txt",
        [
            ("rdma_en2", "PORT_ACTIVE", ["fe80::500f:3eff:fea1:9001", "::ffff:10.208.0.2"]),
            ("rdma_en3", "PORT_DOWN", ["fe80::500f:3eff:fea1:9005"]),
            ("rdma_en4", "PORT_DOWN", ["fe80::500f:3eff:fea1:9009"]),
        ],
        id="active-with-ipv4-gid-roce-suffix",
    ),
    pytest.param(
        "ibv_devinfo_v_mini_active_no_ipv4.txt",
        [
            ("rdma_en2", "PORT_ACTIVE", ["fe80::500f:3eff:fea1:9001"]),
            ("rdma_en3", "PORT_DOWN", ["fe80::500f:3eff:fea1:9005"]),
            ("rdma_en4", "PORT_DOWN", ["fe80::500f:3eff:fea1:9009"]),
        ],
        id="active-without-ipv4-gid",
    ),
    pytest.param(
        "ibv_devinfo_v_ultra_6_mixed.txt",
        [
            ("rdma_en2", "PORT_ACTIVE", ["fe80::803d:61ff:fec0:7b40", "::ffff:10.208.0.5", "::ffff:169.254.33.7"]),
            ("rdma_en3", "PORT_ACTIVE", ["fe80::803d:61ff:fec0:7b44", "::ffff:10.208.0.9"]),
            ("rdma_en4", "PORT_DOWN", ["fe80::803d:61ff:fec0:7b48"]),
            ("rdma_en5", "PORT_DOWN", ["fe80::803d:61ff:fec0:7b4c"]),  # all-zero GID[1] dropped
            ("rdma_en6", "PORT_DOWN", ["fe80::803d:61ff:fec0:7b50"]),
            ("rdma_en7", "PORT_DOWN", ["fe80::803d:61ff:fec0:7b54"]),
        ],
        id="six-devices-active-and-down",
    ),
    pytest.param("ibv_devinfo_no_devices_found.txt", [], id="no-devices"),
]


@pytest.mark.parametrize("fixture, expected", DEVINFO_CASES)
def test_parse_ibv_devinfo(read_fixture, fixture, expected):
    devices = parse_ibv_devinfo(read_fixture(fixture))
    assert [(d["name"], d["port_state"], d["gids"]) for d in devices] == expected
    for d in devices:
        assert d["active_mtu"] == 4096
        assert d["link_layer"] == "Thunderbolt"
        assert d["transport"] == "Thunderbolt (100)"


def test_parse_ibv_devinfo_multi_port_takes_first_port_state():
    text = (
        "hca_id:\tmlx5_0\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_DOWN (1)\n\t\t\tactive_mtu:\t\t1024 (3)\n"
        "\t\tport:\t2\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tactive_mtu:\t\t4096 (5)\n"
        "\t\t\tGID[  0]:\t\tfe80::1\n"
    )
    [dev] = parse_ibv_devinfo(text)
    assert (dev["port_state"], dev["active_mtu"], dev["gids"]) == ("PORT_DOWN", 1024, ["fe80::1"])


def test_parse_ibv_devinfo_rejects_text_before_any_device():
    with pytest.raises(ParseError) as info:
        parse_ibv_devinfo("Failed to get IB devices list: Operation not permitted\n")
    assert info.value.command == "ibv_devinfo -v"


@pytest.mark.parametrize(
    "gid, expected",
    [
        ("fe80:0000:0000:0000:500f:3eff:fea1:9001", "fe80::500f:3eff:fea1:9001"),
        ("fe80::347c:94ff:fecd:45c4", "fe80::347c:94ff:fecd:45c4"),
        ("0000:0000:0000:0000:0000:ffff:0ad0:0001", "::ffff:10.208.0.1"),
        ("::ffff:169.254.10.1", "::ffff:169.254.10.1"),
        ("0000:0000:0000:0000:0000:0000:0000:0000", None),
        ("zz::1", None),
    ],
)
def test_normalise_gid(gid, expected):
    assert normalise_gid(gid) == expected


@pytest.mark.parametrize("name, iface", [("rdma_en2", "en2"), ("rdma_en10", "en10"), ("mlx5_0", None), ("rdma_", None)])
def test_iface_of(name, iface):
    assert iface_of(name) == iface


@pytest.mark.parametrize(
    "text, expected",
    [
        pytest.param("enabled\n", "enabled", id="enabled"),
        pytest.param("disabled\n", "disabled", id="disabled"),
        pytest.param("RDMA is Enabled.\n", "enabled", id="sentence"),
        pytest.param("RDMA is not enabled\n", "disabled", id="not-enabled"),
    ],
)
def test_parse_rdma_ctl(text, expected):
    assert parse_rdma_ctl(text) == expected


@pytest.mark.parametrize(
    "fixture, expected", [("rdma_ctl_status_enabled.txt", "enabled"), ("rdma_ctl_status_disabled.txt", "disabled")]
)
def test_parse_rdma_ctl_fixtures(read_fixture, fixture, expected):
    assert parse_rdma_ctl(read_fixture(fixture)) == expected


@pytest.mark.parametrize("text", ["", "usage: rdma_ctl [enable|disable|status]\n", "enabled? disabled?"])
def test_parse_rdma_ctl_rejects_anything_else(text):
    with pytest.raises(ParseError) as info:
        parse_rdma_ctl(text)
    assert info.value.command == "rdma_ctl status"


# ------------------------------------------------------------------------- rdma_facts

# (devices fixture or None, devinfo fixture or None, rdma_ctl fixture or None, cabled)
#   -> (usable, [(problem code, iface)])
FACTS_CASES = [
    pytest.param(
        "ibv_devices_header_only.txt",
        "ibv_devinfo_no_devices_found.txt",
        "rdma_ctl_status_disabled.txt",
        [],
        False,
        [("rdma_disabled", None)],
        id="rdma-disabled",
    ),
    pytest.param(
        "ibv_devices_header_only.txt",
        "ibv_devinfo_no_devices_found.txt",
        "rdma_ctl_status_enabled.txt",
        [],
        False,
        [("no_devices", None)],
        id="enabled-but-no-devices",
    ),
    pytest.param(
        "ibv_devices_no_devices_found.txt", None, None, [], False, [("no_devices", None)], id="no-devices-no-rdma-ctl"
    ),
    pytest.param(None, None, None, [], False, [("no_devices", None)], id="ibv-tools-missing"),
    pytest.param(
        "ibv_devices_3.txt",
        "ibv_devinfo_v_mini_active_ipv4.txt",
        "rdma_ctl_status_enabled.txt",
        ["en2"],
        True,
        [],
        id="mini-ready",
    ),
    pytest.param(
        "ibv_devices_3.txt",
        "ibv_devinfo_v_mini_active_no_ipv4.txt",
        "rdma_ctl_status_enabled.txt",
        ["en2"],
        True,
        [("no_ipv4_gid", "en2")],
        id="mini-before-network-stage",
    ),
    pytest.param(
        "ibv_devices_3.txt",
        "ibv_devinfo_v_mini_active_ipv4.txt",
        "rdma_ctl_status_enabled.txt",
        ["en2", "en3"],
        True,
        [("port_down", "en3")],
        id="mini-cable-on-en3-down",
    ),
    pytest.param(
        "ibv_devices_6.txt",
        "ibv_devinfo_v_ultra_6_mixed.txt",
        "rdma_ctl_status_enabled.txt",
        ["en2", "en3", "en4"],
        True,
        [("port_down", "en4")],
        id="ultra-one-bad-cable",
    ),
    pytest.param(
        "ibv_devices_6.txt", "ibv_devinfo_v_ultra_6_mixed.txt", None, [], True, [], id="ultra-without-rdma-ctl"
    ),
    pytest.param(
        "ibv_devices_3.txt",
        None,
        "rdma_ctl_status_enabled.txt",
        ["en2"],
        True,
        [("port_down", "en2")],
        id="devinfo-not-read",
    ),
]


@pytest.mark.parametrize("devices, devinfo, ctl, cabled, usable, problems", FACTS_CASES)
def test_rdma_facts(read_fixture, devices, devinfo, ctl, cabled, usable, problems):
    def read(name):
        return read_fixture(name) if name else None

    facts = rdma_facts(read(devices), read(devinfo), read(ctl), cabled_ifaces=cabled)
    assert set(facts) == {"rdma_ctl", "devices", "usable", "problems"}
    assert facts["usable"] is usable
    assert [(p["code"], p["iface"]) for p in facts["problems"]] == problems
    assert all(set(p) == PROBLEM_KEYS and p["msg"] and p["fix"] for p in facts["problems"])
    assert all(set(d) == DEVICE_KEYS for d in facts["devices"])
    assert facts["rdma_ctl"] == (parse_rdma_ctl(read(ctl)) if ctl else None)


def test_rdma_facts_devices(read_fixture):
    facts = rdma_facts(
        read_fixture("ibv_devices_3.txt"),
        read_fixture("ibv_devinfo_v_mini_active_ipv4.txt"),
        read_fixture("rdma_ctl_status_enabled.txt"),
    )
    assert facts["devices"][0] == {
        "name": "rdma_en2",
        "iface": "en2",
        "port_state": "PORT_ACTIVE",
        "active_mtu": 4096,
        "ipv4_gid": True,
        "gids": ["fe80::500f:3eff:fea1:9001", "::ffff:10.208.0.2"],
    }
    assert [d["ipv4_gid"] for d in facts["devices"]] == [True, False, False]


def test_problem_texts_name_the_fix(read_fixture):
    def problem(devices, devinfo, ctl, cabled=()):
        def read(name):
            return read_fixture(name) if name else None

        return rdma_facts(read(devices), read(devinfo), read(ctl), list(cabled))["problems"][0]

    disabled = problem("ibv_devices_header_only.txt", None, "rdma_ctl_status_disabled.txt")
    assert disabled["fix"] == FIX_ENABLE
    assert "Recovery" in disabled["fix"] and "`rdma_ctl enable`" in disabled["fix"]
    no_devices = problem("ibv_devices_header_only.txt", None, "rdma_ctl_status_enabled.txt")
    assert "Thunderbolt 4 hardware (RDMA needs Thunderbolt 5)" in no_devices["msg"]
    assert "macOS older than 26.2" in no_devices["msg"]
    missing = problem(None, None, None)
    assert "ibv_devices is not installed" in missing["msg"]
    down = problem("ibv_devices_6.txt", "ibv_devinfo_v_ultra_6_mixed.txt", None, ["en4"])
    assert "check/reseat the cable on en4" in down["fix"] and "PORT_DOWN" in down["msg"]
    no_gid = problem("ibv_devices_3.txt", "ibv_devinfo_v_mini_active_no_ipv4.txt", None)
    assert "the interface has no IPv4 address yet" in no_gid["msg"] and "JACCL" in no_gid["msg"]
    assert "run the network stage" in no_gid["fix"]


def test_devices_are_sorted_naturally():
    facts = rdma_facts("rdma_en10\nrdma_en9\nrdma_en2\n", None)
    assert [d["name"] for d in facts["devices"]] == ["rdma_en2", "rdma_en9", "rdma_en10"]


def test_rdma_facts_propagates_parse_errors():
    with pytest.raises(ParseError) as info:
        rdma_facts("rdma_en2\n", None, "who knows")
    assert info.value.command == "rdma_ctl status"


@pytest.mark.parametrize(
    "version, settings_first",
    [("26.2", False), ("26.4.1", False), (None, False), ("", False), ("junk", False), ("27.0", True), ("28.1", True)],
)
def test_the_enable_fix_follows_the_macos_version(version, settings_first):
    from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rdma import RECOVERY_ENABLE, enable_fix

    fix = enable_fix(version)
    assert fix.endswith(RECOVERY_ENABLE)  # Recovery is always named
    assert ("System Settings" in fix and "unverified" in fix) is settings_first
