"""The GPU wired-memory limit (opt-in, power stage), end to end on the simulated pair: set to
`auto` now and by a LaunchDaemon at every boot, unchanged by a re-run, refused above the safe
value, undone by `off`; check mode changes nothing."""

from __future__ import annotations

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_wired import (
    PLIST_PATH,
    SERVICE,
    daemon_bytes,
    safe_wired_limit_mb,
)
from tests.e2e.runner import is_mutating, run_site

pytestmark = [pytest.mark.sim, pytest.mark.slow]

SET = "Set the GPU wired-memory limit now and at every boot (iogpu.wired_limit_mb, LaunchDaemon)"
TAGS = ["power"]
HOSTS = ("m1", "m2")


def wired(value):
    # the pmset part of the stage stays out of the way: only the wired limit is under test. Given
    # as `-e power_manage=false` gives it: the string "false", which the stage reads as false
    return {"power_manage": "false", "mlx_cluster_wired_limit": value}


def live(cluster, host):
    return int(cluster.exec(host, ["sysctl", "-n", "iogpu.wired_limit_mb"], check=True).stdout)


def plist(cluster, host):
    r = cluster.exec(host, ["cat", PLIST_PATH])
    return r.stdout.encode() if r.returncode == 0 else None


def loaded(cluster, host):
    return cluster.exec(host, ["launchctl", "print", SERVICE]).returncode == 0


def mutations(cluster):
    """{host: [argv]} of the runs that changed a Mac (sysctl writes, launchctl bootstrap/bootout...)."""
    return {h: [a for a in cluster.argv_log(h) if is_mutating(a)] for h in HOSTS}


def test_wired_limit_auto_survives_a_reboot_reruns_clean_and_off_undoes_it(sim_cluster):
    cluster = sim_cluster("pair")
    cluster.reset()
    auto = safe_wired_limit_mb(int(cluster.exec("m1", ["sysctl", "-n", "hw.memsize"], check=True).stdout))
    assert [live(cluster, h) for h in HOSTS] == [0, 0]
    cluster.clear_argv_logs()

    # --check --diff: both Macs would change, shown with the plist; nothing is touched
    dry = run_site(cluster, tags=TAGS, check=True, diff=True, extravars=wired("auto"))
    assert dry.rc == 0, dry.failures()
    would = {r["host"]: r["res"] for r in dry.results(SET)}
    assert set(would) == set(HOSTS) and all(r["changed"] for r in would.values()), would
    assert would["m1"]["after"] == {"live_mb": auto, "daemon_mb": auto, "loaded": True}
    assert f"iogpu.wired_limit_mb={auto}" in str(would["m1"].get("diff")), would["m1"]
    assert mutations(cluster) == {"m1": [], "m2": []}
    assert [live(cluster, h) for h in HOSTS] == [0, 0] and plist(cluster, "m1") is None

    # the run: the daemon written and loaded, the value set now, read back
    first = run_site(cluster, tags=TAGS, extravars=wired("auto"))
    assert first.rc == 0, first.failures()
    assert {h for h, n in first.stats.get("changed", {}).items() if n} >= set(HOSTS), first.stats
    for h in HOSTS:
        assert live(cluster, h) == auto and plist(cluster, h) == daemon_bytes(auto) and loaded(cluster, h)
    pmset = [argv for changed in mutations(cluster).values() for argv in changed if "pmset" in " ".join(argv)]
    assert pmset == [], pmset  # "false" left the power settings alone

    # a restart: macOS boots at 0, launchd runs the daemon, the value is back
    cluster.reboot("m1")
    assert live(cluster, "m1") == auto and loaded(cluster, "m1")

    # a re-run changes nothing and runs no changing command
    cluster.clear_argv_logs()
    second = run_site(cluster, tags=TAGS, extravars=wired("auto"))
    assert second.rc == 0, second.failures()
    assert second.changed() == 0, second.stats
    assert second.results(SET) == []  # discovery saw both Macs right: no module run
    assert mutations(cluster) == {"m1": [], "m2": []}

    # more than the safe value: refused, naming the numbers, nothing changed
    over = run_site(cluster, tags=TAGS, extravars=wired(str(auto + 1)))
    assert over.rc != 0
    text = str(over.failures())
    assert f"at most {auto} MB" in text and "m1" in text, text
    assert mutations(cluster) == {"m1": [], "m2": []} and live(cluster, "m2") == auto

    # off: the daemon unloaded and removed, the value back to macOS's default, also after a restart
    off = run_site(cluster, tags=TAGS, extravars=wired("off"))
    assert off.rc == 0, off.failures()
    for h in HOSTS:
        assert live(cluster, h) == 0 and plist(cluster, h) is None and not loaded(cluster, h)
    cluster.reboot("m2")
    assert live(cluster, "m2") == 0
    cluster.clear_argv_logs()
    again = run_site(cluster, tags=TAGS, extravars=wired("off"))
    assert again.rc == 0 and again.changed() == 0, again.stats
    assert again.results(SET) == []
    assert mutations(cluster) == {"m1": [], "m2": []}
    cluster.reset()
