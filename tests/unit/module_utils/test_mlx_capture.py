"""module_utils/mlx_capture.py: the redaction of a capture (same value, same placeholder, same
shape), the recording runner, and what the capture runs besides discovery."""

from __future__ import annotations

import json
import re

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils import mlx_capture
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_capture import Redactor, missing_argvs, record, redact
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import CommandTimeout

MAC_A, MAC_B = "82:02:9F:a3:0c:00", "36:11:aa:bb:cc:01"
DOMAIN = "3A1B2C3D-1111-2222-3333-444455556666"


def test_placeholders_keep_the_shape_and_are_stable_across_macs():
    r = Redactor(hosts=["m1", "m2"], users=["alice"])
    one = r.text(f"en2: ether {MAC_A}\n domain {DOMAIN}\n peer {DOMAIN.lower()}\n")
    two = r.text(f"Ethernet Address: {MAC_A.lower()}\nbridge0 member {MAC_B}\n")
    mac = re.search(r"ether (\S+)", one).group(1)
    assert re.fullmatch(r"02(:[0-9a-f]{2}){5}", mac) and f"Address: {mac}" in two  # case does not matter
    uuids = re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-8[0-9a-f]{3}-[0-9a-f]{12}", one)
    assert len(uuids) == 2 and uuids[0] == uuids[1]  # one domain, both ends of a cable
    assert MAC_A not in one + two and DOMAIN.lower() not in (one + two).lower()
    assert r.counts()["mac_addresses"] == 2 and r.counts()["uuids"] == 1


def test_what_is_made_from_a_mac_address_is_replaced_with_its_placeholders_eui64():
    """ibv_devices' node GUID, ibv_devinfo's node_guid and GID, an IPv6 link-local address: each
    an EUI-64 of the port's MAC address, which they would give back."""
    r = Redactor()
    mac = r.text("ether 36:5f:0c:43:c1:16").split()[-1]  # 02:00:00:00:00:01
    assert mac == "02:00:00:00:00:01"
    out = r.text(
        "mlx5_0   365f0cfffe43c116\n node_guid: 365f:0cff:fe43:c116\n"
        " GID[0]: fe80:0000:0000:0000:345f:0cff:fe43:c116\n inet6 fe80::345f:cff:fe43:c116%en2 prefixlen 64\n"
    )
    assert "43c116" not in out and "c116" not in out, out
    # the GUIDs keep the MAC's bits as they are (the simulated Macs' ibv_devices), IPv6 flips one
    assert "mlx5_0   020000fffe000001" in out and "node_guid: 0200:00ff:fe00:0001" in out
    assert "fe80:0000:0000:0000:0000:00ff:fe00:0001" in out and "inet6 fe80::0:ff:fe00:1%en2" in out
    assert r.counts()["mac_addresses"] == 1  # the same port, one placeholder


def test_thunderbolt_switch_ids_are_hardware_ids():
    r = Redactor()
    out = r.text('{"switch_uid_key" : "0x05AC1A2B3C4D5E6F", "route_string_key": "0x1"}')
    assert "05AC1A2B" not in out and '"0x0000000000000001"' in out and '"0x1"' in out
    assert r.text('"switch_uid_key": "0x05ac1a2b3c4d5e6f"') == '"switch_uid_key": "0x0000000000000001"'


def test_host_and_user_names_are_replaced_as_words_only():
    r = Redactor(hosts=["m1", "studio-a", "Studio-A.local"], users=["admin", "root"])
    text = r.text("m1 m10 xm1 m1.local studio-a Studio-A.local Apple M1 Max /Users/admin /Users/bob admin root\n")
    assert text.split()[:4] == ["mac2", "m10", "xm1", "mac2.local"]
    assert "studio-a" not in text and "Studio-A" not in text
    assert "Apple M1 Max" in text  # the chip is not the host m1 (names are matched with their case)
    assert "/Users/user1 " in text and "/Users/user2 " in text and "admin" not in text
    assert text.rstrip().endswith("root")  # root names nobody


