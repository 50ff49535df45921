"""plugins/module_utils/mlx_host.py and mlx_collect.py (with a fake command runner)."""

from __future__ import annotations

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_collect import (
    collect_cluster,
    collect_rdma,
    collect_thunderbolt,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_host import (
    ParseError,
    become_problem,
    cabled_ifaces,
    interfaces_facts,
    mgmt_by_address,
    mgmt_by_iface,
    parse_route_default,
    parse_sw_vers,
    parse_sysctl_hw,
    ssh_server_address,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import CommandTimeout


def test_parse_sw_vers(read_fixture):
    assert parse_sw_vers(read_fixture("sw_vers_26_2.txt")) == {"product_version": "26.2", "build_version": "25C56"}


def test_parse_sw_vers_incomplete():
    with pytest.raises(ParseError) as info:
        parse_sw_vers("ProductName:\tmacOS\n")
    assert info.value.command == "sw_vers"


def test_parse_sysctl_hw(read_fixture):
    assert parse_sysctl_hw(read_fixture("sysctl_hw_studio_m4max.txt")) == {
        "memsize": 137438953472,
        "model": "Mac16,9",
        "ncpu": 16,
    }


@pytest.mark.parametrize(
    "text", ["", "1\n2\n", "lots\nMac16,9\n16\n", "sysctl: unknown oid 'hw.memsize'\nMac16,9\n16\n"]
)
def test_parse_sysctl_hw_bad(text):
    with pytest.raises(ParseError) as info:
        parse_sysctl_hw(text)
    assert info.value.command == "sysctl -n hw.memsize hw.model hw.ncpu"


@pytest.mark.parametrize(
    "fixture, iface", [("route_get_default_en0.txt", "en0"), ("route_get_default_not_in_table.txt", None)]
)
def test_parse_route_default(read_fixture, fixture, iface):
    assert parse_route_default(read_fixture(fixture)) == iface


@pytest.mark.parametrize(
    "value, address",
    [
        ("10.1.2.99 52144 10.1.2.3 22", "10.1.2.3"),
        ("fe80::1%en0 52144 fe80::2%en0 22", None),
        ("10.1.2.99 52144", None),
        (None, None),
        ("", None),
    ],
)
def test_ssh_server_address(value, address):
    assert ssh_server_address(value) == address


def test_mgmt_selection(read_fixture):
    interfaces = interfaces_facts(read_fixture("ifconfig_all_studio.txt"))
    assert mgmt_by_address(interfaces, "10.1.2.3") == {"iface": "en0", "address": "10.1.2.3"}
    assert mgmt_by_address(interfaces, "10.9.9.9") is None
    assert mgmt_by_address(interfaces, None) is None
    assert mgmt_by_iface(interfaces, "en0") == {"iface": "en0", "address": "10.1.2.3"}
    assert mgmt_by_iface(interfaces, "en1") == {"iface": "en1", "address": None}
    assert mgmt_by_iface(interfaces, None) is None


def test_interfaces_facts_keys(read_fixture):
    interfaces = interfaces_facts(read_fixture("ifconfig_all_studio.txt"))
    assert interfaces["en0"] == {
        "ipv4": [{"address": "10.1.2.3", "prefix": 24}],
        "up": True,
        "mtu": 1500,
        "status": "active",
        "members": [],
        "type": None,
    }


def test_cabled_ifaces_are_ports_with_a_mac_behind():
    ports = [
        {"iface": "en2", "status": "connected", "peer": {"domain_uuid": "x"}},
        {"iface": "en3", "status": "connected", "peer": None},  # a drive
        {"iface": None, "status": "connected", "peer": {"domain_uuid": "y"}},
        {"iface": "en5", "status": "empty", "peer": None},
    ]
    assert cabled_ifaces({"ports": ports}) == ["en2"]


# ------------------------------------------------------------------ mlx_collect


class FakeRun:
    """run(argv, required) answering from fixtures; records every argv."""

    def __init__(self, read_fixture, answers, missing=()):
        self.answers = {tuple(k): v for k, v in answers.items()}
        self.read = read_fixture
        self.missing = set(missing)
        self.calls = []

    def __call__(self, argv, required=True):
        if argv[0] in self.missing:
            assert not required, f"{argv[0]} is required"
            return None
        self.calls.append(list(argv))
        answer = self.answers[tuple(argv)]
        if isinstance(answer, Exception):
            raise answer
        rc, out, err = answer
        # a fixture's name, or the output itself
        return rc, (self.read(out) if out.endswith((".txt", ".json")) else out) if out else "", err


TB_ANSWERS = {
    ("system_profiler", "SPThunderboltDataType", "-json"): (0, "sp_direct_studio_a.json", ""),
    ("networksetup", "-listallhardwareports"): (0, "networksetup_hwports_studio_with_bridge.txt", ""),
    ("networksetup", "-listnetworkserviceorder"): (0, "networksetup_order_bridge_enabled.txt", ""),
    ("ifconfig", "bridge0"): (0, "ifconfig_bridge0_members.txt", ""),
}
RDMA_ANSWERS = {
    ("ibv_devices",): (0, "ibv_devices_3.txt", ""),
    ("ibv_devinfo", "-v"): (0, "ibv_devinfo_v_mini_active_ipv4.txt", ""),
    ("rdma_ctl", "status"): (0, "rdma_ctl_status_enabled.txt", ""),
}


def test_collect_thunderbolt_runs_the_commands_in_order(read_fixture):
    run = FakeRun(read_fixture, TB_ANSWERS)
    facts, warnings = collect_thunderbolt(run)
    assert run.calls == [list(k) for k in TB_ANSWERS]
    assert facts["bridge"]["exists"] is True and warnings == []


def test_collect_thunderbolt_bridge_does_not_exist(read_fixture):
    answers = dict(TB_ANSWERS)
    answers[("ifconfig", "bridge0")] = (1, None, read_fixture("ifconfig_bridge0_missing.txt"))
    facts, _ = collect_thunderbolt(FakeRun(read_fixture, answers))
    assert facts["bridge"]["exists"] is False and facts["bridge"]["members"] == []


def test_collect_thunderbolt_bridge_other_error_is_fatal(read_fixture):
    answers = dict(TB_ANSWERS)
    answers[("ifconfig", "bridge0")] = (1, None, "ifconfig: ioctl (SIOCGIFFLAGS): Device not configured\n")
    with pytest.raises(ParseError) as info:
        collect_thunderbolt(FakeRun(read_fixture, answers))
    assert info.value.command == "ifconfig bridge0" and "Device not configured" in info.value.message


def test_collect_thunderbolt_malformed_bridge_names_ifconfig_bridge0(read_fixture):
    answers = dict(TB_ANSWERS)
    answers[("ifconfig", "bridge0")] = (0, "sw_vers_26_2.txt", "")
    with pytest.raises(ParseError) as info:
        collect_thunderbolt(FakeRun(read_fixture, answers))
    assert info.value.command == "ifconfig bridge0"


def test_collect_thunderbolt_failed_service_order_is_a_warning(read_fixture):
    answers = dict(TB_ANSWERS)
    answers[("networksetup", "-listnetworkserviceorder")] = (1, None, "** Error: no preferences\n")
    facts, warnings = collect_thunderbolt(FakeRun(read_fixture, answers))
    assert facts["bridge"]["service_enabled"] is None
    assert "networksetup -listnetworkserviceorder" in warnings[0]
    assert warnings == facts["warnings"]


def test_collect_thunderbolt_system_profiler_failure(read_fixture):
    answers = dict(TB_ANSWERS)
    answers[("system_profiler", "SPThunderboltDataType", "-json")] = (1, None, "boom\n")
    with pytest.raises(ParseError) as info:
        collect_thunderbolt(FakeRun(read_fixture, answers))
    assert info.value.command == "system_profiler SPThunderboltDataType -json"
    assert "exited with 1: boom" in info.value.message


def test_collect_rdma_all_present(read_fixture):
    run = FakeRun(read_fixture, RDMA_ANSWERS)
    facts, warnings = collect_rdma(run, ["en2"])
    assert run.calls == [list(k) for k in RDMA_ANSWERS]
    assert facts["usable"] is True and facts["problems"] == [] and warnings == []


def test_collect_rdma_without_verbs_tools(read_fixture):
    run = FakeRun(read_fixture, RDMA_ANSWERS, missing={"ibv_devices", "ibv_devinfo", "rdma_ctl"})
    facts, warnings = collect_rdma(run)
    assert run.calls == []
    assert facts == {"rdma_ctl": None, "devices": [], "usable": False, "problems": [facts["problems"][0]]}
    assert facts["problems"][0]["code"] == "no_devices"
    assert warnings == []


def test_collect_rdma_ibv_devices_failing_means_no_devices(read_fixture):
    answers = dict(RDMA_ANSWERS)
    answers[("ibv_devices",)] = (1, None, "Failed to get IB devices list: Function not implemented\n")
    answers[("ibv_devinfo", "-v")] = (255, "ibv_devinfo_no_devices_found.txt", "")
    answers[("rdma_ctl", "status")] = (0, "rdma_ctl_status_disabled.txt", "")
    facts, warnings = collect_rdma(FakeRun(read_fixture, answers))
    assert [p["code"] for p in facts["problems"]] == ["rdma_disabled"]
    assert len(warnings) == 1 and "taken as no device" in warnings[0]


SU = "/Library/Preferences/com.apple.SoftwareUpdate"
POWER_ANSWERS = {
    ("pmset", "-g", "custom"): (0, "pmset_g_custom_mini_never_sleeps.txt", ""),
    # CriticalUpdateInstall never written: absent from the domain
    ("defaults", "read", SU): (
        0,
        "{\n    AutomaticCheckEnabled = 1;\n    AutomaticDownload = 1;\n    AutomaticallyInstallMacOSUpdates = 1;\n}\n",
        "",
    ),
}


def test_collect_cluster(read_fixture):
    answers = {
        **TB_ANSWERS,
        **RDMA_ANSWERS,
        **POWER_ANSWERS,
        ("sysctl", "-n", "hw.memsize", "hw.model", "hw.ncpu"): (0, "sysctl_hw_studio_m4max.txt", ""),
        ("sysctl", "-n", "iogpu.wired_limit_mb"): (0, "sysctl_wired_limit_0.txt", ""),
        ("ifconfig", "-v"): (0, "ifconfig_all_studio.txt", ""),
        ("sw_vers",): (0, "sw_vers_26_2.txt", ""),
        ("route", "-n", "get", "default"): (0, "route_get_default_en0.txt", ""),
    }
    disk = {"path": "/Users/admin", "free_bytes": 5}
    run = FakeRun(read_fixture, answers)
    facts, warnings = collect_cluster(run, "10.1.2.99 50000 10.1.2.3 22", disk)
    assert set(facts) == {
        "thunderbolt",
        "rdma",
        "interfaces",
        "services",
        "mgmt",
        "os",
        "hw",
        "disk",
        "power",
        "updates",
    }
    assert facts["power"]["AC Power"]["sleep"] == 0 and facts["power"]["AC Power"]["autorestart"] == 1
    # a key never written is unknown, not off, and not a warning
    assert facts["updates"] == {
        "automatic_check": True,
        "automatic_download": True,
        "install_macos_updates": True,
        "critical_update_install": None,
    }
    assert facts["mgmt"] == {"iface": "en0", "address": "10.1.2.3"}
    assert ["route", "-n", "get", "default"] not in run.calls  # SSH_CONNECTION was enough
    assert facts["thunderbolt"]["mac"]["model_id"] == "Mac16,9"
    assert facts["disk"] is disk
    assert facts["hw"]["wired_limit_mb"] == 0  # macOS's default share
    # en2 has a Mac behind it (studio A receptacle 1) and rdma_en2 is active with an IPv4 GID
    assert facts["rdma"]["problems"] == [] and warnings == []


def test_collect_cluster_falls_back_to_default_route(read_fixture):
    answers = {
        **TB_ANSWERS,
        **RDMA_ANSWERS,
        **POWER_ANSWERS,
        ("sysctl", "-n", "hw.memsize", "hw.model", "hw.ncpu"): (0, "sysctl_hw_studio_m4max.txt", ""),
        # an older macOS: no such oid (sysctl exits 1)
        ("sysctl", "-n", "iogpu.wired_limit_mb"): (1, None, "sysctl: unknown oid 'iogpu.wired_limit_mb'\n"),
        ("ifconfig", "-v"): (0, "ifconfig_all_studio.txt", ""),
        ("sw_vers",): (0, "sw_vers_26_2.txt", ""),
        ("route", "-n", "get", "default"): (1, None, "route: writing to routing socket: not in table\n"),
    }
    facts, warnings = collect_cluster(FakeRun(read_fixture, answers), None, {"path": "/", "free_bytes": 1})
    assert facts["mgmt"] == {"iface": None, "address": None}
    assert "management interface is unknown" in warnings[0]
    assert facts["hw"]["wired_limit_mb"] is None


def _cluster_answers():
    return {
        **TB_ANSWERS,
        **RDMA_ANSWERS,
        **POWER_ANSWERS,
        ("sysctl", "-n", "hw.memsize", "hw.model", "hw.ncpu"): (0, "sysctl_hw_studio_m4max.txt", ""),
        ("sysctl", "-n", "iogpu.wired_limit_mb"): (0, "sysctl_wired_limit_0.txt", ""),
        ("ifconfig", "-v"): (0, "ifconfig_all_studio.txt", ""),
        ("sw_vers",): (0, "sw_vers_26_2.txt", ""),
    }


@pytest.mark.parametrize(
    "answer, says",
    [
        pytest.param((1, None, "pmset: error\n"), "`pmset -g custom` exited with 1", id="fails"),
        pytest.param((0, "garbage\n", ""), "cannot read `pmset -g custom`", id="garbage"),
        pytest.param(CommandTimeout(["/usr/bin/pmset", "-g", "custom"], 30), "did not answer within 30 s", id="hangs"),
    ],
)
def test_unreadable_power_settings_are_unknown_not_a_failed_mac(read_fixture, answer, says):
    run = FakeRun(read_fixture, {**_cluster_answers(), ("pmset", "-g", "custom"): answer})
    facts, warnings = collect_cluster(run, "10.1.2.99 50000 10.1.2.3 22", {"path": "/", "free_bytes": 1})
    assert facts["power"] is None
    assert any(says in w and ("unknown" in w or "null" in w) for w in warnings), warnings


def test_update_settings_that_hang_or_are_missing_are_unknown(read_fixture):
    answers = {**_cluster_answers(), ("defaults", "read", SU): CommandTimeout(["/usr/bin/defaults", "read", SU], 30)}
    ssh = "10.1.2.99 50000 10.1.2.3 22"
    facts, warnings = collect_cluster(FakeRun(read_fixture, answers), ssh, {"path": "/", "free_bytes": 1})
    assert set(facts["updates"].values()) == {None}
    assert any("defaults read" in w and "unknown" in w for w in warnings)
    # without the tool at all: every one unknown, no warning about it
    facts, warnings = collect_cluster(
        FakeRun(read_fixture, _cluster_answers(), missing={"defaults"}), ssh, {"path": "/", "free_bytes": 1}
    )
    assert set(facts["updates"].values()) == {None} and warnings == []


def test_become_problem_only_for_sudo_to_another_user():
    assert become_problem("", "admin", "/Users/admin") == ""
    assert become_problem(None, "root", "/var/root") == ""  # logged in as root: no sudo, nothing to say
    assert become_problem("admin", "admin", "/Users/admin") == ""  # become_user is the login user
    msg = become_problem("admin", "root", "/var/root")
    assert "ran through sudo as root, not as admin" in msg and "/var/root" in msg and "-K" in msg
