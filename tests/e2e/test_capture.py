"""--tags capture on the simulated Macs: every command the toolkit parses, as each Mac answered
it, redacted and packed on the controller; read-only on the Macs, nothing written in check
mode, a Mac that cannot be reached left out and named (issue #30 item 1)."""

from __future__ import annotations

import json
import re
import tarfile

import pytest

from tests.e2e.runner import is_mutating, run_site
from tests.simcluster import SimCluster
from tests.simcluster.capture import facts_of, read_capture, spec_of, spec_yaml

pytestmark = [pytest.mark.sim]

SAY = "Say where the capture is and what it hides"


def captures(cluster):
    return sorted((cluster.inventory_path.parent / "artifacts").glob("capture-*.tar.gz"))


def message(run):
    (msg,) = [r["res"]["msg"] for r in run.results(SAY)]
    return msg


def read(path):
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers()}


def placeholder_eui64(text):
    """Whether an EUI-64 (16 hex digits, or 4 colon groups) is one of a placeholder MAC
    (02:00:00:00:hh:ll -> [00|02] 00 00 ff fe 00 hh ll)."""
    b = bytes.fromhex(text) if ":" not in text else b"".join(int(w, 16).to_bytes(2, "big") for w in text.split(":"))
    return b[0] in (0, 2) and b[1:5] == b"\x00\x00\xff\xfe" and b[5] == 0


def test_a_capture_of_every_mac_redacted_read_only_and_one_mac_unreachable(sim_cluster):
    cluster = sim_cluster("mesh4")
    cluster.reset()
    for old in captures(cluster):
        old.unlink()
    cluster.clear_argv_logs()

    dry = run_site(cluster, tags=["capture"], check=True, python_env=None)
    assert dry.rc == 0, dry.failures()
    assert "would be written to" in message(dry) and captures(cluster) == []

    run = run_site(cluster, tags=["capture"], python_env=None)
    assert run.rc == 0, run.failures()
    assert all(not is_mutating(a) for h in cluster.hosts for a in cluster.argv_log(h))  # read-only
    (path,) = captures(cluster)
    assert str(path) in message(run) and "m1 = mac1" in message(run)
    assert path.stat().st_mode & 0o077 == 0
    files = read(path)
    assert sorted(files) == [
        "capture/mac1.json",
        "capture/mac2.json",
        "capture/mac3.json",
        "capture/mac4.json",
        "capture/manifest.json",
    ]
    manifest = json.loads(files["capture/manifest.json"])
    assert manifest["format"] == 1 and manifest["unread"] == 0 and manifest["toolkit"] != "unknown"
    assert {m["macos"] for m in manifest["macs"].values()} == {"26.2"}
    assert manifest["redacted"]["host_names"] == 4 and manifest["redacted"]["mac_addresses"] >= 4 * 7
    mac1 = json.loads(files["capture/mac1.json"])
    ran = {" ".join(c["argv"]): c for c in mac1["commands"]}
    for cmd in (
        "system_profiler SPThunderboltDataType -json",
        "networksetup -listallhardwareports",
        "ibv_devinfo -v",
        "rdma_ctl status",
        "sw_vers",
        "pmset -g custom",
        "netstat -rn -f inet",
        "rsync --version",
    ):
        assert ran[cmd]["rc"] == 0 and ran[cmd]["stdout"], cmd
    assert "networksetup -getinfo Ethernet" in ran and mac1["notes"] == []
    # nothing that names a Mac, its user or its hardware is left
    blob = "\n".join(files.values())
    for h in cluster.hosts:
        assert not re.search(rf"(?<![A-Za-z0-9_-]){h}(?![A-Za-z0-9_-])", blob), h
        assert cluster.spec.mac(h, "en0").lower() not in blob.lower(), h
    assert not re.search(r"(?<![A-Za-z0-9_.-])admin(?![A-Za-z0-9_-])", blob)
    # nor what is made from a MAC address (RDMA GUIDs, IPv6 link-local): the placeholders' own
    guids = re.findall(r"[0-9a-f]{6}fffe[0-9a-f]{6}|[0-9a-f]{1,4}:[0-9a-f]{0,2}ff:fe[0-9a-f]{2}:[0-9a-f]{1,4}", blob)
    assert guids and all(placeholder_eui64(g) for g in guids), sorted(set(guids))

    # a Mac that cannot be reached is left out, named, and the others captured
    cluster.stop_sshd("m4")
    try:
        partial = run_site(cluster, tags=["capture"], python_env=None)
    finally:
        cluster.start_sshd("m4")
    assert "unread: m4" in message(partial), message(partial)
    newest = read(captures(cluster)[-1])
    assert json.loads(newest["capture/manifest.json"])["unread"] == 1
    assert sorted(newest) == ["capture/mac1.json", "capture/mac2.json", "capture/mac3.json", "capture/manifest.json"]


