"""plugins/module_utils/mlx_tb.py on captured outputs (tests/fixtures)."""

from __future__ import annotations

import json

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils import mlx_tb
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_tb import (
    SP_COMMAND,
    link_class,
    netmask_prefix,
    parse_hardware_ports,
    parse_ifconfig,
    parse_service_order,
    parse_speed,
    parse_system_profiler,
    thunderbolt_facts,
)

PORT_KEYS = {
    "receptacle",
    "bus",
    "domain_uuid",
    "hardware_port",
    "iface",
    "status",
    "speed_gbps",
    "capability_gbps",
    "link_class",
    "peer",
    "devices",
}
PEER_KEYS = {"domain_uuid", "name", "model_id", "via"}
DEVICE_KEYS = {"name", "vendor", "depth", "kind"}
BRIDGE_KEYS = {"exists", "members", "service", "service_enabled"}

EMPTY = ("empty", None, 120, None)  # status, speed_gbps, capability_gbps, link_class
TB5 = ("connected", 80, None, "TB5")

# fixture -> {receptacle: ((status, speed, capability, class), peer (name, model_id, via) or None,
#                          [(device name, depth, kind), ...])}, number of warnings
SP_CASES = [
    pytest.param(
        "sp_direct_studio_a.json",
        {
            1: (TB5, ("Mac Studio", "Mac16,9", []), [("Mac Studio", 1, "mac")]),
            2: (EMPTY, None, []),
            3: (EMPTY, None, []),
            4: (EMPTY, None, []),
        },
        0,
        id="direct-cable-studio-a",
    ),
    pytest.param(
        "sp_direct_studio_b.json",
        {
            1: (EMPTY, None, []),
            2: (TB5, ("Mac Studio", "Mac16,9", []), [("Mac Studio", 1, "mac")]),
            3: (EMPTY, None, []),
            4: (EMPTY, None, []),
        },
        0,
        id="direct-cable-studio-b",
    ),
    pytest.param(
        "sp_peer_behind_dock_two_levels.json",
        {
            1: (EMPTY, None, []),
            2: (
                TB5,
                ("Mac Studio", "Mac16,9", ["CalDigit TS5 Plus", "OWC Thunderbolt 5 Hub"]),
                [
                    ("CalDigit TS5 Plus", 1, "hub"),
                    ("OWC Thunderbolt 5 Hub", 2, "hub"),
                    ("Mac Studio", 3, "mac"),
                    ("LaCie Rugged SSD Pro5", 2, "device"),
                ],
            ),
            3: (EMPTY, None, []),
        },
        0,
        id="peer-behind-dock-and-hub",
    ),
    pytest.param(
        "sp_tb4_beside_tb5.json",
        {
            1: (TB5, ("Mac Studio", "Mac16,9", []), [("Mac Studio", 1, "mac")]),
            2: (TB5, ("Mac Studio", "Mac16,9", []), [("Mac Studio", 1, "mac")]),
            3: (("connected", 40, None, "TB4"), ("Mac mini", "Mac16,10", []), [("Mac mini", 1, "mac")]),
            4: (EMPTY, None, []),
            5: (EMPTY, None, []),
            6: (EMPTY, None, []),
        },
        0,
        id="tb4-link-beside-tb5",
    ),
    pytest.param(
        "sp_empty_receptacles.json",
        {
            1: (EMPTY, None, []),
            2: (EMPTY, None, []),
            3: (EMPTY, None, []),
        },
        0,
        id="all-receptacles-empty-usb-only-bus-skipped",
    ),
    pytest.param(
        "sp_drive_not_peer.json",
        {
            1: (TB5, None, [("Envoy Ultra", 1, "device")]),
            2: (TB5, ("Mac Studio", "Mac16,9", []), [("Mac Studio", 1, "mac")]),
            3: (("connected", 40, None, "TB4"), None, [("Thunderbolt 3 Dock", 1, "device")]),
            4: (EMPTY, None, []),
        },
        0,
        id="drive-is-not-a-peer",
    ),
    pytest.param(
        "sp_two_cables_same_pair.json",
        {
            1: (TB5, ("Mac Studio", "Mac16,9", []), [("Mac Studio", 1, "mac")]),
            2: (TB5, ("Mac Studio", "Mac16,9", []), [("Mac Studio", 1, "mac")]),
            3: (EMPTY, None, []),
        },
        0,
        id="two-cables-same-pair",
    ),
    pytest.param(
        "sp_partial_data.json",
        {
            1: (EMPTY, None, []),
            2: (TB5, ("Mac Studio", "Mac16,9", []), [("Mac Studio", 1, "mac")]),
            3: (TB5, None, []),
        },
        3,
        id="partial-data-warns",
    ),
    pytest.param(
        "sp_no_domain_uuid.json",
        {
            1: (TB5, None, []),
            2: (("connected", 40, None, "TB4"), ("Mac mini", "Mac16,10", []), [("Mac mini", 1, "mac")]),
            3: (EMPTY, None, []),
        },
        3,
        id="no-domain-uuid-keeps-the-ports",
    ),
]


