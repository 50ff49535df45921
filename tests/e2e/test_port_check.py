"""The port check end to end on the simulated pair: a Mac whose firewall drops the ranks' port
fails the run before any launch, naming both Macs, the port, the cause and the fix; unblocked,
the same run passes and reports every Mac's application firewall."""

from __future__ import annotations

import os
import re
import sys

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_launch import STARTING_PORT
from tests.e2e.runner import defaults, run_site
from tests.tinymodel import make_tiny_model

pytestmark = [pytest.mark.sim, pytest.mark.slow]

TAGS = ["network", "hostfile", "port_check"]
FAIL = "Fail naming each pair of Macs that cannot reach a port MLX uses"
REPORT = "Report the ports and the application firewalls"
SWEEP = "Sweep all_sum sizes across the whole cluster (and check every sum)"  # net_check's first launch
RING = {"mlx_cluster_backend": "ring"}  # what the simulated Macs launch (no JACCL on Linux)
MODEL = "/srv/admin/models/tiny"  # the same path inside every simulated Mac
BENCH = "Run the benchmark in each mode"  # the benchmark's launch
SERVE = "Restart every rank when the server is not running with these settings"  # the server's


def listeners(cluster, host):
    """The probe's listeners still running on the Mac (argv `python - --run-id ...`)."""
    ps = cluster.exec(host, ["ps", "-ax", "-ww", "-o", "args="], check=True).stdout
    return [ln for ln in ps.splitlines() if " - --run-id " in ln]


def test_a_blocked_port_fails_before_launch_naming_both_macs_and_the_fix(sim_cluster):
    cluster = sim_cluster("pair")
    cluster.reset()
    # m1's application firewall is on, in stealth mode, and blocks the interpreter the ranks run;
    # its packet filter drops what reaches the ranks' ports (the ring's two first ports)
    app = os.path.realpath(sys.executable)
    cluster.set_host("m1", firewall={"enabled": True, "stealth": True, "apps": {app: "blocked"}})
    # (and the server's, which start at a port of their own)
    server_port = defaults("mlx_server")["mlx_server_ring_port"]
    cluster.block_ports("m1", [STARTING_PORT, STARTING_PORT + 1, server_port, server_port + 1])
    for h in cluster.hosts:
        make_tiny_model(cluster.home(h) / "models" / "tiny")
    try:
        ring = run_site(cluster, tags=TAGS, extravars=RING, python_env="existing")
        # jaccl (the pair's plan, TB5 with RDMA): rank 0's coordinator port, on its LAN address
        jaccl = run_site(cluster, tags=TAGS, python_env="existing")
        # a launch that runs the port check first (the collective check): stopped before it launches
        swept = run_site(
            cluster, tags=["net_check"], extravars=dict(RING, net_check_max_bytes=1 << 20), python_env="existing"
        )
        # and so do the benchmark and the server, each with its own port check
        bench = run_site(
            cluster, tags=["benchmark"], extravars=dict(RING, benchmark_model=MODEL), python_env="existing"
        )
        served = run_site(
            cluster,
            tags=["server"],
            python_env="existing",
            extravars=dict(RING, mlx_server_model=MODEL, mlx_server_supervisor="process"),
        )
    finally:
        cluster.unblock_ports("m1")
    assert ring.rc != 0 and jaccl.rc != 0
    (fail,) = ring.results(FAIL)
    msg = fail["res"]["msg"]
    (line,) = [ln for ln in msg.splitlines() if "cannot reach" in ln]  # m1 reaches m2: one pair
    assert re.search(
        r"^- m2 cannot reach m1 10\.208\.\d+\.\d+:3232[34] \(rank \d's ring listener\): no answer "
        r"within 5 s",
        line,
    ), msg
    assert "application firewall on m1 is on, in stealth mode" in line and f"blocks {app}" in line, line
    fw_tool = "/usr/libexec/ApplicationFirewall/socketfilterfw"
    assert f"fix: on m1: `sudo {fw_tool} --add {app}`, then `sudo {fw_tool} --unblockapp {app}`" in line
    assert "application firewall: m1 on (stealth, signed downloads allowed, interpreter blocked), m2 off" in msg, msg
    (fail,) = jaccl.results(FAIL)
    (line,) = [ln for ln in fail["res"]["msg"].splitlines() if "cannot reach" in ln]
    assert re.search(
        rf"^- m2 cannot reach m1 {re.escape(cluster.mgmt_address('m1'))}:{STARTING_PORT} "
        r"\(the JACCL coordinator, rank 0\): no answer",
        line,
    ), line
    # the collective check stopped at its port check: the sweep never ran on any Mac
    assert swept.rc != 0 and swept.results(FAIL), swept.failures()
    assert [r for r in swept.results(SWEEP) if not r["res"].get("skipped")] == []
    for run, launch in ((bench, BENCH), (served, SERVE)):
        assert run.rc != 0 and run.results(FAIL), run.failures()
        assert [r for r in run.results(launch) if not r["res"].get("skipped")] == [], launch
        assert "\n- m2 cannot reach m1 " in run.results(FAIL)[0]["res"]["msg"], run.results(FAIL)
    ps = {h: cluster.exec(h, ["ps", "-ax", "-ww", "-o", "args="], check=True).stdout for h in cluster.hosts}
    assert not any("mlx_cluster_bench.py" in out or "mlx_cluster_server.py" in out for out in ps.values()), ps
    # the socketfilterfw getters ran (read-only), never a setter
    fw = [a for h in cluster.hosts for a in cluster.argv_log(h) if a and a[0].endswith("socketfilterfw")]
    assert fw and all(not any(x.startswith("--set") or x in ("--add", "--unblockapp") for x in a) for a in fw), fw
    assert listeners(cluster, "m1") == [] and listeners(cluster, "m2") == []

    # unblocked (packet filter gone, firewall off): the same run passes
    cluster.set_host("m1", firewall={"enabled": False})
    ok = run_site(cluster, tags=TAGS, extravars=RING, python_env="existing")
    assert ok.rc == 0, ok.failures()
    (report,) = ok.results(REPORT)
    assert report["res"]["msg"] == (
        "port check: 2 port(s) reachable from every Mac that connects to them; application firewall: m1 off, m2 off"
    )
    assert ok.results(FAIL) == []
    assert listeners(cluster, "m1") == [] and listeners(cluster, "m2") == []

    # the simulated socketfilterfw, as macOS's: setters need root, getters answer one line each
    refused = cluster.exec("m2", ["socketfilterfw", "--setglobalstate", "on"])
    assert (refused.returncode, refused.stdout) == (255, "Must be root to change settings.\n")
    cluster.exec("m2", ["socketfilterfw", "--setglobalstate", "on"], sudo=True, check=True)
    got = cluster.exec(
        "m2", ["socketfilterfw", "--getglobalstate", "--getstealthmode", "--getappblocked", app], check=True
    )
    assert got.stdout == (
        "Firewall is enabled. (State = 1)\nFirewall stealth mode is off\nThe application is not part of the firewall\n"
    )
    cluster.reset()
    assert (
        cluster.exec("m2", ["socketfilterfw", "--getglobalstate"], check=True).stdout
        == "Firewall is disabled. (State = 0)\n"
    )
