"""Issue 15: the model spreads along the cables (model_sync_source: tree). On a ring of four with
the model on rank 0 only, every Mac gets it, each copy from the Mac the tree names over that
Mac's own cable (seen in the sender's rsync argv and the receiver's sshd log), m3 two hops out
from a Mac one hop out; a second run changes nothing; --check after a change on rank 0 lists
that file for every Mac and copies nothing."""

from __future__ import annotations

import json
import subprocess

import pytest

from ansible_collections.mlx.cluster.plugins.plugin_utils import sync_plan
from tests.e2e.benchutil import REMOTE_MODEL, controller_model, fresh_models, settings
from tests.e2e.runner import run_site
from tests.tinymodel import make_tiny_model

pytestmark = [pytest.mark.sim, pytest.mark.slow]

TREE_TASK = "Copy the model along the cables, every copy at once"
CHECK_TASK = "Copy the model from rank 0 to the other Macs, over Thunderbolt"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("model") / "tiny", dtype="float32")


def tree_copies(run):
    """{host: module result} of the tree's copy task (skipped hosts left out)."""
    return {e["host"]: e["res"] for e in run.results(TREE_TASK) if not e["res"].get("skipped")}


def test_tree_on_ring4_every_copy_over_the_senders_own_cable(sim_cluster, tiny):
    cluster = sim_cluster("ring4")
    seeded = fresh_models(cluster, tiny)
    cluster.clear_argv_logs()
    extravars = settings(
        cluster,
        tiny,
        model_sync_source="tree",
        model_sync_tree_from="rank0",
        model_sync_source_path="",
        model_sync_transport="rsync",
    )
    files = sorted(p.relative_to(tiny).as_posix() for p in tiny.rglob("*") if p.is_file())

    first = run_site(cluster, tags=["network", "hostfile", "models"], extravars=extravars)
    assert first.rc == 0, first.failures()
    plan = json.loads((cluster.inventory_path.parent / "artifacts" / "plan.json").read_text())
    rounds = sync_plan.plan_rounds(plan, source="m1")
    assert rounds["depth"] == 2 and rounds["lan"] == []
    got = tree_copies(first)
    assert sorted(got) == ["m2", "m3", "m4"]
    for host, res in got.items():
        planned = rounds["copies"][host]
        sender, address = planned["src"], planned["address"]
        assert res["changed"] is True and sorted(res["transferred"]) == files, (host, res)
        # the sender ran rsync to this Mac's address on their cable...
        cable_ends = {e["peer_address"] for e in plan["ip_plan"]["hosts"][sender] if e["peer_host"] == host}
        assert address in cable_ends, (host, address, cable_ends)
        assert res["cmd"][-1] == f"{address}:{REMOTE_MODEL}/", res["cmd"]
        assert any(
            a[0] == "rsync" and "--server" not in a and a[-1] == res["cmd"][-1] for a in cluster.argv_log(sender)
        ), (sender, host)
        # ...and this Mac's sshd saw it arrive from the sender's address on that cable
        assert f"from {planned['src_address']} " in cluster.sshd_log(host), host
        dest = cluster.home(host) / "mlx-cluster" / "models" / "tiny"
        assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == files
    assert rounds["copies"]["m3"]["round"] == 2 and rounds["copies"]["m3"]["src"] in ("m2", "m4")
    # m3's sender passed on a copy it was still receiving (wait_for, its own sender named)
    m3 = got["m3"]
    assert m3["passes"] and m3["passes"][-1]["excluded"] == 0, m3["passes"]
    # only the Macs that send got a cluster key
    senders = {c["src"] for c in rounds["copies"].values()}
    for h in cluster.hosts:
        assert (cluster.home(h) / ".ssh" / "mlx_cluster_ed25519").exists() == (h in senders), h

    again = run_site(cluster, tags=["models"], extravars=extravars)
    assert again.rc == 0, again.failures()
    assert again.changed() == 0, again.stats
    assert sorted(tree_copies(again)) == ["m2", "m3", "m4"]

    config = seeded / "config.json"
    config.write_text(config.read_text() + "\n")  # one byte more, a new time, on rank 0 only
    check = run_site(cluster, tags=["models"], extravars=extravars, check=True)
    assert check.rc == 0, check.failures()
    assert tree_copies(check) == {}
    listed = {e["host"]: e["res"] for e in check.results(CHECK_TASK) if not e["res"].get("skipped")}
    assert sorted(listed) == ["m2", "m3", "m4"]
    for h, res in listed.items():
        assert res["changed"] is True and res["transferred"] == ["config.json"], (h, res)
    for h in ("m2", "m3", "m4"):  # --check copied nothing
        dest = cluster.home(h) / "mlx-cluster" / "models" / "tiny" / "config.json"
        assert dest.read_bytes() == (tiny / "config.json").read_bytes(), h

    # rank 0 as the source: the one Mac across the ring from it, with no cable to it, is named
    rank0 = run_site(cluster, tags=["models"], extravars={**extravars, "model_sync_source": "rank0"}, check=True)
    assert rank0.rc == 0, rank0.failures()
    uncabled = {h for h in cluster.hosts if h != "m1"} - {e["peer_host"] for e in plan["ip_plan"]["hosts"]["m1"]}
    assert uncabled == {"m3"}
    (warned,) = rank0.results("Warn about Macs that rank 0 has no Thunderbolt cable to")
    msgs = [r["msg"] for r in warned["res"]["results"] if not r.get("skipped")]
    assert len(msgs) == 1 and "no Thunderbolt cable between m1 and m3" in msgs[0], msgs

    # a Mac on the way fails: the Mac behind it is named with its way, the other still gets its copy
    way = rounds["copies"]["m3"]["src"]
    for h in cluster.hosts:
        if h != "m1":
            fresh = cluster.home(h) / "mlx-cluster" / "models"
            subprocess.run(["rm", "-rf", str(fresh / "tiny")], check=True)
    (cluster.home(way) / "mlx-cluster" / "models" / "tiny").write_text("in the way\n")
    broken = run_site(cluster, tags=["models"], extravars=extravars)
    assert broken.rc != 0
    failed = {task: (h, msg) for h, task, msg in broken.failures()}
    assert sorted(failed) == [
        "Check the destination on every Mac, and make the directory that holds it",
        "Stop when a Mac's copy differs from the source",
    ], failed
    assert failed["Check the destination on every Mac, and make the directory that holds it"][0] == way
    assert "m3" in failed["Stop when a Mac's copy differs from the source"][1]  # m3 lacks its copy, named
    (named,) = broken.results("Name the Macs whose sender dropped out")
    msgs = [r["msg"] for r in named["res"]["results"] if not r.get("skipped")]
    assert (
        len(msgs) == 1 and f"m3 gets no copy in this run: {way}, on its way from m1 (m1 -> {way} -> m3)" in msgs[0]
    ), msgs
    other = ({"m2", "m4"} - {way}).pop()
    assert sorted(tree_copies(broken)) == [other]
    (cluster.home(way) / "mlx-cluster" / "models" / "tiny").unlink()