@pytest.mark.parametrize("fixture, expected, n_warnings", SP_CASES)
def test_parse_system_profiler(read_fixture, fixture, expected, n_warnings):
    facts = parse_system_profiler(read_fixture(fixture))
    assert set(facts) == {"mac", "ports", "warnings"}
    assert len(facts["warnings"]) == n_warnings, facts["warnings"]
    assert [p["receptacle"] for p in facts["ports"]] == sorted(expected)
    for port in facts["ports"]:
        link, peer, devices = expected[port["receptacle"]]
        assert set(port) == PORT_KEYS - {"iface"}
        assert (port["status"], port["speed_gbps"], port["capability_gbps"], port["link_class"]) == link
        assert port["hardware_port"] == f"Thunderbolt {port['receptacle']}"
        assert port["bus"].startswith("Thunderbolt/USB4 Bus ")
        assert [(d["name"], d["depth"], d["kind"]) for d in port["devices"]] == devices
        assert all(set(d) == DEVICE_KEYS for d in port["devices"])
        if peer is None:
            assert port["peer"] is None
        else:
            assert set(port["peer"]) == PEER_KEYS
            assert (port["peer"]["name"], port["peer"]["model_id"], port["peer"]["via"]) == peer
            assert port["peer"]["domain_uuid"] != port["domain_uuid"]


def test_direct_cable_is_seen_from_both_ends(read_fixture):
    a = parse_system_profiler(read_fixture("sp_direct_studio_a.json"))["ports"]
    b = parse_system_profiler(read_fixture("sp_direct_studio_b.json"))["ports"]
    a1 = next(p for p in a if p["receptacle"] == 1)
    b2 = next(p for p in b if p["receptacle"] == 2)
    assert a1["peer"]["domain_uuid"] == b2["domain_uuid"]
    assert b2["peer"]["domain_uuid"] == a1["domain_uuid"]


def test_two_cables_reach_two_different_peer_domains(read_fixture):
    ports = parse_system_profiler(read_fixture("sp_two_cables_same_pair.json"))["ports"]
    peers = [p["peer"]["domain_uuid"] for p in ports if p["peer"]]
    assert len(peers) == 2 and len(set(peers)) == 2


def test_peer_behind_dock_is_missed_by_a_first_level_walk(read_fixture):
    """The bug we fix: a first-level-only walk (what MLX's own parser does) finds no peer."""
    data = json.loads(read_fixture("sp_peer_behind_dock_two_levels.json"))
    bus = next(b for b in data["SPThunderboltDataType"] if b.get("_items"))
    assert not [i for i in bus["_items"] if "domain_uuid_key" in i]
    port = next(p for p in parse_system_profiler(json.dumps(data))["ports"] if p["peer"])
    assert port["peer"]["domain_uuid"] == "7CDDF486-CEB4-41B6-9F86-C79DBB004B21"