def test_a_capture_rebuilt_as_a_simulation_plans_the_cluster_the_capture_shows(sim_cluster, tmp_path):
    """The round trip: mesh4 captured; the capture turned into a simulation spec (`python -m
    tests.simcluster from-capture`: the captured wiring and the captured, redacted domain UUIDs);
    that simulation brought up and configured. Its plan (the cables, their /30s, the backend)
    is the one the planner makes from the capture's own outputs, and the same wiring as the
    original's, each Mac by its placeholder."""
    from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_addresses import ip_plan
    from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_cables import links
    from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_hostfile import hostfile
    from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_topology import topology
    from ansible_collections.mlx.cluster.plugins.plugin_utils.planner import hostfile_text

    cluster = sim_cluster("mesh4")
    cluster.reset()
    run = run_site(cluster, tags=["capture"], python_env=None)
    assert run.rc == 0, run.failures()
    names = {h: f"mac{i}" for i, h in enumerate(sorted(cluster.hosts), 1)}
    assert f"m1 = {names['m1']}" in message(run)
    capture = read_capture(captures(cluster)[-1])
    spec = tmp_path / "rebuilt.yml"
    spec.write_text(spec_yaml(spec_of(capture, name="rebuilt")))

    # what the planner makes of the capture itself
    facts = {mac: facts_of(c, mac) for mac, c in capture["macs"].items()}
    found = links({m: f["thunderbolt"] for m, f in facts.items()})
    want_ip = ip_plan(found, interfaces={m: f["interfaces"] for m, f in facts.items()})
    want_topology = topology(found, list(facts), rdma={m: f.get("rdma") for m, f in facts.items()})

    def configured(c):
        done = run_site(c, tags=["network", "hostfile"], python_env=None)
        assert done.rc == 0, done.failures()
        art = c.inventory_path.parent / "artifacts"
        return json.loads((art / "plan.json").read_text()), (art / "hostfile.json").read_text()

    def wiring(plan, rename=lambda h: h):
        return sorted(
            tuple(sorted(f"{rename(e['host'])}:{e['iface']}" for e in (cab["a"], cab["b"])))
            for cab in plan["ip_plan"]["cables"].values()
        )

    original, _ = configured(cluster)
    rebuilt = SimCluster(str(spec), tmp_path / "state")
    rebuilt.up()
    try:
        again, again_hostfile = configured(rebuilt)
    finally:
        rebuilt.down()

    def nets(ip):
        return {cid: (c["network"], c["a"], c["b"]) for cid, c in ip["cables"].items()}

    assert nets(again["ip_plan"]) == nets(want_ip)  # the captured cables, their /30s and addresses
    assert again["topology"] == want_topology and want_topology["backend"] == original["topology"]["backend"]
    # the hostfile, byte for byte, as the planner writes it from the capture (the coordinators:
    # the addresses the rebuilt cluster's inventory gives)
    assert again_hostfile == hostfile_text(hostfile(want_topology, want_ip, coordinators=again["coordinators"]))
    assert wiring(again) == wiring(original, names.get)  # the original's wiring, renamed
