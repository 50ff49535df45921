"""library/thunderbolt_links.py: main() with get_bin_path/run_command mocked (studio fixtures:
en2 has carrier, en3 has none and sits in bridge0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.modules.mac_commands import BINS, HWPORTS, IFCONFIG, NETSTAT, ORDER

PING = "/sbin/ping"
NS, IFC, ROUTE = BINS["networksetup"], BINS["ifconfig"], BINS["route"]
EN2 = {
    "cable": "m1:en2~m2:en2",
    "iface": "en2",
    "address": "10.208.0.1",
    "peer_address": "10.208.0.2",
    "peer_host": "m2",
    "peer_iface": "en2",
}
EN3 = {
    "cable": "m1:en3~m3:en2",
    "iface": "en3",
    "address": "10.208.0.5",
    "peer_address": "10.208.0.6",
    "peer_host": "m3",
    "peer_iface": "en2",
}
# m0 sorts first: the peer's end starts the cable id, so the peer pings this one
EN4 = {
    "cable": "m0:en2~m1:en4",
    "iface": "en4",
    "address": "10.208.0.10",
    "peer_address": "10.208.0.9",
    "peer_host": "m0",
    "peer_iface": "en2",
}
# the routing table before the network stage: no host route to any peer
NO_HOST_ROUTES = (
    0,
    "Routing tables\n\nInternet:\nDestination        Gateway            Flags               Netif Expire\n"
    "default            10.1.2.1           UGScg                 en0       \n"
    "10.1.2/24          link#11            UCS                   en0      !\n",
    "",
)


class Answers(dict):
    """argv -> answer; a list answers successive runs of the same argv (the last one repeats)."""

    def __getitem__(self, key):
        value = dict.__getitem__(self, key)
        if isinstance(value, list):
            return value.pop(0) if len(value) > 1 else value[0]
        return value


def ping(link):
    return (PING, "-q", "-o", "-c", "2", "-t", "3", "-S", link["address"], link["peer_address"])


def en2_block(read_fixture, status="active"):
    """`ifconfig en2` as macOS prints it (the en2 block of the studio fixture)."""
    text = read_fixture("ifconfig_all_studio.txt")
    block = text[text.index("en2: flags") : text.index("en3: flags")]
    return block.replace("status: active", f"status: {status}")


def commands(read_fixture, links, pings, carrier=None):
    table = Answers(
        {
            HWPORTS: (0, read_fixture("networksetup_hwports_studio_with_bridge.txt"), ""),
            ORDER: (0, read_fixture("networksetup_order_bridge_enabled.txt"), ""),
            # the second ifconfig (after networksetup) shows en3 with the address -setmanual applied
            IFCONFIG: [
                (0, read_fixture("ifconfig_all_studio.txt"), ""),
                (
                    0,
                    read_fixture("ifconfig_all_studio.txt").replace(
                        "\tether 36:b4:7a:19:c0:44\n",
                        "\tether 36:b4:7a:19:c0:44\n\tinet 10.208.0.5 netmask 0xfffffffc broadcast 10.208.0.7\n",
                    ),
                    "",
                ),
            ],
            (
                IFC,
                "bridge0",
                *[w for x in links if x["iface"] in ("en3", "en4", "en5") for w in ("deletem", x["iface"])],
            ): (0, "", ""),
            (NS, "-setnetworkserviceenabled", "Thunderbolt Bridge", "off"): (0, "", ""),
            (IFC, "en2", "inet", "169.254.17.42", "delete"): (0, "", ""),  # en2's stale link-local address
            NETSTAT: NO_HOST_ROUTES,
        }
    )
    for link in links:
        n = int(link["iface"][2:]) - 1
        mask = "255.255.255.252"
        table[(NS, "-createnetworkservice", f"Thunderbolt {n}", f"Thunderbolt {n}")] = (0, "", "")
        table[(NS, "-setmanual", f"Thunderbolt {n}", link["address"], mask)] = (0, "", "")
        table[(IFC, link["iface"], "inet", link["address"], "netmask", mask)] = (0, "", "")
        table[(ROUTE, "-n", "add", "-host", link["peer_address"], "-interface", link["iface"])] = (0, "", "")
    for link, codes in pings:
        table[ping(link)] = [(rc, "", "") for rc in codes]
    # the carrier looked at while a cable with carrier stays silent (en2 only in these tests)
    table[(IFC, "en2")] = [(0, en2_block(read_fixture, st), "") for st in (carrier or ["active"])]
    return table


def run(module_runner, read_fixture, links, pings, check=False, carrier=None, **args):
    module_args = {"links": links, "protected_ifaces": ["en0"], "verify": True, **args}
    if check:
        module_args["_ansible_check_mode"] = True
    by_iface = {x["iface"]: x for x in links}
    return module_runner(
        "thunderbolt_links",
        args=module_args,
        bins=dict(BINS, ping=PING),
        commands=commands(read_fixture, links, [(by_iface[i], c) for i, c in pings.items()], carrier=carrier),
    )


def test_reads_first_then_changes_in_order_then_one_ping_per_cable_from_its_first_end(module_runner, read_fixture):
    out = run(module_runner, read_fixture, [EN2, EN3, EN4], {"en2": [0], "en3": [0]})
    assert not out.failed, out.result
    calls = [tuple(c) for c in out.calls]
    reads = {HWPORTS, ORDER, IFCONFIG, NETSTAT}  # every host route from one netstat
    assert set(calls[: len(reads)]) == reads  # every read before any change
    changes = [c for c in calls[len(reads) :] if c[0] != PING]
    assert changes[:2] == [
        (IFC, "bridge0", "deletem", "en3", "deletem", "en4"),
        (NS, "-setnetworkserviceenabled", "Thunderbolt Bridge", "off"),
    ]
    # networksetup first, then one ifconfig to see what it applied (en3's address), then the
    # runtime changes still needed (en2 had its address before), then the routes
    reread = changes.index(IFCONFIG)
    assert all(c[0] == NS or c[1] == "bridge0" for c in changes[:reread])
    assert changes[reread + 1 :] == [
        (IFC, "en2", "inet", "169.254.17.42", "delete"),
        (IFC, "en4", "inet", "10.208.0.10", "netmask", "255.255.255.252"),
        (ROUTE, "-n", "add", "-host", "10.208.0.2", "-interface", "en2"),
        (ROUTE, "-n", "add", "-host", "10.208.0.6", "-interface", "en3"),
        (ROUTE, "-n", "add", "-host", "10.208.0.9", "-interface", "en4"),
    ]
    assert [a["argv"][1] for a in out.result["applied_by_networksetup"]] == ["en3"]
    assert [a["argv"] for a in out.result["actions"]] == [
        [c[0].rsplit("/", 1)[1], *c[1:]] for c in changes if c != IFCONFIG
    ]
    assert sorted(c for c in calls if c[0] == PING) == sorted([ping(EN2), ping(EN3)])  # not EN4: m0 pings it
    assert [(v["cable"], v["ok"], v["attempts"]) for v in out.result["verified"]] == [
        ("m1:en2~m2:en2", True, 1),
        ("m1:en3~m3:en2", True, 1),
    ]
    assert out.result["changed"] is True


def test_a_silent_cable_with_carrier_is_tried_again_while_its_peer_applies(module_runner, read_fixture):
    out = run(module_runner, read_fixture, [EN2], {"en2": [2, 2, 0]})
    assert not out.failed, out.result
    assert out.result["verified"][0]["attempts"] == 3


def test_the_wait_ends_when_the_port_loses_its_carrier(module_runner, read_fixture):
    # the Mac at the other end went off while this one waited for it
    out = run(module_runner, read_fixture, [EN2], {"en2": [2, 2, 2, 2, 0]}, carrier=["active", "inactive"])
    assert out.failed
    assert out.result["verified"][0]["attempts"] == 2 and out.result["verified"][0]["carrier"] is False
    assert "en2 lost its carrier while waiting: m2 went off or the cable was pulled" in out.result["msg"]
    assert [c for c in out.calls if c[0] == IFC and c[1:] == ["en2"]] == [[IFC, "en2"]] * 2


def test_silent_cables_can_be_returned_instead_of_failing(module_runner, read_fixture):
    out = run(module_runner, read_fixture, [EN2, EN3], {"en2": [0], "en3": [2]}, fail_on_no_answer=False)
    assert not out.failed, out.result
    assert out.result["no_answer"] == [
        {"peer_host": "m3", "problem": "cable m1:en3~m3:en2: en3 10.208.0.5 -> m3:en2 10.208.0.6 (en3 has no carrier)"}
    ]
    assert [v["ok"] for v in out.result["verified"]] == [True, False]


def test_a_cable_without_carrier_fails_at_once_naming_it(module_runner, read_fixture):
    out = run(module_runner, read_fixture, [EN2, EN3], {"en2": [0], "en3": [2]})
    assert out.failed
    msg = out.result["msg"]
    assert "m1:en3~m3:en2" in msg and "en3 has no carrier" in msg and "m1:en2~m2:en2" not in msg
    assert "plugged in at both ends" in msg
    assert [c for c in out.calls if c[0] == PING].count(list(ping(EN3))) == 1
    assert out.result["changed"] is True  # the changes were made; the failure says what is still wrong


def test_the_wait_is_bounded(module_runner, read_fixture):
    out = run(module_runner, read_fixture, [EN2], {"en2": [2]}, verify_wait=0)
    assert out.failed and "m1:en2~m2:en2" in out.result["msg"]
    assert [c for c in out.calls if c[0] == PING] == [list(ping(EN2))]


def test_check_mode_reads_only_and_pings_nothing(module_runner, read_fixture):
    out = run(module_runner, read_fixture, [EN2, EN3], {"en2": [0], "en3": [0]}, check=True)
    assert not out.failed, out.result
    assert sorted(tuple(c) for c in out.calls) == sorted([HWPORTS, ORDER, IFCONFIG, NETSTAT])
    assert out.result["changed"] is True and "verified" not in out.result


def test_state_from_discovery_is_not_read_again(module_runner, read_fixture):
    from ansible_collections.mlx.cluster.plugins.module_utils.mlx_host import interfaces_facts
    from ansible_collections.mlx.cluster.plugins.module_utils.mlx_tb import parse_hardware_ports, parse_service_order

    state = {
        "hardware_ports": parse_hardware_ports(read_fixture("networksetup_hwports_studio_with_bridge.txt")),
        "services": parse_service_order(read_fixture("networksetup_order_bridge_enabled.txt")),
        "interfaces": interfaces_facts(read_fixture("ifconfig_all_studio.txt")),
    }
    out = run(module_runner, read_fixture, [EN2, EN3], {"en2": [0], "en3": [0]}, state=state)
    assert not out.failed, out.result
    calls = [tuple(c) for c in out.calls]
    assert HWPORTS not in calls and ORDER not in calls
    assert calls[0] == NETSTAT and not any(c[:3] == (ROUTE, "-n", "get") for c in calls)
    assert calls.count(IFCONFIG) == 1  # only the look after networksetup
    assert (IFC, "bridge0", "deletem", "en3") in calls


def test_incomplete_state_is_read_again(module_runner, read_fixture):
    out = run(
        module_runner,
        read_fixture,
        [EN2],
        {"en2": [0]},
        state={"hardware_ports": {"Thunderbolt 1": "en2"}, "services": None, "interfaces": {}},
    )
    assert not out.failed, out.result
    assert {HWPORTS, ORDER, IFCONFIG} <= {tuple(c) for c in out.calls}


# A converged en2 (the planned cable) and en4 without a cable that still holds 10.208.0.9/30
# (the old end of a moved cable), as discovery hands them over.
MOVED_STATE = {
    "hardware_ports": {
        "Ethernet": "en0",
        "Thunderbolt 1": "en2",
        "Thunderbolt 3": "en4",
        "Thunderbolt Bridge": "bridge0",
    },
    "services": [
        {"name": "Ethernet", "hardware_port": "Ethernet", "device": "en0", "enabled": True},
        {"name": "Thunderbolt 1", "hardware_port": "Thunderbolt 1", "device": "en2", "enabled": True},
        {"name": "Thunderbolt 3", "hardware_port": "Thunderbolt 3", "device": "en4", "enabled": True},
    ],
    "interfaces": {
        "en0": {"ipv4": [{"address": "10.99.0.2", "prefix": 24}], "status": "active"},
        "en2": {"ipv4": [{"address": "10.208.0.1", "prefix": 30}], "status": "active"},
        "en4": {"ipv4": [{"address": "10.208.0.9", "prefix": 30}], "status": "inactive"},
        "bridge0": {"ipv4": [], "members": []},
    },
}


def moved_commands(getinfo=("Thunderbolt 1", "Thunderbolt 3")):
    """The answers for MOVED_STATE; `networksetup -getinfo` only for the services in `getinfo`."""
    manual = "Manual Configuration\nIP address: {}\nSubnet mask: 255.255.255.252\nRouter: (null)\n"
    addr = {"Thunderbolt 1": "10.208.0.1", "Thunderbolt 3": "10.208.0.9"}
    commands = {
        NETSTAT: (
            0,
            NO_HOST_ROUTES[1] + "10.208.0.2         link#14            UHS                   en2       \n",
            "",
        ),
        (NS, "-setdhcp", "Thunderbolt 3"): (0, "", ""),
        IFCONFIG: (
            0,
            "en4: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500\n"
            "\tether 36:b4:7a:19:c0:48\n\tstatus: inactive\n",
            "",
        ),
    }
    commands.update({(NS, "-getinfo", name): (0, manual.format(addr[name]), "") for name in getinfo})
    return commands


def test_the_old_end_of_a_moved_cable_is_cleared_when_the_pool_is_given(module_runner):
    state, commands = MOVED_STATE, moved_commands()
    base = {"links": [EN2], "protected_ifaces": ["en0"], "state": state}
    out = module_runner("thunderbolt_links", args=dict(base, pool="10.208.0.0/16"), bins=BINS, commands=commands)
    assert not out.failed, out.result
    assert [a["argv"] for a in out.result["actions"]] == [["networksetup", "-setdhcp", "Thunderbolt 3"]]
    # DHCP took the manual address away at once: the runtime delete was not needed
    assert [a["argv"] for a in out.result["applied_by_networksetup"]] == [
        ["ifconfig", "en4", "inet", "10.208.0.9", "delete"]
    ]
    # without the pool nothing outside the plan is looked at
    quiet = module_runner("thunderbolt_links", args=base, bins=BINS, commands=commands)
    assert not quiet.failed and quiet.result["changed"] is False
    assert [NS, "-getinfo", "Thunderbolt 3"] not in quiet.calls


def test_a_routing_table_that_cannot_be_read_means_one_route_get_per_peer(module_runner, read_fixture):
    table = commands(read_fixture, [EN2, EN3], [(EN2, [0]), (EN3, [0])])
    table[NETSTAT] = (1, "", "netstat: sysctl: net.route.0.0.dump.inet: Operation not permitted\n")
    for peer in ("10.208.0.2", "10.208.0.6"):
        table[(ROUTE, "-n", "get", peer)] = (1, "", "route: writing to routing socket: not in table")
    out = module_runner(
        "thunderbolt_links",
        args={"links": [EN2, EN3], "protected_ifaces": ["en0"], "verify": True},
        bins=dict(BINS, ping=PING),
        commands=table,
    )
    assert not out.failed, out.result
    assert {(ROUTE, "-n", "get", "10.208.0.2"), (ROUTE, "-n", "get", "10.208.0.6")} <= {tuple(c) for c in out.calls}
    assert [a["argv"][:3] for a in out.result["actions"] if a["argv"][0] == "route"] == [["route", "-n", "add"]] * 2
    table[NETSTAT] = (0, "Routing tables\n\nInternet:\n", "")  # no table in it: the same
    again = module_runner(
        "thunderbolt_links",
        args={"links": [EN2], "protected_ifaces": ["en0"], "verify": False},
        bins=dict(BINS, ping=PING),
        commands=table,
    )
    assert not again.failed and [ROUTE, "-n", "get", "10.208.0.2"] in again.calls


def test_service_settings_come_from_the_preferences_file_where_it_answers(module_runner, tmp_path):
    # the moved cable's state, with a preferences file that knows
    # "Thunderbolt 1" (en2) but not "Thunderbolt 3" (en4): one getinfo instead of two
    import plistlib

    prefs = plistlib.loads(
        (Path(__file__).resolve().parents[2] / "fixtures" / "sc_preferences_studio.plist").read_bytes()
    )
    path = tmp_path / "preferences.plist"
    path.write_bytes(plistlib.dumps(prefs))
    state, commands = MOVED_STATE, moved_commands(getinfo=["Thunderbolt 3"])
    args = {"links": [EN2], "protected_ifaces": ["en0"], "state": state, "pool": "10.208.0.0/16"}
    out = module_runner(
        "thunderbolt_links", args=args, bins=BINS, commands=commands, module_attrs={"SC_PREFERENCES": str(path)}
    )
    assert not out.failed, out.result
    assert [c for c in out.calls if "-getinfo" in c] == [[NS, "-getinfo", "Thunderbolt 3"]]
    assert [a["argv"] for a in out.result["actions"]] == [["networksetup", "-setdhcp", "Thunderbolt 3"]]
    # the file says en2's service is manual 10.208.0.1/30: nothing to do there
    assert out.result["changed"] is True and not any("Thunderbolt 1" in a["argv"] for a in out.result["actions"])


SCUTIL = "/usr/sbin/scutil"


class ScutilRewrites(Answers):
    """The table, with `scutil --prefs` answered as it behaves: exit 0 always, stdout empty on
    success; `rewrite` (or not) stands for configd committing the new definition."""

    def __init__(self, table, path, rewrite, said=""):
        super().__init__(table)
        self.path, self.rewrite, self.said = path, rewrite, said

    def __contains__(self, key):
        return key == (SCUTIL, "--prefs") or dict.__contains__(self, key)

    def __getitem__(self, key):
        if key != (SCUTIL, "--prefs"):
            return super().__getitem__(key)
        if self.rewrite is not None:
            import plistlib

            prefs = plistlib.loads(self.path.read_bytes())
            prefs["VirtualNetworkInterfaces"]["Bridge"]["bridge0"]["Interfaces"] = self.rewrite
            self.path.write_bytes(plistlib.dumps(prefs))
        return (0, self.said, "")


def studio_prefs(tmp_path):
    """The studio's preferences file: bridge0 is defined with en3, en4 and en5."""
    path = tmp_path / "preferences.plist"
    path.write_bytes((Path(__file__).resolve().parents[2] / "fixtures" / "sc_preferences_studio.plist").read_bytes())
    return path


