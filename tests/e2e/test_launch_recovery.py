"""Issue #14 item 4 on the simulated cluster: a launch whose RDMA cannot come up.

The pair's cable is Thunderbolt 5 with RDMA PORT_ACTIVE at both ends, so the plan is jaccl. The
simulated Macs run Linux, whose mlx has no JACCL: every rank's init fails at once with MLX's
"Cannot initialize jaccl distributed backend.", as a Mac's rank fails when RDMA cannot be brought
up (on a Mac MLX's text differs: tests/simcluster/README.md). Without a fallback the benchmark
fails naming the Macs, the cable and the fix, in seconds, and launches once; with
mlx_cluster_fallback_backend: ring it runs on the ring over the same cable and says so.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest

from tests.e2e.benchutil import bench_procs, settings
from tests.e2e.runner import run_site
from tests.tinymodel import make_tiny_model

pytestmark = [pytest.mark.sim, pytest.mark.slow]
LAUNCH = "Run the benchmark with mlx.launch (bounded in time)"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("model") / "tiny", dtype="float32")


def counting_python(cluster):
    """An interpreter for the ranks that logs each start on its Mac (launches.log in the home),
    then runs the venv's Python (the env stage's default): how many times a rank was started."""
    for h in cluster.hosts:
        home = f"/srv/{cluster.spec.host(h).home}"
        wrapper = cluster.home(h) / "countpy"
        wrapper.write_text(
            f'#!/bin/sh\necho "$*" >> {home}/launches.log\nexec {home}/mlx-cluster/venv/bin/python "$@"\n'
        )
        wrapper.chmod(0o755)
        (cluster.home(h) / "launches.log").unlink(missing_ok=True)
    (home,) = {f"/srv/{cluster.spec.host(h).home}" for h in cluster.hosts}
    return f"{home}/countpy"


def rank_starts(cluster, host):
    """The benchmark's ranks started on the Mac since counting_python."""
    try:
        lines = (cluster.home(host) / "launches.log").read_text().splitlines()
    except FileNotFoundError:
        return 0
    return sum(1 for ln in lines if "mlx_cluster_bench.py" in ln)


def _launch_events(run):
    return [
        e["event_data"]
        for e in run.events
        if e.get("event") in ("runner_on_ok", "runner_on_failed") and e["event_data"].get("task") == LAUNCH
    ]


