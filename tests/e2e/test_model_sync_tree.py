"""Issue 15: the model spreads along the cables (model_sync_source: tree). On a ring of four with
the model on rank 0 only, every Mac gets it, each copy from the Mac the rounds name over that
Mac's own cable (seen in the sender's rsync argv and the receiver's sshd log), m3 in the second
round from a Mac that got it in the first; a second run changes nothing; --check after a change
on rank 0 lists that file for every Mac and copies nothing."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from ansible_collections.mlx.cluster.plugins.plugin_utils import sync_plan
from tests.e2e.benchutil import REMOTE_MODEL, settings
from tests.e2e.runner import run_site
from tests.tinymodel import make_tiny_model

pytestmark = [pytest.mark.sim, pytest.mark.slow]

ROUND_TASK = re.compile(r"^Copy the model along the cables, round (\d+)$")
CHECK_TASK = "Copy the model from rank 0 to the other Macs, over Thunderbolt"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("model") / "tiny", dtype="float32")


def round_copies(run):
    """{host: (round, module result)} of the round tasks that copied (skipped hosts left out)."""
    out = {}
    for e in run.events:
        data = e.get("event_data") or {}
        m = ROUND_TASK.match(data.get("task") or "")
        if e.get("event") == "runner_on_ok" and m and not data["res"].get("skipped"):
            out[data["host"]] = (int(m.group(1)), data["res"])
    return out


def test_tree_on_ring4_every_copy_over_the_senders_own_cable(sim_cluster, tiny):
    cluster = sim_cluster("ring4")
    cluster.reset()
    for h in cluster.hosts:
        shutil.rmtree(cluster.home(h) / "mlx-cluster" / "models", ignore_errors=True)
    seeded = cluster.home("m1") / "mlx-cluster" / "models" / "tiny"
    shutil.copytree(tiny, seeded)
    cluster.clear_argv_logs()
    extravars = settings(cluster, tiny, model_sync_source="tree", model_sync_source_path="")
    files = sorted(p.relative_to(tiny).as_posix() for p in tiny.rglob("*") if p.is_file())

    first = run_site(cluster, tags=["network", "hostfile", "models"], extravars=extravars)
    assert first.rc == 0, first.failures()
    plan = json.loads((cluster.inventory_path.parent / "artifacts" / "plan.json").read_text())
    rounds = sync_plan.plan_rounds(plan, source="m1")
    assert rounds["depth"] == 2 and rounds["lan"] == []
    got = round_copies(first)
    assert sorted(got) == ["m2", "m3", "m4"]
    for host, (k, res) in got.items():
        planned = rounds["copies"][host]
        sender, address = planned["src"], planned["address"]
        assert k == planned["round"], (host, k, planned)
        assert res["changed"] is True and sorted(res["transferred"]) == files, (host, res)
        # the sender ran rsync to this Mac's address on their cable...
        cable_ends = {e["peer_address"] for e in plan["ip_plan"]["hosts"][sender] if e["peer_host"] == host}
        assert address in cable_ends, (host, address, cable_ends)
        assert res["cmd"][-1] == f"{address}:{REMOTE_MODEL}/", res["cmd"]
        assert any(a[0] == "rsync" and "--server" not in a and a[-1] == res["cmd"][-1]
                   for a in cluster.argv_log(sender)), (sender, host)
        # ...and this Mac's sshd saw it arrive from the sender's address on that cable
        assert f"from {planned['src_address']} " in cluster.sshd_log(host), host
        dest = cluster.home(host) / "mlx-cluster" / "models" / "tiny"
        assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == files
    assert got["m3"][0] == 2 and rounds["copies"]["m3"]["src"] in ("m2", "m4")
    # only the Macs that send got a cluster key
    senders = {c["src"] for c in rounds["copies"].values()}
    for h in cluster.hosts:
        assert (cluster.home(h) / ".ssh" / "mlx_cluster_ed25519").exists() == (h in senders), h

    again = run_site(cluster, tags=["models"], extravars=extravars)
    assert again.rc == 0, again.failures()
    assert again.changed() == 0, again.stats
    assert sorted(round_copies(again)) == ["m2", "m3", "m4"]

    config = seeded / "config.json"
    config.write_text(config.read_text() + "\n")  # one byte more, a new time, on rank 0 only
    check = run_site(cluster, tags=["models"], extravars=extravars, check=True)
    assert check.rc == 0, check.failures()
    assert round_copies(check) == {}
    listed = {e["host"]: e["res"] for e in check.results(CHECK_TASK) if not e["res"].get("skipped")}
    assert sorted(listed) == ["m2", "m3", "m4"]
    for h, res in listed.items():
        assert res["changed"] is True and res["transferred"] == ["config.json"], (h, res)
    for h in ("m2", "m3", "m4"):  # --check copied nothing
        dest = cluster.home(h) / "mlx-cluster" / "models" / "tiny" / "config.json"
        assert dest.read_bytes() == (tiny / "config.json").read_bytes(), h