def test_mac_model(read_fixture):
    facts = parse_system_profiler(read_fixture("sp_peer_behind_dock_two_levels.json"))
    assert facts["mac"] == {"model": "Mac mini", "model_id": None, "name": "Mac mini"}


def test_partial_data_warnings_say_what_was_skipped(read_fixture):
    warnings = parse_system_profiler(read_fixture("sp_partial_data.json"))["warnings"]
    assert "has no receptacle_1_tag" in warnings[0]
    assert "_items is a str" in warnings[1]
    assert "an item of _items is a str" in warnings[2]


def test_a_bus_without_domain_uuid_key_is_still_a_port_with_a_warning(read_fixture):
    """Trimmed output (no domain_uuid_key anywhere) used to give zero ports and no word."""
    facts = parse_system_profiler(read_fixture("sp_no_domain_uuid.json"))
    assert [(p["receptacle"], p["domain_uuid"]) for p in facts["ports"]] == [(1, None), (2, None), (3, None)]
    assert len(facts["warnings"]) == 3
    for receptacle, warning in zip((1, 2, 3), facts["warnings"]):
        assert warning.startswith(
            f"receptacle {receptacle} (Thunderbolt/USB4 Bus {receptacle - 1}) has no domain_uuid_key"
        )
        assert "matched from the other Mac's side" in warning
    hwports = (
        "Hardware Port: Thunderbolt 1\nDevice: en2\n\nHardware Port: Thunderbolt 2\nDevice: en3\n"
        "\nHardware Port: Thunderbolt 3\nDevice: en4\n"
    )
    tb = thunderbolt_facts(read_fixture("sp_no_domain_uuid.json"), hwports)
    assert [(p["iface"], p["speed_gbps"], p["link_class"]) for p in tb["ports"]] == [
        ("en2", 80, "TB5"),
        ("en3", 40, "TB4"),
        ("en4", None, None),
    ]


def test_only_buses_without_a_port_give_zero_ports_and_say_so():
    data = {
        "SPThunderboltDataType": [
            {"_name": "thunderboltusb4_bus_0", "device_name_key": "Mac Studio"},
            {"_name": "thunderboltusb4_bus_1", "device_name_key": "Mac Studio"},
        ]
    }
    facts = parse_system_profiler(json.dumps(data))
    assert facts["ports"] == []
    assert facts["warnings"] == [
        "no Thunderbolt port in the output: 2 bus entries have neither "
        "domain_uuid_key nor receptacle_1_tag (partial output?); run "
        "`system_profiler SPThunderboltDataType -json` again"
    ]


def test_an_internal_bus_beside_real_ports_stays_silent(read_fixture):
    assert parse_system_profiler(read_fixture("sp_empty_receptacles.json"))["warnings"] == []


def _one_bus(**overrides):
    bus = {
        "_name": "thunderboltusb4_bus_0",
        "device_name_key": "Mac Studio",
        "domain_uuid_key": "11111111-2222-4333-8444-555555555555",
        "receptacle_1_tag": {
            "receptacle_id_key": "1",
            "receptacle_status_key": "receptacle_connected",
            "current_speed_key": "80 Gb/s",
        },
    }
    bus.update(overrides)
    return json.dumps({"SPThunderboltDataType": [bus]})


def test_receptacle_id_as_int_is_accepted():
    tag = {"receptacle_id_key": 2, "receptacle_status_key": "receptacle_connected", "current_speed_key": "80 Gb/s"}
    assert parse_system_profiler(_one_bus(receptacle_1_tag=tag))["ports"][0]["receptacle"] == 2


def test_bad_receptacle_id_skips_port_with_warning():
    tag = {"receptacle_id_key": "left", "receptacle_status_key": "receptacle_connected"}
    facts = parse_system_profiler(_one_bus(receptacle_1_tag=tag))
    assert facts["ports"] == [] and "receptacle_id_key" in facts["warnings"][0]