def test_planned_ports_leave_the_bridge_definition_and_the_file_is_read_back(module_runner, read_fixture, tmp_path):
    path = studio_prefs(tmp_path)
    table = ScutilRewrites(commands(read_fixture, [EN3], []), path, rewrite=["en4", "en5"])
    args = {"links": [EN3], "protected_ifaces": ["en0"], "verify": False}
    out = module_runner(
        "thunderbolt_links",
        args=args,
        bins=dict(BINS, scutil=SCUTIL),
        commands=table,
        module_attrs={"SC_PREFERENCES": str(path)},
    )
    assert not out.failed, out.result
    changes = [tuple(c) for c in out.calls[4:]]
    # out of the live bridge, then out of its definition, before any networksetup change
    assert changes[:3] == [
        (IFC, "bridge0", "deletem", "en3"),
        (SCUTIL, "--prefs"),
        (NS, "-setnetworkserviceenabled", "Thunderbolt Bridge", "off"),
    ]
    scutil = out.result["actions"][1]
    assert scutil["stdin"].startswith(
        "lock\nget /VirtualNetworkInterfaces/Bridge/bridge0\nd.add Interfaces * en4 en5\n"
    )
    assert out.result["diff"]["before"]["bridge"]["persistent_members"] == ["en3", "en4", "en5"]
    assert out.result["diff"]["after"]["bridge"]["persistent_members"] == ["en4", "en5"]


