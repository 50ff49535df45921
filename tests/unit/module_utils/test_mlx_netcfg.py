"""plan_links: what the network module would run, from measured state."""

from pathlib import Path

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils import mlx_netcfg
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_netcfg import (
    LinkPlanError,
    netmask,
    parse_getinfo,
    parse_route_get,
    plan_links,
    runtime_done,
)

HWPORTS = {
    "Ethernet": "en0",
    "Thunderbolt 1": "en2",
    "Thunderbolt 2": "en3",
    "Thunderbolt 3": "en4",
    "Thunderbolt Bridge": "bridge0",
}
FRESH_SERVICES = [
    {"name": "Ethernet", "hardware_port": "Ethernet", "device": "en0", "enabled": True},
    {"name": "Thunderbolt Bridge", "hardware_port": "Thunderbolt Bridge", "device": "bridge0", "enabled": True},
]
FRESH_IFACES = {
    "en0": {"ipv4": [{"address": "10.99.0.2", "prefix": 24}], "members": []},
    "en2": {"ipv4": [], "members": []},
    "en3": {"ipv4": [], "members": []},
    "bridge0": {"ipv4": [], "members": ["en2", "en3", "en4"]},
}
LINKS = [
    {"iface": "en2", "address": "10.208.0.1", "prefix": 30, "peer_address": "10.208.0.2"},
    {"iface": "en3", "address": "10.208.0.5", "prefix": 30, "peer_address": "10.208.0.6"},
]


def argvs(actions):
    return [a["argv"] for a in actions]


def converged_state():
    services = FRESH_SERVICES[:1] + [
        {"name": "Thunderbolt Bridge", "hardware_port": "Thunderbolt Bridge", "device": "bridge0", "enabled": False},
        {"name": "Thunderbolt 1", "hardware_port": "Thunderbolt 1", "device": "en2", "enabled": True},
        {"name": "Thunderbolt 2", "hardware_port": "Thunderbolt 2", "device": "en3", "enabled": True},
    ]
    ifaces = {
        "en0": FRESH_IFACES["en0"],
        "en2": {"ipv4": [{"address": "10.208.0.1", "prefix": 30}]},
        "en3": {"ipv4": [{"address": "10.208.0.5", "prefix": 30}]},
        "bridge0": {"ipv4": [], "members": ["en4"]},
    }
    info = {
        "Thunderbolt 1": {"method": "manual", "address": "10.208.0.1", "subnet": "255.255.255.252"},
        "Thunderbolt 2": {"method": "manual", "address": "10.208.0.5", "subnet": "255.255.255.252"},
    }
    routes = {
        "10.208.0.2": {"destination": "10.208.0.2", "interface": "en2", "flags": ["UP", "HOST", "DONE", "STATIC"]},
        "10.208.0.6": {"destination": "10.208.0.6", "interface": "en3", "flags": ["UP", "HOST", "DONE", "STATIC"]},
    }
    return services, ifaces, info, routes


def test_fresh_mac_gets_bridge_removal_services_addresses_and_routes():
    actions, warnings, before, after = plan_links(LINKS, HWPORTS, FRESH_SERVICES, FRESH_IFACES, {}, {})
    assert argvs(actions) == [
        ["ifconfig", "bridge0", "deletem", "en2", "deletem", "en3"],
        ["networksetup", "-setnetworkserviceenabled", "Thunderbolt Bridge", "off"],
        ["networksetup", "-createnetworkservice", "Thunderbolt 1", "Thunderbolt 1"],
        ["networksetup", "-setmanual", "Thunderbolt 1", "10.208.0.1", "255.255.255.252"],
        ["networksetup", "-createnetworkservice", "Thunderbolt 2", "Thunderbolt 2"],
        ["networksetup", "-setmanual", "Thunderbolt 2", "10.208.0.5", "255.255.255.252"],
        # runtime addresses after every networksetup change, then the routes
        ["ifconfig", "en2", "inet", "10.208.0.1", "netmask", "255.255.255.252"],
        ["ifconfig", "en3", "inet", "10.208.0.5", "netmask", "255.255.255.252"],
        ["route", "-n", "add", "-host", "10.208.0.2", "-interface", "en2"],
        ["route", "-n", "add", "-host", "10.208.0.6", "-interface", "en3"],
    ]
    assert [a.get("runtime", {}).get("op") for a in actions] == [None] * 6 + ["set", "set", None, None]
    assert warnings == []
    assert before["en2"]["runtime"] == [] and after["en2"]["runtime"] == ["10.208.0.1/30"]
    assert after["bridge"]["members"] == ["en4"]


