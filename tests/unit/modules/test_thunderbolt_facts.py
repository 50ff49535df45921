"""library/thunderbolt_facts.py: main() with get_bin_path/run_command mocked."""

from __future__ import annotations

import pytest

from tests.unit.modules.mac_commands import BINS, BRIDGE, C_LOCALE, HWPORTS, ORDER, SP, STUDIO_A, answers

TB_COMMANDS = [SP, HWPORTS, ORDER, BRIDGE]


def run(module_runner, read_fixture, args=None, **overrides):
    table = {k: v for k, v in STUDIO_A.items() if k in TB_COMMANDS}
    return module_runner("thunderbolt_facts", args=args, bins=BINS, commands=answers(read_fixture, table, **overrides))


def test_argv_and_facts(module_runner, read_fixture):
    out = run(module_runner, read_fixture)
    assert not out.failed, out.result
    assert out.calls == [list(argv) for argv in TB_COMMANDS]
    assert all(env == C_LOCALE for env in out.envs)
    facts = out.result["ansible_facts"]["mlx_thunderbolt"]
    assert set(facts) == {"mac", "ports", "hardware_ports", "bridge", "warnings"}
    assert facts["ports"][0]["iface"] == "en2" and facts["ports"][0]["peer"]["model_id"] == "Mac16,9"
    # the preferences file of a test run is never the machine's own: unreadable, unknown
    assert facts["bridge"] == {
        "exists": True,
        "members": ["en2", "en3"],
        "service": "Thunderbolt Bridge",
        "service_enabled": True,
        "persistent_members": None,
    }
    assert out.result["changed"] is False


def test_check_mode_reads_the_same(module_runner, read_fixture):
    out = run(module_runner, read_fixture, args={"_ansible_check_mode": True})
    assert not out.failed
    assert out.calls == [list(argv) for argv in TB_COMMANDS]


def test_bridge_does_not_exist_is_not_a_failure(module_runner, read_fixture):
    out = run(
        module_runner,
        read_fixture,
        bridge=(1, None, "ifconfig: interface bridge0 does not exist\n"),
        hwports=(0, "networksetup_hwports_mini_without_bridge.txt", ""),
        order=(0, "networksetup_order_bridge_disabled.txt", ""),
    )
    assert not out.failed, out.result
    bridge = out.result["ansible_facts"]["mlx_thunderbolt"]["bridge"]
    assert bridge == {
        "exists": False,
        "members": [],
        "service": "Thunderbolt Bridge",
        "service_enabled": False,
        "persistent_members": None,
    }


def test_the_bridge_definition_comes_from_the_preferences_file(module_runner, read_fixture):
    # the studio's file defines bridge0 with en3, en4, en5: the members of the next boot
    from pathlib import Path

    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "sc_preferences_studio.plist"
    table = {k: v for k, v in STUDIO_A.items() if k in TB_COMMANDS}
    out = module_runner(
        "thunderbolt_facts",
        bins=BINS,
        commands=answers(read_fixture, table),
        module_attrs={"SC_PREFERENCES": str(fixture)},
    )
    assert not out.failed, out.result
    bridge = out.result["ansible_facts"]["mlx_thunderbolt"]["bridge"]
    assert bridge["members"] == ["en2", "en3"] and bridge["persistent_members"] == ["en3", "en4", "en5"]


def test_missing_hardware_port_warns(module_runner, read_fixture):
    out = run(
        module_runner,
        read_fixture,
        sp=(0, "sp_tb4_beside_tb5.json", ""),
        hwports=(0, "networksetup_hwports_ultra_missing_tb6.txt", ""),
    )
    assert not out.failed
    assert any("networksetup -detectnewhardware" in w for w in out.warnings)
    ports = out.result["ansible_facts"]["mlx_thunderbolt"]["ports"]
    assert ports[-1]["iface"] is None


@pytest.mark.parametrize(
    "override, command, fragment",
    [
        pytest.param({"sp": (0, None, "")}, SP, "empty output", id="system-profiler-empty"),
        pytest.param({"sp": (0, "ibv_devices_3.txt", "")}, SP, "not JSON", id="system-profiler-not-json"),
        pytest.param({"sp": (1, None, "system_profiler: crashed\n")}, SP, "exited with 1", id="system-profiler-rc"),
        pytest.param({"hwports": (0, "sw_vers_26_2.txt", "")}, HWPORTS, "Hardware Port", id="hwports-garbage"),
        pytest.param({"bridge": (0, "sw_vers_26_2.txt", "")}, BRIDGE, "unexpected line", id="bridge-garbage"),
        pytest.param(
            {"bridge": (1, None, "ifconfig: SIOCGIFFLAGS: bad\n")}, BRIDGE, "exited with 1", id="bridge-other-error"
        ),
    ],
)
def test_malformed_output_fails_naming_the_command(module_runner, read_fixture, override, command, fragment):
    out = run(module_runner, read_fixture, **override)
    assert out.failed
    label = " ".join([command[0].rsplit("/", 1)[1], *command[1:]])
    assert out.result["msg"].startswith(f"cannot read `{label}`")
    assert fragment in out.result["msg"]
    assert out.result["cmd"] == list(command)
    assert "rc" in out.result and "stderr" in out.result


def test_missing_tool_fails(module_runner, read_fixture):
    out = module_runner("thunderbolt_facts", bins=dict(BINS, system_profiler=None), commands={})
    assert out.failed and "system_profiler" in out.result["msg"]
    assert out.calls == []