@pytest.mark.parametrize(
    "text, secret",
    [
        ('{"serial_num_key": "C02XK1ZZJG5J", "_name": "x"}', "C02XK1ZZJG5J"),
        ('"Serial Number (system)" : "H2WF12345"', "H2WF12345"),
        ("<key>IOPlatformSerialNumber</key>\n\t<string>F9FXYZ12</string>", "F9FXYZ12"),
    ],
)
def test_serial_numbers_in_json_and_plists(text, secret):
    out = Redactor().text(text)
    assert secret not in out and "SERIAL0001" in out


def test_redact_names_each_mac_and_the_names_macs_give_themselves():
    prefs = (
        "<key>ComputerName</key>\n<string>Alice's Mac Studio</string>\n"
        "<key>LocalHostName</key><string>Alices-Mac-Studio</string>"
    )
    captures = {
        "studio-b": {"commands": [{"argv": ["hostname"], "rc": 0, "stdout": "Bobs-Mac.local\n"}], "files": {}},
        "studio-a": {
            "commands": [{"argv": ["scutil", "--get", "LocalHostName"], "rc": 0, "stdout": "Alices-Mac-Studio\n"}],
            "files": {mlx_capture.SC_PREFERENCES: prefs},
            "notes": ["discovery would stop here: studio-a"],
        },
    }
    out, names, counts = redact(captures, users=["alice"])
    assert names == {"studio-a": "mac1", "studio-b": "mac2"} and set(out) == {"mac1", "mac2"}
    blob = json.dumps(out)
    assert "Alice" not in blob and "studio-a" not in blob and counts["host_names"] == 4
    assert "mac3" in blob and "mac4" in blob  # the Mac's own names, numbered after the inventory's


def test_the_recording_runner_keeps_what_each_command_did():
    answers = {"sw_vers": (0, "ProductVersion:\t26.2\n", ""), "rdma_ctl": (1, "", "disabled\n")}

    def run(argv, required=True):
        if argv[0] == "ibv_devinfo":
            raise CommandTimeout(argv, 5)
        return answers.get(argv[0])

    taken = []
    rec = record(run, taken)
    assert rec(["sw_vers"]) == answers["sw_vers"]
    assert rec(["rdma_ctl", "status"], required=False) == answers["rdma_ctl"]
    assert rec(["ibv_devices"], required=False) is None
    with pytest.raises(ParseError, match="not installed"):
        rec(["ibv_devices"])
    with pytest.raises(CommandTimeout):
        rec(["ibv_devinfo", "-v"])
    assert [(e["argv"][0], e.get("rc"), e.get("error")) for e in taken] == [
        ("sw_vers", 0, None),
        ("rdma_ctl", 1, None),
        ("ibv_devices", None, "not installed"),
        ("ibv_devices", None, "not installed"),
        ("ibv_devinfo", None, "no answer within 5s"),
    ]
    assert all(isinstance(e["seconds"], float) for e in taken)


def test_what_discovery_did_not_reach_is_run_then_each_services_getinfo():
    order = (
        "An asterisk (*) denotes that a network service is disabled.\n(1) Ethernet\n"
        "(Hardware Port: Ethernet, Device: en0)\n\n(*) Thunderbolt-Brücke\n"
        "(Hardware Port: Thunderbolt-Brücke, Device: bridge0)\n"
    )
    taken = [{"argv": ["networksetup", "-listnetworkserviceorder"], "rc": 0, "stdout": order}]
    todo = missing_argvs(taken, extra=[["socketfilterfw", "--getglobalstate"]])
    assert ["networksetup", "-listnetworkserviceorder"] not in todo
    assert ["sw_vers"] in todo and ["socketfilterfw", "--getglobalstate"] in todo
    assert todo[-2:] == [["networksetup", "-getinfo", "Ethernet"], ["networksetup", "-getinfo", "Thunderbolt-Brücke"]]
    assert missing_argvs(taken + [{"argv": a} for a in todo]) == []
