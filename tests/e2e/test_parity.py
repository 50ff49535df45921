"""Parity with MLX's own `mlx.distributed_config --over thunderbolt --auto-setup`, run
unmodified against the same simulated cluster.

Documented differences (each intended; see tests/unit/filter/test_planner_mlx_diff.py):
- addresses: MLX hard-codes 192.168.x.y/30; we plan from mlx_cluster_ip_pool (10.208/16);
- with several cables per pair, MLX uses the minimum count for every pair, we list them all
  (not exercised by mesh4/ring4, which have one cable per pair);
- ring choice: MLX keeps its DFS's first longest ring, we take the widest ring, then the
  lexicographically smallest; ring4 has a single ring, so the cables must be the same.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.runner import run_site

pytestmark = [pytest.mark.sim, pytest.mark.slow]


def mlx_config(cluster, tmp_path):
    out = tmp_path / "mlx_hostfile.json"
    res = subprocess.run(
        [
            str(Path(sys.executable).parent / "mlx.distributed_config"),
            "--over",
            "thunderbolt",
            "--hosts",
            ",".join(cluster.hosts),
            "--auto-setup",
            "--output-hostfile",
            str(out),
        ],
        env=cluster.harness_env(),
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(out.read_text())


def ours(cluster):
    run = run_site(cluster)
    assert run.rc == 0, run.failures()
    art = cluster.inventory_path.parent / "artifacts"
    return json.loads((art / "hostfile.json").read_text()), json.loads((art / "plan.json").read_text())


def cables_by_subnet(cluster):
    """{frozenset of the two "host:iface" ends} of every /30 on the Macs' Thunderbolt ports, as
    the Macs hold them (read inside each Mac): the cables an address plan put to use."""
    ends = {}
    for h in cluster.hosts:
        for i in json.loads(cluster.exec(h, ["ip", "-j", "addr"]).stdout):
            for a in i.get("addr_info", []):
                if a.get("family") == "inet" and a.get("prefixlen") == 30:
                    net = ipaddress.ip_interface(f"{a['local']}/30").network
                    ends.setdefault(net, set()).add(f"{h}:{i['ifname']}")
    assert all(len(e) == 2 for e in ends.values()), ends
    return {frozenset(e) for e in ends.values()}


def ring_edges(order):
    return {frozenset((order[i], order[(i + 1) % len(order)])) for i in range(len(order))}


def test_mesh4_jaccl_hostfile_equals_mlx(sim_cluster, tmp_path):
    cluster = sim_cluster("mesh4")
    cluster.reset()
    mlx = mlx_config(cluster, tmp_path)
    mlx_cables = cables_by_subnet(cluster)
    cluster.reset()
    mine, plan = ours(cluster)
    assert mlx["backend"] == mine["backend"] == "jaccl"
    # Same ranks, same coordinator addresses (the en0 address), same rdma matrix.
    assert [h["ssh"] for h in mine["hosts"]] == [h["ssh"] for h in mlx["hosts"]]
    assert [h["ips"] for h in mine["hosts"]] == [h["ips"] for h in mlx["hosts"]]
    assert [h["rdma"] for h in mine["hosts"]] == [h["rdma"] for h in mlx["hosts"]]
    # Same cables: MLX's /30s sit on exactly the interfaces we addressed, pairing the same ends.
    planned = {
        frozenset((f"{c['a']['host']}:{c['a']['iface']}", f"{c['b']['host']}:{c['b']['iface']}"))
        for c in plan["ip_plan"]["cables"].values()
    }
    assert len(planned) == 6 and mlx_cables == planned, (mlx_cables, planned)


def test_ring4_ring_uses_the_same_cables_as_mlx(sim_cluster, tmp_path):
    cluster = sim_cluster("ring4")
    cluster.reset()
    mlx = mlx_config(cluster, tmp_path)
    mlx_ifaces = {}
    for h in mlx["hosts"]:  # where MLX put each rank's address
        addrs = json.loads(cluster.exec(h["ssh"], ["ip", "-j", "addr"]).stdout)
        mlx_ifaces[h["ssh"]] = {a["local"]: i["ifname"] for i in addrs for a in i.get("addr_info", [])}
    cluster.reset()
    mine, plan = ours(cluster)
    assert mlx["backend"] == mine["backend"] == "ring"
    mlx_order = [h["ssh"] for h in mlx["hosts"]]
    my_order = [h["ssh"] for h in mine["hosts"]]
    assert ring_edges(mlx_order) == ring_edges(my_order)
    # Each rank listens on its cable to the previous rank, in both hostfiles.
    my_iface = {(x["iface"], h): x["peer_host"] for h, links in plan["ip_plan"]["hosts"].items() for x in links}
    for order, hostfile, iface_of in ((my_order, mine, None), (mlx_order, mlx, mlx_ifaces)):
        for i, h in enumerate(hostfile["hosts"]):
            prev = order[i - 1]
            if iface_of is None:
                iface = next(x["iface"] for x in plan["ip_plan"]["hosts"][h["ssh"]] if x["address"] == h["ips"][0])
            else:
                iface = iface_of[h["ssh"]][h["ips"][0]]
            assert my_iface[(iface, h["ssh"])] == prev, (h, iface, prev)
