"""The plan step on Macs whose home directories differ: the default directory (~/mlx-cluster)
would be a different path on each Mac, which mlx.launch cannot use (it runs one command line on
every Mac), so the plan stops naming both paths and the fix; with one absolute directory the
cluster converges, the hostfile sits at that path on both Macs, and a re-run changes nothing
(discovery reads the hostfile where the plan puts it)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.runner import ROOT, run_site

pytestmark = [pytest.mark.sim, pytest.mark.slow]

SPEC = ROOT / "tests" / "simcluster" / "specs" / "pair_homes.yml"
# what the plan's message says to make: one directory, the same on each Mac, the user's own
# (not below /Users/Shared, where every user can write)
ONE_DIR = "/opt/mlx-cluster"


def test_homes_differ_one_directory_converges_then_nothing_changes(sim_cluster):
    cluster = sim_cluster(SPEC)
    cluster.reset()
    homes = {h: cluster.exec(h, ["sh", "-c", "echo ~"]).stdout.strip() for h in cluster.hosts}
    assert homes == {"m1": "/srv/admin", "m2": "/srv/alice"}

    refused = run_site(cluster, tags=["hostfile"])
    assert refused.rc != 0
    (failure,) = [
        f
        for f in refused.failures()
        if f[1] == "Plan links, topology, addresses and hostfile (once, on the controller)"
    ]
    assert "m1 /srv/admin/mlx-cluster" in failure[2] and "m2 /srv/alice/mlx-cluster" in failure[2], failure
    assert "mlx_cluster_remote_dir" in failure[2], failure

    assert f"sudo mkdir -p {ONE_DIR} && sudo chown <the login user> {ONE_DIR}" in failure[2], failure
    for host in cluster.hosts:
        cluster.exec(host, ["mkdir", "-p", ONE_DIR], sudo=True, check=True)
        cluster.exec(host, ["chown", cluster.user, ONE_DIR], sudo=True, check=True)
    settings = {"mlx_cluster_remote_dir": ONE_DIR}
    first = run_site(cluster, extravars=settings)
    assert first.rc == 0, first.failures()
    hostfile = json.loads((cluster.inventory_path.parent / "artifacts" / "hostfile.json").read_text())
    for host in cluster.hosts:
        assert json.loads(cluster.exec(host, ["cat", f"{ONE_DIR}/hostfile.json"]).stdout) == hostfile, host
    plan = json.loads((cluster.inventory_path.parent / "artifacts" / "plan.json").read_text())
    assert plan["remote_dir"] == ONE_DIR and plan["hostfile_path"] == f"{ONE_DIR}/hostfile.json"

    second = run_site(cluster, extravars=settings)
    assert second.rc == 0, second.failures()
    assert second.changed() == 0, second.stats
    assert second.results("Write the hostfile at the same path on every Mac") == []