CONTROLLER_TASK = "Copy the model from the controller to every Mac"


def test_tree_from_the_controller_one_copy_over_the_lan_then_the_cables(sim_cluster, tiny):
    """model_sync_tree_from: controller on ring4: the controller sends one copy over the
    management network, to the most central Mac of the ring (m1 by rank), which passes each file
    on along the cables as it arrives; the Macs further on get theirs from a Mac over a cable.
    A re-run changes nothing; --check after a change on the controller lists that file for
    every Mac (the controller's dry run) and copies nothing."""
    cluster = sim_cluster("ring4")
    model = controller_model(cluster, tiny)
    extravars = settings(
        cluster, model, model_sync_source="tree", model_sync_tree_from="controller", model_sync_transport="rsync"
    )
    files = sorted(p.relative_to(tiny).as_posix() for p in tiny.rglob("*") if p.is_file())

    first = run_site(cluster, tags=["network", "hostfile", "models"], extravars=extravars)
    assert first.rc == 0, first.failures()
    plan = json.loads((cluster.inventory_path.parent / "artifacts" / "plan.json").read_text())
    rounds = sync_plan.plan_rounds(plan, source=None)
    assert rounds["lan"] == ["m1"] and rounds["warnings"] == []
    got = tree_copies(first)
    assert sorted(got) == ["m1", "m2", "m3", "m4"]
    # the one copy over the management network: from the controller, as Ansible reaches m1
    assert got["m1"]["cmd"][-1] == f"{cluster.mgmt_address('m1')}:{REMOTE_MODEL}/", got["m1"]["cmd"]
    assert not got["m1"]["passes"]
    for host in ("m2", "m3", "m4"):
        planned = rounds["copies"][host]
        assert planned["via"] == "thunderbolt" and planned["src"] != host
        assert got[host]["cmd"][-1] == f"{planned['address']}:{REMOTE_MODEL}/", (host, got[host]["cmd"])
        assert f"from {planned['src_address']} " in cluster.sshd_log(host), host
        assert got[host]["passes"], host  # passed on while its sender still received
        dest = cluster.home(host) / "mlx-cluster" / "models" / "tiny"
        assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == files
    # the controller sent one copy, not one per Mac
    assert [h for h, res in got.items() if res["cmd"][-1].startswith(cluster.mgmt_address(h))] == ["m1"]

    again = run_site(cluster, tags=["models"], extravars=extravars)
    assert again.rc == 0 and again.changed() == 0, (again.failures(), again.stats)

    config = model / "config.json"
    config.write_text(config.read_text() + "\n")
    check = run_site(cluster, tags=["models"], extravars=extravars, check=True)
    assert check.rc == 0, check.failures()
    assert tree_copies(check) == {}
    listed = {e["host"]: e["res"] for e in check.results(CONTROLLER_TASK) if not e["res"].get("skipped")}
    assert sorted(listed) == ["m1", "m2", "m3", "m4"]
    assert all(res["transferred"] == ["config.json"] for res in listed.values()), listed
    for h in cluster.hosts:
        dest = cluster.home(h) / "mlx-cluster" / "models" / "tiny" / "config.json"
        assert dest.read_bytes() == (tiny / "config.json").read_bytes(), h
