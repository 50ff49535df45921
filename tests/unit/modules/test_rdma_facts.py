"""library/rdma_facts.py: main() with get_bin_path/run_command mocked."""

from __future__ import annotations

import pytest

from tests.unit.modules.mac_commands import BINS, C_LOCALE, IBV_DEVICES, IBV_DEVINFO, RDMA_CTL, STUDIO_A, answers

RDMA_COMMANDS = [IBV_DEVICES, IBV_DEVINFO, RDMA_CTL]


def run(module_runner, read_fixture, args=None, bins=BINS, **overrides):
    table = {k: v for k, v in STUDIO_A.items() if k in RDMA_COMMANDS}
    return module_runner("rdma_facts", args=args, bins=bins, commands=answers(read_fixture, table, **overrides))


def test_argv_and_facts(module_runner, read_fixture):
    out = run(module_runner, read_fixture, args={"cabled_ifaces": ["en2"]})
    assert not out.failed, out.result
    assert out.calls == [list(argv) for argv in RDMA_COMMANDS]
    assert all(env == C_LOCALE for env in out.envs)
    facts = out.result["ansible_facts"]["mlx_rdma"]
    assert set(facts) == {"rdma_ctl", "devices", "usable", "problems"}
    assert facts["usable"] is True and facts["problems"] == [] and facts["rdma_ctl"] == "enabled"
    assert [d["name"] for d in facts["devices"]] == ["rdma_en2", "rdma_en3", "rdma_en4"]


def test_cabled_ifaces_option_reports_port_down(module_runner, read_fixture):
    out = run(module_runner, read_fixture, args={"cabled_ifaces": ["en2", "en3"]})
    problems = out.result["ansible_facts"]["mlx_rdma"]["problems"]
    assert [(p["code"], p["iface"]) for p in problems] == [("port_down", "en3")]


def test_cabled_ifaces_must_be_a_list_of_strings(module_runner, read_fixture):
    out = run(module_runner, read_fixture, args={"cabled_ifaces": {"en2": 1}})
    assert out.failed and "cabled_ifaces" in out.result["msg"]
    assert out.calls == []


def test_missing_verbs_tools_mean_no_rdma_not_a_crash(module_runner, read_fixture):
    bins = dict(BINS, ibv_devices=None, ibv_devinfo=None, rdma_ctl=None)
    out = run(module_runner, read_fixture, bins=bins)
    assert not out.failed, out.result
    assert out.calls == []
    facts = out.result["ansible_facts"]["mlx_rdma"]
    assert facts["usable"] is False and facts["rdma_ctl"] is None
    [problem] = facts["problems"]
    assert problem["code"] == "no_devices" and "macOS older than 26.2" in problem["msg"]


def test_rdma_disabled(module_runner, read_fixture):
    out = run(
        module_runner,
        read_fixture,
        ibv_devices=(0, "ibv_devices_header_only.txt", ""),
        ibv_devinfo=(0, "ibv_devinfo_no_devices_found.txt", ""),
        rdma_ctl=(0, "rdma_ctl_status_disabled.txt", ""),
    )
    facts = out.result["ansible_facts"]["mlx_rdma"]
    assert facts["usable"] is False
    assert facts["problems"][0]["code"] == "rdma_disabled"
    assert "rdma_ctl enable" in facts["problems"][0]["fix"]


def test_rdma_ctl_absent_is_null(module_runner, read_fixture):
    out = run(module_runner, read_fixture, bins=dict(BINS, rdma_ctl=None))
    assert out.calls == [list(IBV_DEVICES), list(IBV_DEVINFO)]
    assert out.result["ansible_facts"]["mlx_rdma"]["rdma_ctl"] is None


def test_rdma_ctl_failing_is_a_warning(module_runner, read_fixture):
    out = run(module_runner, read_fixture, rdma_ctl=(1, None, "rdma_ctl: not permitted\n"))
    assert not out.failed
    assert any("rdma_ctl status" in w for w in out.warnings)
    assert out.result["ansible_facts"]["mlx_rdma"]["rdma_ctl"] is None


@pytest.mark.parametrize(
    "override, command, fragment",
    [
        pytest.param({"ibv_devices": (0, "sw_vers_26_2.txt", "")}, IBV_DEVICES, "unexpected line", id="devices"),
        pytest.param({"ibv_devinfo": (0, "sw_vers_26_2.txt", "")}, IBV_DEVINFO, "before any hca_id", id="devinfo"),
        pytest.param({"rdma_ctl": (0, "sw_vers_26_2.txt", "")}, RDMA_CTL, "neither", id="rdma-ctl"),
    ],
)
def test_malformed_output_fails_naming_the_command(module_runner, read_fixture, override, command, fragment):
    out = run(module_runner, read_fixture, **override)
    assert out.failed
    label = " ".join([command[0].rsplit("/", 1)[1], *command[1:]])
    assert out.result["msg"].startswith(f"cannot read `{label}`") and fragment in out.result["msg"]
    assert out.result["cmd"] == list(command) and out.result["rc"] == 0