def test_converged_mac_needs_nothing():
    services, ifaces, info, routes = converged_state()
    actions, warnings, _, _ = plan_links(LINKS, HWPORTS, services, ifaces, info, routes)
    assert actions == [] and warnings == []


def test_stale_address_is_removed_and_persistent_config_rewritten():
    services, ifaces, info, routes = converged_state()
    ifaces["en2"] = {"ipv4": [{"address": "10.208.9.1", "prefix": 30}]}
    info["Thunderbolt 1"] = {"method": "manual", "address": "10.208.9.1", "subnet": "255.255.255.252"}
    actions, _, _, _ = plan_links(LINKS, HWPORTS, services, ifaces, info, routes)
    assert argvs(actions) == [
        ["networksetup", "-setmanual", "Thunderbolt 1", "10.208.0.1", "255.255.255.252"],
        ["ifconfig", "en2", "inet", "10.208.9.1", "delete"],
        ["ifconfig", "en2", "inet", "10.208.0.1", "netmask", "255.255.255.252"],
    ]


def test_disabled_service_is_enabled_and_wrong_route_changed():
    services, ifaces, info, routes = converged_state()
    services[2]["enabled"] = False
    routes["10.208.0.2"] = {"destination": "10.208.0.2", "interface": "en0", "flags": ["UP", "HOST", "DONE"]}
    actions, _, _, _ = plan_links(LINKS, HWPORTS, services, ifaces, info, routes)
    assert argvs(actions) == [
        ["networksetup", "-setnetworkserviceenabled", "Thunderbolt 1", "on"],
        ["route", "-n", "change", "-host", "10.208.0.2", "-interface", "en2"],
    ]


def test_management_interface_is_refused():
    with pytest.raises(LinkPlanError, match="en0: it is the management interface"):
        plan_links(
            [{"iface": "en0", "address": "10.208.0.1", "peer_address": "10.208.0.2"}],
            HWPORTS,
            FRESH_SERVICES,
            FRESH_IFACES,
            {},
            {},
            protected=["en0"],
        )


def test_non_thunderbolt_interface_is_refused_even_when_not_protected():
    with pytest.raises(LinkPlanError, match="en0: it is not a Thunderbolt port \\(hardware port 'Ethernet'\\)"):
        plan_links(
            [{"iface": "en0", "address": "10.208.0.1", "peer_address": "10.208.0.2"}],
            HWPORTS,
            FRESH_SERVICES,
            FRESH_IFACES,
            {},
            {},
        )
    with pytest.raises(LinkPlanError, match="en9: it is not a Thunderbolt port \\(no hardware port\\)"):
        plan_links(
            [{"iface": "en9", "address": "10.208.0.1", "peer_address": "10.208.0.2"}],
            HWPORTS,
            FRESH_SERVICES,
            FRESH_IFACES,
            {},
            {},
        )


@pytest.mark.parametrize("name", ["Thunderbolt-Brücke", "Pont Thunderbolt", "Thunderbolt ブリッジ"])
def test_the_bridge_service_is_found_by_its_device_in_any_language(name):
    """A Mac set up in German, French or Japanese: macOS named the bridge's port and service in
    that language; the service of bridge0 is disabled under its own name."""
    hwports = {k if k != "Thunderbolt Bridge" else name: v for k, v in HWPORTS.items()}
    services = FRESH_SERVICES[:1] + [dict(FRESH_SERVICES[1], name=name, hardware_port=name)]
    actions, _, before, _ = plan_links(LINKS, hwports, services, FRESH_IFACES, {}, {})
    assert ["networksetup", "-setnetworkserviceenabled", name, "off"] in argvs(actions)
    assert before["bridge"]["service_enabled"] is True
    # a name given picks that service, not the device's
    named, _, _, _ = plan_links(LINKS, hwports, services, FRESH_IFACES, {}, {}, bridge_service="Thunderbolt Bridge")
    assert not any("-setnetworkserviceenabled" in a and "off" in a for a in argvs(named))


