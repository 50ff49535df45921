"""A macOS command that never answers on one Mac (issue 11): the run ends within the bound
(mlx_cluster_command_timeout, small here) naming the Mac, the command and the fix; the other
Macs finish; once the Mac answers again, a re-run passes.
- a hung `ibv_devinfo` (RDMA wedged) is a finding: RDMA unusable on that Mac, named by
  rdma_check; nothing fails.
- a hung `system_profiler` (no Thunderbolt data at all) fails that Mac's discovery: the run
  ends non-zero naming it, after every other Mac's discovery finished.
Adds its rows to docs/reliability.md like tests/e2e/test_faults.py (tests/e2e/reliability.py)."""

from __future__ import annotations

import time

import pytest

from tests.e2e.reliability import Fault
from tests.e2e.runner import run_site

pytestmark = [pytest.mark.sim, pytest.mark.slow]

BOUND = 5
SMALL_BOUND = {"mlx_cluster_command_timeout": BOUND}
DISCOVER = "Discover Thunderbolt ports, RDMA devices, addresses and system facts"
# What a run costs beyond one bound, at most, on a loaded 2-core runner: Ansible's own work
# (the healthy run is measured in the same test and added on top).
MARGIN = 30


def timed(cluster, **kw):
    start = time.monotonic()
    run = run_site(cluster, tags=["rdma_check"], extravars=SMALL_BOUND, **kw)
    return run, time.monotonic() - start


NAMED = "Name the Mac whose Python cannot run, or the discovery's own failure"


def discovered(run):
    """{host: "ok"|"failed"} of the discovery task."""
    return {
        e["event_data"]["host"]: e["event"].removeprefix("runner_on_")
        for e in run.events
        if e.get("event") in ("runner_on_ok", "runner_on_failed") and e["event_data"].get("task") == DISCOVER
    }


def starts(cluster, host, command):
    """How many times `command` was started on `host` since its argv log was last cleared."""
    return sum(1 for a in cluster.argv_log(host) if a and a[0].rsplit("/", 1)[-1] == command)


def not_running(cluster, host, command):
    """The PIDs (inside the Mac) of every logged run of `command` that still runs there."""
    left = []
    for rec in cluster.argv_records(host):
        if rec["argv"] and rec["argv"][0].rsplit("/", 1)[-1] == command:
            r = cluster.exec(host, ["cat", f"/proc/{rec['pid']}/stat"])
            if r.returncode == 0 and r.stdout.rsplit(")", 1)[1].split()[0] != "Z":
                left.append(rec["pid"])
    return left


def test_a_hung_ibv_devinfo_makes_rdma_unusable_on_that_mac_named_by_rdma_check(sim_cluster):
    cluster = sim_cluster("mesh4")
    cluster.reset()
    _, healthy = timed(cluster)
    with Fault("ibv_devinfo never answers on one Mac (RDMA wedged)") as f:
        cluster.set_host("m2", hang=["ibv_devinfo"])
        cluster.clear_argv_logs()
        try:
            run, took = timed(cluster)
            text = run.preflight_summary()
            line = next((ln for ln in text.splitlines() if "did not answer" in ln), "")
            f.message(line)
            assert took < healthy + BOUND + MARGIN, (took, healthy)
            assert run.rc == 0, run.failures()  # a finding, not a failure (RDMA is not required)
            assert discovered(run) == {h: "ok" for h in cluster.hosts}
            assert line == (
                f"[WARNING] m2: RDMA on m2 is unusable: `ibv_devinfo -v` did not answer within "
                f"{BOUND} s on this Mac (stopped) -> fix: RDMA looks wedged on this Mac: replug its "
                f"Thunderbolt cables, or reboot the Mac if that does not help, then re-run"
            ), text
            assert [ln for ln in text.splitlines() if "did not answer" in ln] == [line]  # m2 alone
            # it really hung there, and was started once: no retry stretched the bound
            assert starts(cluster, "m2", "ibv_devinfo") == 1
            assert not_running(cluster, "m2", "ibv_devinfo") == []  # and was ended
            # the same finding fails the run where RDMA is required, naming the Mac
            strict = run_site(
                cluster, tags=["rdma_check"], extravars={**SMALL_BOUND, "mlx_cluster_rdma_required": True}
            )
            assert strict.rc != 0
            assert any(
                "[ERROR] m2: RDMA on m2 is unusable: `ibv_devinfo -v` did not answer" in m
                for _, _, m in strict.failures()
            ), strict.failures()
        finally:
            cluster.set_host("m2", hang=[])
        again, _ = timed(cluster)
        assert "did not answer" not in again.preflight_summary()
        f.converged(again)


def test_a_hung_system_profiler_fails_that_mac_alone_and_the_run_ends(sim_cluster):
    cluster = sim_cluster("mesh4")
    cluster.reset()
    _, healthy = timed(cluster)
    with Fault("system_profiler never answers on one Mac") as f:
        cluster.set_host("m3", hang=["system_profiler"])
        cluster.clear_argv_logs()
        try:
            run, took = timed(cluster)
            failures = run.failures()
            f.message(next((m for _, _, m in failures), ""))
            assert took < healthy + BOUND + MARGIN, (took, healthy)
            assert run.rc != 0
            # the discovery's own failure, then its rescue naming the Mac (its interpreter runs:
            # the same message, with the Mac's name)
            assert [(h, t) for h, t, _ in failures] == [("m3", DISCOVER), ("m3", NAMED)], failures
            msg = failures[0][2]
            assert failures[1][2] == f"m3: {msg}"
            assert msg.startswith(
                f"`system_profiler SPThunderboltDataType -json` did not answer within {BOUND} s "
                f"on this Mac (stopped). Fix: System Information cannot read the Thunderbolt bus"
            ), msg
            assert "reboot the Mac" in msg
            # the other Macs' discovery finished (any_errors_fatal stops the run after the task)
            assert discovered(run) == {"m1": "ok", "m2": "ok", "m3": "failed", "m4": "ok"}
            assert not_running(cluster, "m3", "system_profiler") == []
            assert starts(cluster, "m3", "system_profiler") == 1  # no retry stretched the bound
        finally:
            cluster.set_host("m3", hang=[])
        # a Mac that is only slow (within the bound) is not failed
        cluster.set_host("m3", slow={"system_profiler": 2})
        try:
            again, _ = timed(cluster)
        finally:
            cluster.set_host("m3", slow={})
        f.converged(again)
        assert discovered(again) == {h: "ok" for h in cluster.hosts}