@pytest.mark.parametrize(
    "rewrite, said",
    [
        pytest.param(None, "  Permission denied\n", id="scutil-said-why"),
        pytest.param(None, "", id="file-unchanged-silently"),
        pytest.param(["en3", "en4"], "", id="file-still-lists-the-port"),
    ],
)
def test_a_definition_that_did_not_change_fails_naming_the_file_and_the_fix(
    module_runner, read_fixture, tmp_path, rewrite, said
):
    path = studio_prefs(tmp_path)
    table = ScutilRewrites(commands(read_fixture, [EN3], []), path, rewrite=rewrite, said=said)
    out = module_runner(
        "thunderbolt_links",
        args={"links": [EN3], "protected_ifaces": ["en0"], "verify": False},
        bins=dict(BINS, scutil=SCUTIL),
        commands=table,
        module_attrs={"SC_PREFERENCES": str(path)},
    )
    assert out.failed
    msg = out.result["msg"]
    assert "could not remove en3 from the definition of bridge0" in msg and "Manage Virtual Interfaces" in msg
    assert (said.strip() or "no output") in msg
    # nothing after the failed step ran
    assert not any(c[0] == NS and c[1] == "-createnetworkservice" for c in out.calls)


def test_check_mode_shows_the_definition_change_and_runs_nothing(module_runner, read_fixture, tmp_path):
    path = studio_prefs(tmp_path)
    table = ScutilRewrites(commands(read_fixture, [EN3], []), path, rewrite=["en4", "en5"])
    out = module_runner(
        "thunderbolt_links",
        args={"links": [EN3], "protected_ifaces": ["en0"], "verify": False, "_ansible_check_mode": True},
        bins=dict(BINS, scutil=SCUTIL),
        commands=table,
        module_attrs={"SC_PREFERENCES": str(path)},
    )
    assert not out.failed and out.result["changed"] is True
    assert [SCUTIL, "--prefs"] not in out.calls
    assert ["scutil", "--prefs"] in [a["argv"] for a in out.result["actions"]]
    assert out.result["diff"]["after"]["bridge"]["persistent_members"] == ["en4", "en5"]