def test_bridge_with_foreign_member_is_never_disabled():
    ifaces = dict(FRESH_IFACES, bridge0={"ipv4": [], "members": ["en2", "en0"]})
    actions, warnings, _, after = plan_links(LINKS[:1], HWPORTS, FRESH_SERVICES, ifaces, {}, {}, host_routes=False)
    assert ["ifconfig", "bridge0", "deletem", "en2"] in argvs(actions)
    assert not any("en0" in a for a in argvs(actions))  # also not batched with en2
    assert not any("-setnetworkserviceenabled" in a for a in argvs(actions))
    assert warnings and "en0" in warnings[0]
    assert after["bridge"]["service_enabled"] is True


def test_parse_getinfo_and_route_get():
    assert parse_getinfo(
        "Manual Configuration\nIP address: 10.208.0.1\nSubnet mask: 255.255.255.252\n"
        "Router: (null)\nEthernet Address: 36:aa:bb:cc:dd:01\n"
    ) == {"method": "manual", "address": "10.208.0.1", "subnet": "255.255.255.252", "router": None}
    assert parse_getinfo("DHCP Configuration\nIP address: none\n")["method"] == "dhcp"
    r = parse_route_get(
        "   route to: 10.208.0.2\ndestination: 10.208.0.2\n  interface: en2\n      flags: <UP,HOST,DONE,STATIC>\n"
    )
    assert r == {
        "destination": "10.208.0.2",
        "interface": "en2",
        "gateway": None,
        "flags": ["UP", "HOST", "DONE", "STATIC"],
    }
    assert parse_route_get("route: writing to routing socket: not in table")["interface"] is None
    assert netmask(30) == "255.255.255.252"


def test_runtime_done_tells_what_networksetup_already_applied():
    actions, _, _, _ = plan_links(
        LINKS[:1],
        HWPORTS,
        FRESH_SERVICES,
        dict(FRESH_IFACES, en2={"ipv4": [{"address": "10.208.9.1", "prefix": 30}]}),
        {},
        {},
    )
    delete, add = [a for a in actions if a.get("runtime")]
    assert delete["runtime"]["op"] == "delete" and add["runtime"]["op"] == "set"
    applied = {"en2": {"ipv4": [{"address": "10.208.0.1", "prefix": 30}]}}  # what macOS did on -setmanual
    assert runtime_done(add, applied) and runtime_done(delete, applied)
    untouched = {"en2": {"ipv4": [{"address": "10.208.9.1", "prefix": 30}]}}
    assert not runtime_done(add, untouched) and not runtime_done(delete, untouched)
    assert not runtime_done(add, {"en2": {"ipv4": [{"address": "10.208.0.1", "prefix": 24}]}})  # wrong prefix
    assert not runtime_done(actions[0], applied)  # not a runtime action