def test_unknown_status_is_guessed_with_warning():
    tag = {"receptacle_id_key": "1", "receptacle_status_key": "receptacle_sleeping"}
    facts = parse_system_profiler(_one_bus(receptacle_1_tag=tag))
    assert facts["ports"][0]["status"] == "empty"
    assert "receptacle_sleeping" in facts["warnings"][0]


def test_two_macs_behind_one_hub_takes_first_and_warns():
    macs = [{"_name": "Mac Studio", "domain_uuid_key": f"AAAAAAAA-0000-4000-8000-00000000000{i}"} for i in (1, 2)]
    facts = parse_system_profiler(_one_bus(_items=[{"_name": "Hub", "_items": macs}]))
    assert facts["ports"][0]["peer"]["domain_uuid"].endswith("1")
    assert facts["ports"][0]["peer"]["via"] == ["Hub"]
    assert "2 Macs behind one port" in facts["warnings"][0]


def test_non_utf8_bytes_are_replaced_with_a_warning():
    raw = _one_bus(_items=[{"_name": "Drive XYZ", "vendor_name_key": "ACME"}]).encode().replace(b"XYZ", b"\xff\xfe")
    facts = parse_system_profiler(raw)
    assert facts["ports"][0]["devices"][0]["name"] == "Drive \ufffd\ufffd"
    assert "not UTF-8" in facts["warnings"][0]


def test_surrogate_escaped_text_is_replaced():
    text = _one_bus(_items=[{"_name": "Drive \udcff"}])
    facts = parse_system_profiler(text)
    assert facts["ports"][0]["devices"][0]["name"] == "Drive \ufffd"


@pytest.mark.parametrize(
    "text, fragment",
    [
        pytest.param("", "empty output", id="empty"),
        pytest.param('{"SPThunderboltDataType": [', "not JSON", id="truncated"),
        pytest.param("[1, 2]", "not an object", id="top-level-list"),
        pytest.param('{"SPUSBDataType": []}', "no SPThunderboltDataType", id="missing-key"),
        pytest.param('{"SPThunderboltDataType": {}}', "not a list", id="buses-not-a-list"),
        pytest.param(None, "expected text", id="none"),
        pytest.param(42, "expected text", id="int"),
    ],
)
def test_system_profiler_parse_errors_name_the_command(text, fragment):
    with pytest.raises(ParseError) as info:
        parse_system_profiler(text)
    assert info.value.command == SP_COMMAND
    assert fragment in info.value.message
    assert str(info.value).startswith(SP_COMMAND)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("80 Gb/s", (80, False)),
        ("Up to 120 Gb/s", (120, True)),
        ("Up to 40 Gb/s", (40, True)),
        ("40 Gb/s", (40, False)),
        ("20 Gb/s", (20, False)),
        ("2.5 Gb/s", (2.5, False)),
        ("fast", (None, False)),
        (None, (None, False)),
        (80, (None, False)),
    ],
)
def test_parse_speed(text, expected):
    assert parse_speed(text) == expected


@pytest.mark.parametrize(
    "speed, expected", [(120, "TB5"), (80, "TB5"), (41, "TB5"), (40, "TB4"), (20, "TB3"), (10, "TB3"), (None, None)]
)
def test_link_class(speed, expected):
    assert link_class(speed) == expected


# ----------------------------------------------------------------------- networksetup

