"""The power stage and the automatic-update warning, end to end on the simulated pair."""

from __future__ import annotations

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_power import (
    AC,
    DEFAULT_SETTINGS,
    SOFTWARE_UPDATE_DOMAIN,
    parse_pmset_custom,
)
from tests.e2e.runner import is_mutating, run_site

pytestmark = [pytest.mark.sim, pytest.mark.slow]

SET = "Set the power settings that differ on AC power (pmset -c)"
TAGS = ["preflight", "power"]


def ac(cluster, host):
    text = cluster.exec(host, ["pmset", "-g", "custom"], check=True).stdout
    return {k: parse_pmset_custom(text)[AC][k] for k in DEFAULT_SETTINGS}


def mutations(cluster):
    return {h: [a for a in cluster.argv_log(h) if is_mutating(a)] for h in cluster.hosts}


def test_power_settings_converge_once_and_automatic_updates_are_named(sim_cluster):
    cluster = sim_cluster("pair")
    cluster.reset()
    # m1 as macOS ships it (sleeps after a minute, no restart after a power cut); m2 set by
    # hand already, and installing macOS updates by itself
    assert ac(cluster, "m1") == {"sleep": 1, "disksleep": 10, "autorestart": 0}
    cluster.exec("m2", ["pmset", "-c", "sleep", "0", "disksleep", "0", "autorestart", "1"], sudo=True, check=True)
    cluster.exec(
        "m2",
        ["defaults", "write", SOFTWARE_UPDATE_DOMAIN, "AutomaticallyInstallMacOSUpdates", "-bool", "true"],
        sudo=True,
        check=True,
    )
    cluster.clear_argv_logs()

    # --check --diff: m1's change is shown, nothing is changed anywhere
    dry = run_site(cluster, tags=TAGS, check=True, diff=True)
    assert dry.rc == 0, dry.failures()
    (would,) = dry.results(SET)
    assert would["host"] == "m1" and would["res"]["changed"] is True
    assert would["res"]["changes"] == {
        "sleep": {"before": 1, "after": 0},
        "disksleep": {"before": 10, "after": 0},
        "autorestart": {"before": 0, "after": 1},
    }
    diff = str(would["res"].get("diff"))
    assert " sleep                1" in diff and " sleep                0" in diff, diff
    assert mutations(cluster) == {"m1": [], "m2": []}
    assert ac(cluster, "m1") == {"sleep": 1, "disksleep": 10, "autorestart": 0}
    # the preflight names m2's automatic updates, with the fix, and changes nothing about them
    text = dry.preflight_summary()
    line = next(ln for ln in text.splitlines() if "installs macOS updates by itself" in ln)
    assert line.startswith("[WARNING] m2: m2 installs macOS updates"), text
    assert "Automatic Updates" in line and "AutomaticallyInstallMacOSUpdates -bool false" in line, line
    assert "m1 installs" not in text

    # the run: one pmset -c on m1 with the three settings, none on m2; read back
    first = run_site(cluster, tags=TAGS)
    assert first.rc == 0, first.failures()
    assert {h for h, n in first.stats.get("changed", {}).items() if n} == {"m1"}, first.stats
    done = mutations(cluster)
    assert done["m2"] == [] and len(done["m1"]) == 1, done
    assert done["m1"][0][done["m1"][0].index("pmset") + 1 :] == [
        "-c",
        "sleep",
        "0",
        "disksleep",
        "0",
        "autorestart",
        "1",
    ], done
    assert ac(cluster, "m1") == DEFAULT_SETTINGS == ac(cluster, "m2")

    # kept across a restart; a re-run finds both Macs right from discovery: no module run
    cluster.reboot("m1")
    assert ac(cluster, "m1") == DEFAULT_SETTINGS
    cluster.clear_argv_logs()
    second = run_site(cluster, tags=TAGS)
    assert second.rc == 0, second.failures()
    assert second.changed() == 0, second.stats
    assert second.results(SET) == []  # skipped on both Macs
    assert mutations(cluster) == {"m1": [], "m2": []}
    assert "m2 installs macOS updates by itself" in second.preflight_summary()  # reported, never changed
