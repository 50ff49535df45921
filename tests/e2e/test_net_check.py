"""net_check on the simulated cluster: the all_sum sweep checks every sum, and a cable that
is clearly slower than the others (here: shaped to a fraction of a veth's speed, like a
TB4 cable or a dock leg in a TB5 mesh) is named by host and port."""

from __future__ import annotations

import json

import pytest

from tests.e2e.runner import run_site

pytestmark = [pytest.mark.sim, pytest.mark.slow]

SETTINGS = {
    "mlx_cluster_backend": "ring",
    "net_check_max_bytes": 1 << 20,
    "net_check_cable_bytes": 4 << 20,
    "net_check_iters": 3,
    "net_check_timeout": 180,
}


def test_sweep_is_correct_and_the_slow_cable_is_named(sim_cluster):
    cluster = sim_cluster("mesh3_dock")
    cluster.reset()
    ok = run_site(cluster, extravars={"mlx_cluster_backend": "ring"})
    assert ok.rc == 0, ok.failures()
    plan = json.loads((cluster.inventory_path.parent / "artifacts" / "plan.json").read_text())
    slow = next(c for c in plan["ip_plan"]["cables"].values() if {c["a"]["host"], c["b"]["host"]} == {"m1", "m3"})
    for end in (slow["a"], slow["b"]):  # shape both directions of that one cable
        res = cluster.exec(
            end["host"],
            [
                "tc",
                "qdisc",
                "replace",
                "dev",
                end["iface"],
                "root",
                "tbf",
                "rate",
                "40mbit",
                "burst",
                "32kbit",
                "latency",
                "400ms",
            ],
        )
        assert res.returncode == 0, res.stderr
    try:
        run = run_site(cluster, tags=["net_check"], extravars=SETTINGS)
        results = json.loads((cluster.inventory_path.parent / "artifacts" / "net_check" / "results.json").read_text())
        assert results["sweep"]["world_size"] == 3
        assert all(r["ok"] for r in results["sweep"]["results"])
        assert len(results["cables"]) == 3
        assert run.rc != 0
        msg = "\n".join(m for _, _, m in run.failures())
        name = f"{slow['a']['host']}:{slow['a']['iface']} <-> {slow['b']['host']}:{slow['b']['iface']}"
        assert f"slow cables: {name}" in msg, msg
        assert msg.count("<->") == 1, msg  # only that one
        # measured again before it was called slow (net_check_slow_recheck: 1), the best run counts
        assert "the best of 2 measurements" in msg, msg
        shaped = next(c for c in results["cables"] if c["name"] == name)
        assert len(shaped["runs"]) == 2 and shaped["gbps"] == max(shaped["runs"]), shaped
    finally:
        for end in (slow["a"], slow["b"]):
            cluster.exec(end["host"], ["tc", "qdisc", "del", "dev", end["iface"], "root"])