HWPORT_CASES = [
    pytest.param(
        "networksetup_hwports_studio_with_bridge.txt",
        {
            "Ethernet": "en0",
            "Thunderbolt Bridge": "bridge0",
            "Wi-Fi": "en1",
            "Thunderbolt 1": "en2",
            "Thunderbolt 2": "en3",
            "Thunderbolt 3": "en4",
            "Thunderbolt 4": "en5",
        },
        id="with-bridge",
    ),
    pytest.param(
        "networksetup_hwports_mini_without_bridge.txt",
        {"Ethernet": "en0", "Wi-Fi": "en1", "Thunderbolt 1": "en2", "Thunderbolt 2": "en3", "Thunderbolt 3": "en4"},
        id="without-bridge",
    ),
    pytest.param(
        "networksetup_hwports_ultra_missing_tb6.txt",
        {
            "Ethernet": "en0",
            "Thunderbolt Bridge": "bridge0",
            "Wi-Fi": "en1",
            "Thunderbolt 1": "en2",
            "Thunderbolt 2": "en3",
            "Thunderbolt 3": "en4",
            "Thunderbolt 4": "en5",
            "Thunderbolt 5": "en6",
            "Ethernet Adapter (en7)": "en7",
        },
        id="missing-tb6-and-vlan-section",
    ),
]


@pytest.mark.parametrize("fixture, expected", HWPORT_CASES)
def test_parse_hardware_ports(read_fixture, fixture, expected):
    assert parse_hardware_ports(read_fixture(fixture)) == expected


def test_hardware_ports_empty_and_garbage():
    assert parse_hardware_ports("") == {}
    with pytest.raises(ParseError) as info:
        parse_hardware_ports("networksetup: command not found\n")
    assert info.value.command == "networksetup -listallhardwareports"


@pytest.mark.parametrize(
    "fixture, bridge_enabled, n_services",
    [
        pytest.param("networksetup_order_bridge_enabled.txt", True, 4, id="bridge-enabled"),
        pytest.param("networksetup_order_bridge_disabled.txt", False, 5, id="bridge-disabled"),
    ],
)
def test_parse_service_order(read_fixture, fixture, bridge_enabled, n_services):
    services = parse_service_order(read_fixture(fixture))
    assert len(services) == n_services
    assert all(set(s) == {"name", "hardware_port", "device", "enabled"} for s in services)
    bridge = next(s for s in services if s["device"] == "bridge0")
    assert bridge == {
        "name": "Thunderbolt Bridge",
        "hardware_port": "Thunderbolt Bridge",
        "device": "bridge0",
        "enabled": bridge_enabled,
    }
    assert services[0] == {"name": "Ethernet", "hardware_port": "Ethernet", "device": "en0", "enabled": True}


def test_service_without_device(read_fixture):
    services = parse_service_order(read_fixture("networksetup_order_bridge_enabled.txt"))
    assert services[-1] == {
        "name": "Tailscale",
        "hardware_port": "io.tailscale.ipn.macsys",
        "device": None,
        "enabled": True,
    }


def test_service_order_garbage():
    assert parse_service_order("") == []
    with pytest.raises(ParseError) as info:
        parse_service_order("** Error: Unable to read preferences\n")
    assert info.value.command == "networksetup -listnetworkserviceorder"


# ----------------------------------------------------------------------------- ifconfig


def test_ifconfig_bridge_members(read_fixture):
    parsed = parse_ifconfig(read_fixture("ifconfig_bridge0_members.txt"))
    assert list(parsed) == ["bridge0"]
    assert parsed["bridge0"] == {
        "flags": ["UP", "BROADCAST", "SMART", "RUNNING", "SIMPLEX", "MULTICAST"],
        "up": True,
        "mtu": 1500,
        "ipv4": [],
        "members": ["en2", "en3"],
        "status": "active",
        "type": None,  # (plain ifconfig: -v says it)
    }


def test_ifconfig_bridge_down_without_members(read_fixture):
    bridge = parse_ifconfig(read_fixture("ifconfig_bridge0_no_members.txt"))["bridge0"]
    assert (bridge["up"], bridge["members"], bridge["status"]) == (False, [], "inactive")


def test_ifconfig_does_not_exist_is_a_parse_error(read_fixture):
    with pytest.raises(ParseError) as info:
        parse_ifconfig(read_fixture("ifconfig_bridge0_missing.txt"))
    assert info.value.command == "ifconfig"


