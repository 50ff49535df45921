"""tests/simcluster/capture.py and `python -m tests.simcluster from-capture`: a capture
(`--tags capture`) rebuilt as a spec and parser fixtures, without starting anything.

tests/fixtures/captures/mesh4.tar.gz is a capture of the simulated 4-Mac full mesh
(tests/simcluster/specs/mesh4.yml): its spec must come back, m1..m4 under their placeholders.
The other captures here are that one with a Mac's outputs changed in memory.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from ansible_collections.mlx.cluster.plugins.plugin_utils import plan_cables
from tests.simcluster import capture as cap
from tests.simcluster.spec import load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[3]
MESH4 = ROOT / "tests" / "fixtures" / "captures" / "mesh4.tar.gz"
SP = ["system_profiler", "SPThunderboltDataType", "-json"]
SP_LABEL = "system_profiler SPThunderboltDataType -json"


@pytest.fixture
def mesh4():
    return cap.read_capture(MESH4)


def command(capture, mac, argv):
    return next(e for e in capture["macs"][mac]["commands"] if e["argv"] == argv)


def edit_json(capture, mac, argv, change):
    entry = command(capture, mac, argv)
    data = json.loads(entry["stdout"])
    change(data)
    entry["stdout"] = json.dumps(data, indent=2)


def bus(data, receptacle):
    return next(
        b for b in data["SPThunderboltDataType"] if b["receptacle_1_tag"]["receptacle_id_key"] == str(receptacle)
    )


def placeholders(capture, spec):
    """{inventory name in `spec`: placeholder}, told by the management address each Mac holds in
    its capture (the simulation gives host i of the spec the CIDR's address 2 + i)."""
    by_address = {spec.mgmt_address(h.name): h.name for h in spec.hosts}
    return {by_address[cap.facts_of(c, mac)["mgmt"]["address"]]: mac for mac, c in capture["macs"].items()}


def write_capture(capture, path):
    """A capture file as mlx_capture_pack writes one."""
    files = {"capture/manifest.json": capture["manifest"]}
    files.update({f"capture/{mac}.json": c for mac, c in capture["macs"].items()})
    with tarfile.open(path, "w:gz") as tar:
        for name, value in files.items():
            data = json.dumps(value, indent=2, sort_keys=True).encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o600
            tar.addfile(info, io.BytesIO(data))
    return path


def run_cli(*args, cwd=ROOT):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    return subprocess.run(
        [sys.executable, "-m", "tests.simcluster", "from-capture", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


# ---- the mesh4 capture ---------------------------------------------------------------------


def test_the_capture_is_read_whole(mesh4):
    assert list(mesh4["macs"]) == ["mac1", "mac2", "mac3", "mac4"]
    assert mesh4["manifest"]["format"] == 1
    assert sorted(mesh4["manifest"]["macs"]) == list(mesh4["macs"])
    for c in mesh4["macs"].values():
        assert SP in [e["argv"] for e in c["commands"]]


def test_the_placeholders_follow_the_inventory_names_order(mesh4):
    # told from the capture itself, not assumed: each Mac's management address
    assert placeholders(mesh4, load_spec("mesh4")) == {"m1": "mac1", "m2": "mac2", "m3": "mac3", "m4": "mac4"}


def test_mesh4_comes_back_with_its_six_cables_under_the_placeholders(mesh4):
    spec = cap.spec_of(mesh4)
    names = placeholders(mesh4, load_spec("mesh4"))
    assert [h["name"] for h in spec["hosts"]] == ["mac1", "mac2", "mac3", "mac4"]
    assert spec["management"] == {"cidr": "10.99.0.0/24"}

    def ends(a, b):
        return frozenset((a, b))

    mesh = load_spec("mesh4")
    want = {ends(f"{names[c.a.host]}:{c.a.receptacle}", f"{names[c.b.host]}:{c.b.receptacle}") for c in mesh.cables}
    assert len(spec["cables"]) == 6
    assert {ends(c["a"], c["b"]) for c in spec["cables"]} == want
    assert all(c["speed"] == 80 and "dock" not in c for c in spec["cables"])
    assert parse_spec(spec).cables[0].id == "mac1:en2~mac2:en2"


def test_each_mac_is_mesh4s_mac_as_the_spec_loads_it(mesh4):
    """Every key the capture shows (ports, Thunderbolt version, RDMA, memory, CPUs, macOS, model,
    bridge, language, power, updates, Command Line Tools) and the defaults for the rest."""
    mesh, names = load_spec("mesh4"), placeholders(mesh4, load_spec("mesh4"))
    spec = cap.spec_of(mesh4)
    host = spec["hosts"][0]
    assert {k: host[k] for k in ("tb_ports", "tb_version", "rdma", "memory_gb", "ncpu")} == {
        "tb_ports": 6,
        "tb_version": 5,
        "rdma": True,
        "memory_gb": 512,
        "ncpu": 32,
    }
    assert (host["macos"], host["build"], host["model_id"], host["model"]) == ("26.2", "25C56", "Mac16,9", "Mac Studio")
    assert (host["thunderbolt_bridge"], host["language"]) == (True, "en")
    assert "wired_limit_mb" not in host  # no spec key for it
    loaded = parse_spec(spec)
    for m, mac in names.items():
        # the captured (redacted) domain UUIDs, one per receptacle: the rebuilt cables are the captured ones
        uuids = loaded.host(mac).domain_uuids
        assert sorted(uuids) == [1, 2, 3, 4, 5, 6] and len(set(uuids.values())) == 6, uuids
        assert all(loaded.domain_uuid(mac, k) == u.upper() for k, u in uuids.items())
        assert loaded.host(mac) == dataclasses.replace(mesh.host(m), name=mac, domain_uuids=uuids)


def test_the_spec_round_trips_into_the_cluster_json_of_mesh4(mesh4):
    """What the harness would write to cluster.json (ClusterSpec.to_json, nothing started): the
    same cables as mesh4's, renamed, and the same cables the planner finds in the capture."""
    spec, notes = cap.derive(mesh4)
    names = placeholders(mesh4, load_spec("mesh4"))
    text = cap.spec_yaml(spec, notes)
    assert parse_spec(yaml.safe_load(text)) == parse_spec(spec)
    got = parse_spec(yaml.safe_load(text)).to_json()
    want = load_spec("mesh4").to_json()

    def renamed(cable_id):
        for m, mac in sorted(names.items(), key=lambda kv: -len(kv[0])):
            cable_id = cable_id.replace(f"{m}:", f"{mac}:")
        return cable_id

    assert sorted(got["cables"]) == sorted(renamed(c) for c in want["cables"])
    facts = {mac: cap.facts_of(c, mac) for mac, c in mesh4["macs"].items()}
    assert sorted(got["cables"]) == [c["id"] for c in plan_cables.links(facts)["cables"]]
    for m, mac in names.items():
        ports = {k: v["cable"] and renamed(v["cable"]) for k, v in want["hosts"][m]["ports"].items()}
        assert {k: v["cable"] for k, v in got["hosts"][mac]["ports"].items()} == ports
        assert got["hosts"][mac]["mgmt_address"] == want["hosts"][m]["mgmt_address"]
    assert got["management"] == want["management"]


def test_the_facts_are_discoverys_own(mesh4):
    facts = cap.facts_of(mesh4["macs"]["mac1"], "mac1")
    assert facts["mgmt"] == {"iface": "en0", "address": "10.99.0.2"}
    assert [p["iface"] for p in facts["thunderbolt"]["ports"]] == [f"en{k + 1}" for k in range(1, 7)]
    assert facts["rdma"]["rdma_ctl"] == "enabled" and len(facts["rdma"]["devices"]) == 6
    assert facts["hw"]["wired_limit_mb"] == 0


# ---- what a Mac shows differently ---------------------------------------------------------------


def test_a_dock_seen_from_one_side_is_the_cables_dock(mesh4):
    def behind_dock(data):
        b = bus(data, 1)
        b["_items"] = [{"_name": "CalDigit TS4", "vendor_name_key": "CalDigit, Inc.", "_items": b["_items"]}]
        b["receptacle_1_tag"]["current_speed_key"] = "40 Gb/s"

    def sees_nothing(data):
        b = bus(data, 1)
        del b["_items"]
        b["receptacle_1_tag"]["current_speed_key"] = "40 Gb/s"

    edit_json(mesh4, "mac1", SP, behind_dock)
    edit_json(mesh4, "mac2", SP, sees_nothing)
    spec = cap.spec_of(mesh4)
    (cable,) = [c for c in spec["cables"] if c["a"] == "mac1:1"]
    assert cable == {
        "a": "mac1:1",
        "b": "mac2:1",
        "speed": 40,
        "dock": {"name": "CalDigit TS4", "vendor": "CalDigit, Inc.", "seen_by": "mac1"},
    }
    assert len(spec["cables"]) == 6
    assert parse_spec(spec).cable("mac1:1").dock.seen_by == "mac1"


def test_a_mac_set_up_in_german_a_tb4_mac_and_rdma_off(mesh4):
    for argv in (["networksetup", "-listallhardwareports"], ["networksetup", "-listnetworkserviceorder"]):
        entry = command(mesh4, "mac3", argv)
        entry["stdout"] = entry["stdout"].replace("Thunderbolt Bridge", "Thunderbolt-Brücke")

    def tb4(data):
        for b in data["SPThunderboltDataType"]:
            tag = b["receptacle_1_tag"]
            tag["current_speed_key"] = tag["current_speed_key"].replace("120", "40").replace("80", "40")

    edit_json(mesh4, "mac4", SP, tb4)
    command(mesh4, "mac2", ["rdma_ctl", "status"])["stdout"] = "disabled\n"
    spec = cap.spec_of(mesh4)
    hosts = {h["name"]: h for h in spec["hosts"]}
    assert hosts["mac3"]["language"] == "de" and hosts["mac3"]["thunderbolt_bridge"] is True
    assert hosts["mac4"]["tb_version"] == 4 and hosts["mac1"]["tb_version"] == 5
    assert hosts["mac2"]["rdma"] is False and hosts["mac1"]["rdma"] is True
    assert sorted(c["speed"] for c in spec["cables"]) == [40, 40, 40, 80, 80, 80]
    parse_spec(spec)


def test_a_bridge_taken_apart_is_no_thunderbolt_bridge(mesh4):
    """What the network stage leaves: bridge0 with no member, in its definition too, its service
    off (`(*)`); a bridge with members whose service is off is still one (macOS bridges them)."""
    c = mesh4["macs"]["mac1"]
    ifconfig = command(mesh4, "mac1", ["ifconfig"])
    ifconfig["stdout"] = "".join(
        line
        for line in ifconfig["stdout"].splitlines(keepends=True)
        if "member:" not in line and "ifmaxaddr" not in line
    )
    order = command(mesh4, "mac1", ["networksetup", "-listnetworkserviceorder"])
    order["stdout"] = order["stdout"].replace("(2) Thunderbolt Bridge", "(*) Thunderbolt Bridge")
    prefs = "/Library/Preferences/SystemConfiguration/preferences.plist"
    c["files"][prefs] = "".join(
        line
        for line in c["files"][prefs].splitlines(keepends=True)
        if not re.match(r"\s*<string>en[2-7]</string>", line)
    )
    command(mesh4, "mac2", ["networksetup", "-listnetworkserviceorder"])["stdout"] = order["stdout"]
    spec, notes = cap.derive(mesh4)
    assert [h["thunderbolt_bridge"] for h in spec["hosts"]] == [False, True, True, True]
    assert any(n.startswith("mac2: bridge0 has members en2") and "service is off" in n for n in notes)
    assert not any(n.startswith("mac1:") for n in notes)
    assert parse_spec(spec).host("mac1").thunderbolt_bridge is False


def test_what_a_spec_cannot_say_is_noted(mesh4):
    command(mesh4, "mac2", ["sysctl", "-n", "iogpu.wired_limit_mb"])["stdout"] = "458752\n"
    for mac, address in (("mac3", "10.20.0.7"), ("mac4", "192.168.1.9")):
        for entry in mesh4["macs"][mac]["commands"]:
            if entry["argv"] == ["ifconfig"]:
                entry["stdout"] = entry["stdout"].replace(f"10.99.0.{int(mac[-1]) + 1} ", f"{address} ")
    spec, notes = cap.derive(mesh4)
    assert "wired_limit_mb" not in spec["hosts"][1]
    assert any("mac2" in n and "wired_limit_mb=458752" in n for n in notes)
    assert spec["management"] == {"cidr": cap.FALLBACK_CIDR}
    assert any("10.20.0.7" in n and "192.168.1.9" in n for n in notes)
    text = cap.spec_yaml(spec, notes)
    assert "# - mac2: iogpu.wired_limit_mb is 458752" in text
    parse_spec(yaml.safe_load(text))


def test_a_laptop_and_its_power_settings(mesh4):
    entry = command(mesh4, "mac1", ["pmset", "-g", "custom"])
    entry["stdout"] = (ROOT / "tests" / "fixtures" / "pmset_g_custom_macbook_air.txt").read_text()
    host = cap.spec_of(mesh4)["hosts"][0]
    assert host["battery"] is True
    assert host["pmset"] == {"displaysleep": 30}
    parse_spec(cap.spec_of(mesh4))


# ---- a capture that cannot be rebuilt -------------------------------------------------------------


@pytest.mark.parametrize(
    "how, says",
    [
        ("missing", "not in the capture"),
        ("not JSON", "output is not JSON"),
        ("failed", "exited with 1"),
        ("not installed", "not installed on the Mac"),
        ("timed out", "did not answer when the capture was made"),
    ],
)
def test_a_mac_without_its_system_profiler_output_is_named_with_the_command(mesh4, how, says):
    commands = mesh4["macs"]["mac2"]["commands"]
    entry = command(mesh4, "mac2", SP)
    if how == "missing":
        commands.remove(entry)
    elif how == "not JSON":
        entry["stdout"] = "<html>not today</html>"
    elif how == "failed":
        entry.update(rc=1, stdout="", stderr="system_profiler: interrupted\n")
    else:
        entry.clear()
        entry.update(argv=SP, error="not installed" if how == "not installed" else "no answer within 30s", seconds=1)
    with pytest.raises(cap.CaptureError) as err:
        cap.spec_of(mesh4)
    assert str(err.value).startswith(f"mac2: `{SP_LABEL}`")
    assert says in str(err.value)


def test_the_command_line_names_the_mac_and_the_command_without_a_traceback(mesh4, tmp_path):
    command(mesh4, "mac3", SP)["stdout"] = '{"SPThunderboltDataType": '
    out = run_cli(write_capture(mesh4, tmp_path / "capture-broken.tar.gz"), "--out", tmp_path / "out")
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.startswith(f"error: mac3: `{SP_LABEL}`: output is not JSON")
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("what", ["not a tar", "no manifest"])
def test_a_file_that_is_no_capture(tmp_path, what):
    path = tmp_path / "capture.tar.gz"
    if what == "not a tar":
        path.write_text("hello")
    else:
        with tarfile.open(path, "w:gz") as tar:
            data = b"{}"
            info = tarfile.TarInfo("capture/mac1.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(cap.CaptureError, match=str(path)):
        cap.read_capture(path)


# ---- the command line and the fixtures -------------------------------------------------------------


def test_the_command_line_writes_the_spec_and_the_fixtures(mesh4, tmp_path):
    out = run_cli(MESH4, "--name", "lab4", "--out", tmp_path / "lab4")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 Macs (mac1, mac2, mac3, mac4), 6 cables" in out.stdout
    spec = load_spec(tmp_path / "lab4" / "lab4.yml")
    assert spec.name == "lab4" and len(spec.cables) == 6
    assert spec.to_json()["cables"].keys() == parse_spec(cap.spec_of(mesh4)).to_json()["cables"].keys()
    written = tmp_path / "lab4"
    assert json.loads((written / "manifest.json").read_text()) == mesh4["manifest"]
    for mac, c in mesh4["macs"].items():
        index = json.loads((written / mac / "commands.json").read_text())
        assert [e["argv"] for e in index] == [e["argv"] for e in c["commands"]]
        for entry, item in zip(c["commands"], index):
            if "rc" in entry:
                assert (written / mac / item["stdout"]).read_text() == entry["stdout"]
            else:
                assert "stdout" not in item and item["error"] == entry["error"]
        hwports = command(mesh4, mac, ["networksetup", "-listallhardwareports"])["stdout"]
        assert (written / mac / "networksetup_-listallhardwareports.txt").read_text() == hwports
        assert (written / mac / "system_profiler_SPThunderboltDataType_-json.txt").exists()
        assert (written / mac / "files" / "preferences.plist").exists()


def test_fixture_names():
    assert cap.fixture_name(["networksetup", "-listallhardwareports"]) == "networksetup_-listallhardwareports"
    assert cap.fixture_name(["sysctl", "-n", "hw.memsize", "hw.model", "hw.ncpu"]) == (
        "sysctl_-n_hw.memsize_hw.model_hw.ncpu"
    )
    assert cap.fixture_name(["networksetup", "-getinfo", "Thunderbolt Bridge"]) == (
        "networksetup_-getinfo_Thunderbolt_Bridge"
    )
    assert cap.fixture_name(["/usr/libexec/ApplicationFirewall/socketfilterfw", "--getglobalstate"]) == (
        "socketfilterfw_--getglobalstate"
    )
    assert cap.fixture_name(["defaults", "read", "/Library/Preferences/com.apple.SoftwareUpdate"]) == (
        "defaults_read_Library_Preferences_com.apple.SoftwareUpdate"
    )