def test_old_end_of_a_moved_cable_loses_its_address_and_manual_service():
    from ansible_collections.mlx.cluster.plugins.module_utils.mlx_netcfg import stale_ports

    services, ifaces, info, routes = converged_state()
    # en4: the old end of a cable moved away; no carrier, still 10.208.0.9/30 (runtime and
    # persistent). en0 holds a LAN address, en3 carries a planned cable: never touched.
    services.append({"name": "Thunderbolt 3", "hardware_port": "Thunderbolt 3", "device": "en4", "enabled": True})
    ifaces["en4"] = {"ipv4": [{"address": "10.208.0.9", "prefix": 30}], "status": "inactive"}
    info["Thunderbolt 3"] = {"method": "manual", "address": "10.208.0.9", "subnet": "255.255.255.252"}
    stale = stale_ports(LINKS, HWPORTS, ifaces, "10.208.0.0/16", protected=["en0"])
    assert stale == {"en4": ["10.208.0.9"]}
    actions, _, before, after = plan_links(LINKS, HWPORTS, services, ifaces, info, routes, stale=stale)
    assert argvs(actions) == [
        ["networksetup", "-setdhcp", "Thunderbolt 3"],
        ["ifconfig", "en4", "inet", "10.208.0.9", "delete"],
    ]
    assert actions[1]["runtime"] == {"iface": "en4", "op": "delete", "address": "10.208.0.9"}
    assert before["en4"]["persistent"] == "10.208.0.9/255.255.255.252" and after["en4"]["persistent"] == "dhcp"
    # a port with a cable (carrier), an address outside the pool, or no pool: left alone
    ifaces["en4"]["status"] = "active"
    assert stale_ports(LINKS, HWPORTS, ifaces, "10.208.0.0/16") == {}
    ifaces["en4"] = {"ipv4": [{"address": "192.168.7.9", "prefix": 30}], "status": "inactive"}
    assert stale_ports(LINKS, HWPORTS, ifaces, "10.208.0.0/16") == {}
    assert stale_ports(LINKS, HWPORTS, ifaces, None) == {}
    # a protected interface is never stale, whatever it holds
    hw = dict(HWPORTS, **{"Thunderbolt 4": "en5"})
    ifaces["en5"] = {"ipv4": [{"address": "10.208.0.13", "prefix": 30}], "status": "inactive"}
    assert stale_ports(LINKS, hw, ifaces, "10.208.0.0/16", protected=["en5"]) == {}


def test_stale_port_whose_service_was_changed_by_hand_keeps_its_service():
    services, ifaces, info, routes = converged_state()
    services.append({"name": "Thunderbolt 3", "hardware_port": "Thunderbolt 3", "device": "en4", "enabled": True})
    info["Thunderbolt 3"] = {"method": "manual", "address": "10.208.0.77", "subnet": "255.255.255.252"}
    actions, _, _, _ = plan_links(LINKS, HWPORTS, services, ifaces, info, routes, stale={"en4": ["10.208.0.9"]})
    assert argvs(actions) == [["ifconfig", "en4", "inet", "10.208.0.9", "delete"]]


@pytest.mark.parametrize(
    "address,prefix,pings",
    [
        ("10.208.0.1", 30, True),
        ("10.208.0.2", 30, False),
        ("10.208.3.253", 30, True),
        ("10.208.3.254", 30, False),
        ("10.208.0.1", 24, False),
        ("10.208.0.0", 30, False),
        ("not-an-ip", 30, False),
        (None, 30, False),
    ],
)
def test_one_end_of_a_slash30_pings_it(address, prefix, pings):
    assert mlx_netcfg.pings_from_here(address, prefix) is pings


def test_netstat_gives_the_host_routes_route_get_would_answer(read_fixture):
    routes = mlx_netcfg.parse_netstat_routes(read_fixture("netstat_rn_inet_cluster.txt"))
    # the static host route wins over its scoped ARP entry
    assert routes["10.208.0.2"] == {
        "destination": "10.208.0.2",
        "interface": "en2",
        "gateway": "link#14",
        "flags": ["UP", "HOST", "STATIC"],
    }
    # scoped entries (ARP on en3, a UHSI route) serve no unscoped lookup: no host route there
    assert "10.208.0.6" not in routes and "10.208.9.14" not in routes
    assert routes["10.208.7.10"]["interface"] == "en3"  # the mis-pointed one, as it is
    assert "10.1.2.57" not in routes and "10.1.2.1" not in routes  # ARP entries are scoped (I) too
    assert routes["127.0.0.1"]["flags"] == ["UP", "HOST"]
    assert not any("/" in d or d in ("default", "127", "169.254") for d in routes)  # networks are not host routes
    assert mlx_netcfg.route_of(routes, "10.208.0.6") == {
        "destination": None,
        "interface": None,
        "gateway": None,
        "flags": [],
    }


def test_netstat_before_macos_11_3_and_the_ipv6_table(read_fixture):
    routes = mlx_netcfg.parse_netstat_routes(read_fixture("netstat_rn_before_11_3.txt"))
    assert routes["10.208.0.2"]["interface"] == "en2" and routes["127.0.0.1"]["interface"] == "lo0"
    assert set(routes) == {"10.208.0.2", "127.0.0.1"}  # the ARP entry is scoped; IPv6 is not read