def test_ifconfig_all(read_fixture):
    parsed = parse_ifconfig(read_fixture("ifconfig_all_studio.txt"))
    assert {"lo0", "en0", "en1", "en2", "en3", "bridge0", "utun0", "utun4", "stf0"} <= set(parsed)
    assert parsed["en0"]["ipv4"] == [{"address": "10.1.2.3", "prefix": 24}]
    assert parsed["en2"]["ipv4"] == [
        {"address": "10.208.0.1", "prefix": 30},
        {"address": "169.254.17.42", "prefix": 16},
    ]
    assert parsed["lo0"]["ipv4"] == [{"address": "127.0.0.1", "prefix": 8}] and parsed["lo0"]["mtu"] == 16384
    assert parsed["utun4"]["ipv4"] == [{"address": "100.101.7.12", "prefix": 32}]
    assert parsed["utun0"]["ipv4"] == []  # inet6 only
    assert parsed["stf0"]["flags"] == [] and parsed["stf0"]["up"] is False
    assert parsed["en1"]["status"] == "inactive" and parsed["en2"]["status"] == "active"
    assert parsed["bridge0"]["members"] == ["en3", "en4", "en5"]
    assert "PROMISC" in parsed["en3"]["flags"]


@pytest.mark.parametrize(
    "mask, prefix",
    [
        ("0xfffffffc", 30),
        ("0xffffff00", 24),
        ("0xffffffff", 32),
        ("0x00000000", 0),
        ("255.255.0.0", 16),
        ("0xff00ff00", None),
        ("0x1ffffffff", None),
        ("banana", None),
        ("1.2.3", None),
    ],
)
def test_netmask_prefix(mask, prefix):
    assert netmask_prefix(mask) == prefix


# ------------------------------------------------------------------- thunderbolt_facts


def test_thunderbolt_facts_direct_with_bridge(read_fixture):
    facts = thunderbolt_facts(
        read_fixture("sp_direct_studio_a.json"),
        read_fixture("networksetup_hwports_studio_with_bridge.txt"),
        read_fixture("ifconfig_bridge0_members.txt"),
        read_fixture("networksetup_order_bridge_enabled.txt"),
    )
    assert set(facts) == {"mac", "ports", "hardware_ports", "bridge", "warnings"}
    assert all(set(p) == PORT_KEYS for p in facts["ports"])
    assert [(p["hardware_port"], p["iface"]) for p in facts["ports"]] == [
        ("Thunderbolt 1", "en2"),
        ("Thunderbolt 2", "en3"),
        ("Thunderbolt 3", "en4"),
        ("Thunderbolt 4", "en5"),
    ]
    assert facts["bridge"] == {
        "exists": True,
        "members": ["en2", "en3"],
        "service": "Thunderbolt Bridge",
        "service_enabled": True,
    }
    assert facts["hardware_ports"]["Thunderbolt Bridge"] == "bridge0"
    assert facts["warnings"] == []


def test_thunderbolt_facts_no_bridge_service_disabled(read_fixture):
    facts = thunderbolt_facts(
        read_fixture("sp_peer_behind_dock_two_levels.json"),
        read_fixture("networksetup_hwports_mini_without_bridge.txt"),
        None,
        read_fixture("networksetup_order_bridge_disabled.txt"),
    )
    assert set(facts["bridge"]) == BRIDGE_KEYS
    assert facts["bridge"] == {
        "exists": False,
        "members": [],
        "service": "Thunderbolt Bridge",
        "service_enabled": False,
    }


def test_thunderbolt_facts_without_service_order(read_fixture):
    facts = thunderbolt_facts(
        read_fixture("sp_direct_studio_a.json"), read_fixture("networksetup_hwports_studio_with_bridge.txt")
    )
    assert facts["bridge"] == {"exists": False, "members": [], "service": "Thunderbolt Bridge", "service_enabled": None}