def test_an_unreadable_preferences_file_is_a_warning(module_runner, read_fixture):
    out = module_runner(
        "thunderbolt_links",
        args={"links": [EN3], "protected_ifaces": ["en0"], "verify": False, "_ansible_check_mode": True},
        bins=BINS,
        commands=commands(read_fixture, [EN3], []),
    )
    assert not out.failed
    assert any("cannot read the network preferences" in w and "next boot is not checked" in w for w in out.warnings)


def test_files_are_written_in_the_same_run_and_given_to_the_user_who_ran_sudo(
    module_runner, read_fixture, tmp_path, monkeypatch
):
    chowned = []
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr("os.chown", lambda path, uid, gid: chowned.append((Path(path).parent, uid, gid)))
    monkeypatch.setenv("SUDO_UID", "501")
    monkeypatch.setenv("SUDO_GID", "20")
    hostfile = tmp_path / "mlx-cluster" / "hostfile.json"
    out = run(module_runner, read_fixture, [EN2], {"en2": [0]}, files=[{"path": str(hostfile), "content": "[]\n"}])
    assert not out.failed, out.result
    assert hostfile.read_text() == "[]\n"
    assert [f["changed"] for f in out.result["files"]] == [True]
    # the directory made and the file (its temporary name, then renamed) belong to uid 501
    assert chowned == [(tmp_path, 501, 20), (hostfile.parent, 501, 20)]
    assert out.result["verified"][0]["ok"]


def test_check_mode_shows_the_files_and_writes_none(module_runner, read_fixture, tmp_path):
    hostfile = tmp_path / "hostfile.json"
    out = run(
        module_runner,
        read_fixture,
        [EN2],
        {"en2": [0]},
        check=True,
        files=[{"path": str(hostfile), "content": "[]\n"}],
        _ansible_diff=True,
    )
    assert not out.failed, out.result
    assert not hostfile.exists() and out.result["files"][0]["created"] is True
    links_diff, file_diff = out.result["diff"]
    assert set(links_diff) == {"before", "after"} and file_diff["after"] == "[]\n"