def test_netstat_routes_drive_plan_links_like_route_get(read_fixture):
    routes = mlx_netcfg.parse_netstat_routes(read_fixture("netstat_rn_inet_cluster.txt"))
    links = [
        {"iface": "en2", "address": "10.208.0.1", "prefix": 30, "peer_address": "10.208.0.2"},
        {"iface": "en3", "address": "10.208.0.5", "prefix": 30, "peer_address": "10.208.0.6"},
        {"iface": "en4", "address": "10.208.7.9", "prefix": 30, "peer_address": "10.208.7.10"},
    ]
    hw = {"Ethernet": "en0", "Thunderbolt 1": "en2", "Thunderbolt 2": "en3", "Thunderbolt 3": "en4"}
    services = [
        {"name": f"Thunderbolt {n}", "hardware_port": f"Thunderbolt {n}", "device": d, "enabled": True}
        for n, d in ((1, "en2"), (2, "en3"), (3, "en4"))
    ]
    info = {
        s["name"]: {"method": "manual", "address": lk["address"], "subnet": "255.255.255.252"}
        for s, lk in zip(services, links)
    }
    ifaces = {lk["iface"]: {"ipv4": [{"address": lk["address"], "prefix": 30}], "members": []} for lk in links}
    actions, *_ = plan_links(
        links,
        hw,
        services,
        ifaces,
        info,
        {lk["peer_address"]: mlx_netcfg.route_of(routes, lk["peer_address"]) for lk in links},
    )
    assert [a["argv"] for a in actions] == [
        ["route", "-n", "add", "-host", "10.208.0.6", "-interface", "en3"],
        ["route", "-n", "change", "-host", "10.208.7.10", "-interface", "en4"],
    ]


@pytest.mark.parametrize(
    "text",
    ["", "netstat: sysctl: net.route.0.0.dump.inet: Operation not permitted\n", "Routing tables\n\nInternet:\n", None],
)
def test_netstat_without_a_table_is_a_parse_error(text):
    with pytest.raises(mlx_netcfg.ParseError):
        mlx_netcfg.parse_netstat_routes(text)


LISTED = [
    {"name": "Ethernet", "device": "en0"},
    {"name": "Thunderbolt Bridge", "device": "bridge0"},
    {"name": "Thunderbolt 1", "device": "en2"},
    {"name": "Thunderbolt 2", "device": "en3"},
    {"name": "Thunderbolt 3", "device": "en4"},
]


def fixture_bytes(name):
    return (Path(__file__).resolve().parents[2] / "fixtures" / name).read_bytes()


def test_services_from_the_preferences_answer_like_getinfo():
    got = mlx_netcfg.services_from_preferences(fixture_bytes("sc_preferences_studio.plist"), LISTED)
    # only the current set counts: the "Office" location's Thunderbolt 1 (192.168.0.1) is not it
    assert got["Thunderbolt 1"] == parse_getinfo(
        "Manual Configuration\nIP address: 10.208.0.1\nSubnet mask: 255.255.255.252\nRouter: (null)\n"
    )
    assert got["Ethernet"] == {
        "method": "manual",
        "address": "10.1.2.3",
        "subnet": "255.255.255.0",
        "router": "10.1.2.1",
    }  # no service name of its own: the interface's
    assert got["Thunderbolt 2"]["method"] == "dhcp" and got["Thunderbolt Bridge"]["method"] == "dhcp"
    assert "Thunderbolt 3" not in got  # no service on en4: left to networksetup