def test_rdma_that_cannot_come_up_fails_naming_the_cable_or_falls_back_to_the_ring(sim_cluster, tiny):
    cluster = sim_cluster("pair")
    cluster.reset()
    bench = cluster.inventory_path.parent / "artifacts" / "bench"
    shutil.rmtree(bench, ignore_errors=True)  # other tests' runs
    auto = settings(cluster, tiny, mlx_cluster_backend="auto")

    # No fallback: one launch, failed at once, naming both ends of the cable and the fix.
    tic = time.monotonic()
    run = run_site(cluster, extravars=dict(auto, benchmark_python=counting_python(cluster)))
    assert run.rc != 0
    plan = json.loads((cluster.inventory_path.parent / "artifacts" / "plan.json").read_text())
    assert plan["hostfile"]["backend"] == "jaccl" and plan["fallback"] is None
    (failed,) = [e for e in _launch_events(run)]
    res = failed["res"]
    msg = res["msg"]
    assert "RDMA could not be brought up (backend jaccl)" in msg, msg
    assert "m1:en2 <-> m2:en2" in msg or "m2:en2 <-> m1:en2" in msg, msg
    for words in (
        "replug",
        "reboot",
        "rdma_ctl status",
        "Not retried",
        "mlx_cluster_fallback_backend: ring",
        "Cannot initialize jaccl distributed backend",
    ):
        assert words in msg, words
    # no retry: no Mac's rank was started twice, each rank whose failure is named exactly once (a
    # rank whose ssh was still connecting when the first one failed may never start), and the
    # launch ended well below the init timeout
    starts = {h: rank_starts(cluster, h) for h in cluster.hosts}
    named = {r["host"] for r in res["failed_ranks"] if not r.get("killed")}  # (not ended by the launcher)
    assert named and all(starts[h] == 1 for h in named) and all(n <= 1 for n in starts.values()), (starts, named)
    assert res["elapsed"] < 30, res["elapsed"]
    assert res["fallback"] is None and len(res["cmd"]) > 0
    assert not list(bench.glob("*.json"))
    for h in cluster.hosts:
        assert bench_procs(cluster, h) == [], h
    print(f"no fallback: failed in {res['elapsed']:.1f}s (site run {time.monotonic() - tic:.0f}s): {msg[:400]}")

    # With the fallback: both modes run on the ring over the same cable; the first says why it
    # fell back, the second starts on the ring at once.
    tic = time.monotonic()
    run = run_site(cluster, tags=["hostfile", "benchmark"], extravars=dict(auto, mlx_cluster_fallback_backend="ring"))
    assert run.rc == 0, run.failures()
    plan = json.loads((cluster.inventory_path.parent / "artifacts" / "plan.json").read_text())
    ring = plan["fallback"]["hostfile"]
    assert plan["fallback"]["from"] == "jaccl" and ring["backend"] == "ring"
    cable = plan["ip_plan"]["cables"][plan["links"]["cables"][0]["id"]]
    assert sorted(ip for h in ring["hosts"] for ip in h["ips"]) == sorted(
        [cable["a"]["address"], cable["b"]["address"]]
    )
    assert json.loads((cluster.inventory_path.parent / "artifacts" / "hostfile-ring.json").read_text()) == ring
    launches = _launch_events(run)
    assert [e["res"]["fallback"]["to"] for e in launches] == ["ring", "ring"]
    warnings = " ".join(str(w) for e in launches for w in e["res"].get("warnings") or [])
    assert "Falling back to the ring backend" in warnings and "RDMA is not tried again" in warnings
    results = [json.loads(p.read_text()) for p in sorted(bench.glob("*.json"))]
    assert sorted(r["mode"] for r in results) == ["pipeline", "tensor"]
    for r in results:
        assert (r["backend"], r["fallback_from"], r["world_size"]) == ("ring", "jaccl", 2)
        assert "RDMA could not be brought up" in r["fallback_reason"] and "en2" in r["fallback_reason"]
    assert "fell back from" in (bench / "results.md").read_text()
    report = (cluster.inventory_path.parent / "artifacts" / "report.html").read_text()
    assert "fell back from jaccl to the ring backend" in report
    print(
        f"with the fallback: site run {time.monotonic() - tic:.0f}s, launches "
        f"{[round(e['res']['elapsed'], 1) for e in launches]}s"
    )


def test_the_collective_check_falls_back_too_and_measures_the_cable_on_the_ring(sim_cluster, tiny):
    """After the sweep fell back, the cable alone is measured on its ring twin: RDMA is launched
    once in the whole stage."""
    cluster = sim_cluster("pair")
    extravars = dict(
        settings(cluster, tiny, mlx_cluster_backend="auto"),
        mlx_cluster_fallback_backend="ring",
        net_check_max_bytes=1 << 16,
        net_check_cable_bytes=1 << 20,
        net_check_iters=2,
        net_check_timeout=120,
    )
    run = run_site(cluster, tags=["network", "hostfile", "net_check"], extravars=extravars)
    assert run.rc == 0, run.failures()
    results = json.loads((cluster.inventory_path.parent / "artifacts" / "net_check" / "results.json").read_text())
    sweep = results["sweep"]
    assert (sweep["backend"], sweep["fallback_from"], sweep["world_size"]) == ("ring", "jaccl", 2)
    assert all(r["ok"] for r in sweep["results"]) and "RDMA could not be brought up" in sweep["fallback_reason"]
    (cable,) = results["cables"]
    assert cable["gbps"] and cable["gbps"] > 0
    per_cable = [
        e["event_data"]
        for e in run.events
        if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == "Measure each cable alone"
    ]
    cmds = [r["cmd"] for e in per_cable for r in e["res"].get("results", [e["res"]]) if r.get("cmd")]
    assert cmds and all(c[c.index("--hostfile") + 1].endswith("-ring.json") for c in cmds), cmds