def test_thunderbolt_facts_no_bridge_anywhere(read_fixture):
    facts = thunderbolt_facts(
        read_fixture("sp_empty_receptacles.json"),
        read_fixture("networksetup_hwports_mini_without_bridge.txt"),
        None,
        "",
    )
    assert facts["bridge"] == {"exists": False, "members": [], "service": None, "service_enabled": None}


def test_missing_hardware_port_gives_null_iface_and_the_fix(read_fixture):
    facts = thunderbolt_facts(
        read_fixture("sp_tb4_beside_tb5.json"), read_fixture("networksetup_hwports_ultra_missing_tb6.txt")
    )
    port6 = next(p for p in facts["ports"] if p["receptacle"] == 6)
    assert port6["iface"] is None
    [warning] = facts["warnings"]
    assert "'Thunderbolt 6'" in warning and "networksetup -detectnewhardware" in warning


def test_model_id_is_filled_in_when_known(read_fixture):
    facts = thunderbolt_facts(
        read_fixture("sp_direct_studio_a.json"),
        read_fixture("networksetup_hwports_studio_with_bridge.txt"),
        model_id="Mac16,9",
    )
    assert facts["mac"] == {"model": "Mac Studio", "model_id": "Mac16,9", "name": "Mac Studio"}


def test_thunderbolt_facts_propagates_parse_errors(read_fixture):
    with pytest.raises(ParseError) as info:
        thunderbolt_facts(read_fixture("sp_direct_studio_a.json"), "garbage")
    assert info.value.command == mlx_tb.HWPORTS_COMMAND


def test_ifconfig_verbose_gives_each_interface_its_type(read_fixture):
    """`ifconfig -v` (as a public capture shows it: `index N` after the mtu, `type:` and many
    more lines): the same fields as plain ifconfig, and the type, ifconfig's own words."""
    parsed = parse_ifconfig(read_fixture("ifconfig_v_studio.txt"))
    assert {n: p["type"] for n, p in parsed.items()} == {
        "en0": "Ethernet",
        "bridge0": None,
        "en2": mlx_tb.THUNDERBOLT_TYPE,
        "en3": mlx_tb.THUNDERBOLT_TYPE,
    }
    assert parsed["en2"]["mtu"] == 1500 and parsed["en2"]["ipv4"] == [{"address": "10.208.0.1", "prefix": 30}]
    assert parsed["bridge0"]["members"] == ["en3"] and parsed["en3"]["status"] == "inactive"
    assert parse_ifconfig(read_fixture("ifconfig_all_studio.txt"))["en2"]["type"] is None  # plain: not said


def test_ports_named_in_another_language_are_found_by_their_type(read_fixture):
    """A Mac set up in Chinese names its ports "雷雳 N" (assumed: tests/simcluster/README.md):
    with `ifconfig -v`, receptacle N is the IP over Thunderbolt port whose name ends in N, and
    its hardware port is given as the Mac names it (the network stage's networksetup calls use
    it); without it, the port's interface is unknown, with the fix."""
    sp = read_fixture("sp_direct_studio_a.json")
    hwports = read_fixture("networksetup_hwports_studio_chinese.txt")
    interfaces = parse_ifconfig(read_fixture("ifconfig_v_studio.txt"))
    facts = thunderbolt_facts(sp, hwports, interfaces=interfaces)
    found = {p["receptacle"]: (p["hardware_port"], p["iface"]) for p in facts["ports"]}
    assert found[1] == ("雷雳 1", "en2") and found[2] == ("雷雳 2", "en3")
    assert found[3] == ("Thunderbolt 3", None) and found[4] == ("Thunderbolt 4", None)  # no such port listed
    assert len(facts["warnings"]) == 2
    blind = thunderbolt_facts(sp, hwports)
    assert all(p["iface"] is None for p in blind["ports"]) and len(blind["warnings"]) == 4