def test_anything_unexpected_in_the_preferences_is_left_to_networksetup():
    import plistlib

    prefs = plistlib.loads(fixture_bytes("sc_preferences_studio.plist"))
    renamed = [dict(s, name="TB one") if s["device"] == "en2" else s for s in LISTED]
    assert "TB one" not in mlx_netcfg.services_from_preferences(plistlib.dumps(prefs), renamed)
    current = prefs["CurrentSet"].rsplit("/", 1)[-1]
    # two services of the current set on one device: which one networksetup means is not ours to guess
    office_tb1 = next(
        k for k, v in prefs["NetworkServices"].items() if (v.get("IPv4") or {}).get("Addresses") == ["192.168.0.1"]
    )
    prefs["Sets"][current]["Network"]["Service"][office_tb1] = {"__LINK__": f"/NetworkServices/{office_tb1}"}
    got = mlx_netcfg.services_from_preferences(plistlib.dumps(prefs), LISTED)
    assert "Thunderbolt 1" not in got and got["Thunderbolt 2"]["method"] == "dhcp"
    for bad in (
        b"",
        b"not a plist",
        plistlib.dumps({"CurrentSet": "/Sets/none"}),
        plistlib.dumps([1, 2]),
        plistlib.dumps({"CurrentSet": 5}),
        plistlib.dumps(prefs, fmt=plistlib.FMT_BINARY)[:40],
    ):
        assert mlx_netcfg.services_from_preferences(bad, LISTED) == {}
    # binary property lists (as macOS may write them) read the same
    assert mlx_netcfg.services_from_preferences(plistlib.dumps(prefs, fmt=plistlib.FMT_BINARY), LISTED) == got


@pytest.mark.parametrize(
    "address,prefix,partner",
    [
        ("10.208.0.1", 30, "10.208.0.2"),
        ("10.208.0.2", 30, "10.208.0.1"),
        ("10.208.3.253", 30, "10.208.3.254"),
        ("10.208.0.0", 30, None),
        ("10.208.0.3", 30, None),
        ("10.208.0.1", 24, None),
        ("x", 30, None),
        (None, 30, None),
    ],
)
def test_the_other_end_of_a_slash30(address, prefix, partner):
    assert mlx_netcfg.slash30_partner(address, prefix) == partner


# ---- the Thunderbolt Bridge's definition: what macOS rebuilds it from at every boot ----


def prefs_with(bridges):
    import plistlib

    return plistlib.dumps({"VirtualNetworkInterfaces": {"Bridge": bridges}} if bridges is not None else {})


def test_the_bridge_definition_is_read_from_the_preferences(read_fixture):
    fixture = (Path(__file__).resolve().parents[2] / "fixtures" / "sc_preferences_studio.plist").read_bytes()
    assert mlx_netcfg.bridges_from_preferences(fixture) == {
        "bridge0": {"members": ["en3", "en4", "en5"], "allow_configured": False}
    }
    # the auto-created Thunderbolt Bridge (Options.__AUTO__), one that allows configured members
    auto = prefs_with(
        {
            "bridge0": {"Interfaces": ["en2"], "Options": {"__AUTO__": "thunderbolt-bridge"}},
            "bridge1": {"Interfaces": [], "Options": {"AllowConfiguredMembers": True}},
        }
    )
    assert mlx_netcfg.bridges_from_preferences(auto) == {
        "bridge0": {"members": ["en2"], "allow_configured": False},
        "bridge1": {"members": [], "allow_configured": True},
    }
    # no bridge defined at all (deleted by hand): nothing comes back at boot
    assert mlx_netcfg.bridges_from_preferences(prefs_with(None)) == {}


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"not a plist", id="garbage"),
        pytest.param(prefs_with({"bridge0": {"Interfaces": "en2"}}), id="members-not-a-list"),
        pytest.param(prefs_with({"bridge0": {"Interfaces": ["en2", 3]}}), id="member-not-a-name"),
        pytest.param(prefs_with({"bridge0": ["en2"]}), id="definition-not-a-dict"),
        pytest.param(prefs_with({"bridge0": {"Interfaces": [], "Options": "x"}}), id="options-not-a-dict"),
    ],
)
def test_a_definition_that_cannot_be_read_is_unknown_not_empty(data):
    assert mlx_netcfg.bridges_from_preferences(data) is None


def test_planned_ports_leave_the_definition_after_the_runtime_bridge_and_before_any_service():
    # a fresh Mac: the ports are in bridge0 now and in its definition (configd rebuilt it at
    # boot); creating a service for a port still in the definition fails on macOS
    actions, warnings, before, after = plan_links(
        LINKS, HWPORTS, FRESH_SERVICES, FRESH_IFACES, {}, {}, persistent={"members": ["en2", "en3", "en4"]}
    )
    assert argvs(actions)[:4] == [
        ["ifconfig", "bridge0", "deletem", "en2", "deletem", "en3"],
        ["scutil", "--prefs"],
        ["networksetup", "-setnetworkserviceenabled", "Thunderbolt Bridge", "off"],
        ["networksetup", "-createnetworkservice", "Thunderbolt 1", "Thunderbolt 1"],
    ]
    scutil = actions[1]
    assert scutil["stdin"] == (
        "lock\nget /VirtualNetworkInterfaces/Bridge/bridge0\nd.add Interfaces * en4\n"
        "set /VirtualNetworkInterfaces/Bridge/bridge0\ncommit\napply\nunlock\nquit\n"
    )
    assert scutil["persistent"] == {"bridge": "bridge0", "members": ["en4"], "removed": ["en2", "en3"]}
    assert warnings == []
    assert before["bridge"]["persistent_members"] == ["en2", "en3", "en4"]
    assert after["bridge"]["persistent_members"] == ["en4"]


def test_every_member_out_leaves_an_empty_definition():
    actions, _, _, after = plan_links(
        LINKS, HWPORTS, FRESH_SERVICES, FRESH_IFACES, {}, {}, persistent={"members": ["en2", "en3"]}
    )
    assert "d.add Interfaces * \n" in next(a["stdin"] for a in actions if a["argv"][0] == "scutil")
    assert after["bridge"]["persistent_members"] == []


@pytest.mark.parametrize(
    "persistent",
    [
        pytest.param({"members": ["en4"]}, id="definition-without-the-ports"),
        pytest.param({}, id="no-bridge-defined"),
        pytest.param(None, id="not-known"),
    ],
)
def test_a_definition_without_the_planned_ports_is_left_alone(persistent):
    services, ifaces, info, routes = converged_state()
    actions, warnings, before, after = plan_links(LINKS, HWPORTS, services, ifaces, info, routes, persistent=persistent)
    assert actions == [] and warnings == []
    assert before["bridge"]["persistent_members"] == after["bridge"]["persistent_members"]


def test_a_converged_mac_whose_definition_would_bring_a_port_back_is_not_in_place():
    # runtime state converged (ifconfig deletem only, service off), but at the next boot
    # configd puts en2 back into bridge0: the one change is to the definition
    services, ifaces, info, routes = converged_state()
    actions, _, _, _ = plan_links(
        LINKS, HWPORTS, services, ifaces, info, routes, persistent={"members": ["en2", "en4"]}
    )
    assert argvs(actions) == [["scutil", "--prefs"]]
    assert actions[0]["persistent"]["members"] == ["en4"]


def test_a_definition_with_a_non_thunderbolt_member_is_never_edited():
    actions, warnings, _, after = plan_links(
        LINKS[:1],
        HWPORTS,
        FRESH_SERVICES,
        FRESH_IFACES,
        {},
        {},
        host_routes=False,
        persistent={"members": ["en2", "en7"]},
    )
    assert ["scutil", "--prefs"] not in argvs(actions)
    assert any("en7" in w and "after a reboot en2 are bridged again" in w for w in warnings)
    assert after["bridge"]["persistent_members"] == ["en2", "en7"]


@pytest.mark.parametrize(
    "protected, ifaces, persistent",
    [
        pytest.param(["bridge0"], FRESH_IFACES, {"members": ["en2"]}, id="ansible-over-the-bridge"),
        pytest.param(
            ["en0"],
            dict(FRESH_IFACES, bridge0={"ipv4": [], "members": ["en2", "en0"]}),
            None,
            id="management-port-bridged-now",
        ),
        pytest.param(
            ["en0"],
            dict(FRESH_IFACES, bridge0={"ipv4": [], "members": []}),
            {"members": ["en2", "en0"]},
            id="management-port-in-the-definition",
        ),
    ],
)
def test_a_bridge_carrying_the_management_interface_is_refused(protected, ifaces, persistent):
    with pytest.raises(LinkPlanError, match="refusing to take en2 out of bridge0: it carries the management"):
        plan_links(LINKS[:1], HWPORTS, FRESH_SERVICES, ifaces, {}, {}, protected=protected, persistent=persistent)


def test_the_definition_editor_takes_interface_names_only():
    with pytest.raises(LinkPlanError, match="not an interface name"):
        mlx_netcfg.bridge_members_action("bridge0", ["en4\ncommit"], ["en2"])
