"""A command that does not answer within the module's bound (command_timeout), per module:
RDMA probes make RDMA unusable (named, with the fix); any other command fails the Mac with a
message naming the command, the bound and the fix. Commands answered at mlx_run.spawn."""

from __future__ import annotations

import pytest

from tests.unit.modules.mac_commands import (
    BINS,
    HWPORTS,
    IBV_DEVICES,
    IBV_DEVINFO,
    IFCONFIG,
    ORDER,
    RDMA_CTL,
    SP,
    STUDIO_A,
    SW_VERS,
    SYSCTL,
    answers,
)

# run_module's answer for a command that does not answer within its bound
HANG = "hang: does not answer"
SSH = {"SSH_CONNECTION": "10.1.2.99 50522 10.1.2.3 22"}
RDMA_FIX = "RDMA looks wedged on this Mac: replug its Thunderbolt cables, or reboot the Mac"


def cluster_facts(module_runner, read_fixture, tmp_path, hung, args=None):
    commands = answers(read_fixture, STUDIO_A)
    for argv in hung:
        commands[argv] = HANG
    return module_runner(
        "mlx_cluster_facts", args={"disk_path": str(tmp_path), **(args or {})}, bins=BINS, env=SSH, commands=commands
    )


def test_hang_is_the_answer_run_module_knows(hang):
    assert hang == HANG


def test_the_bound_is_the_module_option(module_runner, read_fixture, tmp_path):
    out = cluster_facts(module_runner, read_fixture, tmp_path, [], args={"command_timeout": 7})
    assert not out.failed, out.result
    assert out.timeouts and set(out.timeouts) == {7}
    default = cluster_facts(module_runner, read_fixture, tmp_path, [])
    assert set(default.timeouts) == {30}


@pytest.mark.parametrize(
    "hung, command",
    [
        pytest.param([IBV_DEVINFO], "ibv_devinfo -v", id="ibv_devinfo"),
        pytest.param([IBV_DEVICES, IBV_DEVINFO, RDMA_CTL], "ibv_devices", id="all-rdma-probes"),
        pytest.param([RDMA_CTL], "rdma_ctl status", id="rdma_ctl"),
    ],
)
def test_a_hung_rdma_probe_makes_rdma_unusable_on_that_mac_and_nothing_fails(
    module_runner, read_fixture, tmp_path, hung, command
):
    out = cluster_facts(module_runner, read_fixture, tmp_path, hung, args={"command_timeout": 5})
    assert not out.failed, out.result
    facts = out.result["mlx_cluster"]
    rdma = facts["rdma"]
    assert rdma["usable"] is False
    (problem,) = rdma["problems"]
    assert problem["code"] == "no_answer" and problem["command"] == command
    assert problem["msg"] == f"`{command}` did not answer within 5 s on this Mac (stopped)"
    assert problem["fix"].startswith(RDMA_FIX)
    assert any(w.startswith(f"`{command}` did not answer within 5 s") and RDMA_FIX in w for w in out.warnings)
    # everything else was read
    assert facts["thunderbolt"]["ports"] and facts["os"]["product_version"] == "26.2"


def test_after_a_hung_probe_the_next_ones_are_not_run(module_runner, read_fixture):
    table = {k: v for k, v in STUDIO_A.items() if k in (IBV_DEVICES, IBV_DEVINFO, RDMA_CTL)}
    commands = answers(read_fixture, table)
    commands[IBV_DEVICES] = HANG
    out = module_runner("rdma_facts", args={"command_timeout": 3}, bins=BINS, commands=commands)
    assert not out.failed, out.result
    assert out.calls == [list(IBV_DEVICES)]  # one bound waited, not three
    facts = out.result["ansible_facts"]["mlx_rdma"]
    assert facts["usable"] is False and facts["devices"] == []
    assert [p["code"] for p in facts["problems"]] == ["no_answer"]


@pytest.mark.parametrize(
    "hung, command, fix",
    [
        pytest.param(
            SP,
            "system_profiler SPThunderboltDataType -json",
            "System Information cannot read the Thunderbolt bus",
            id="system_profiler",
        ),
        pytest.param(HWPORTS, "networksetup -listallhardwareports", "configd", id="networksetup"),
        pytest.param(ORDER, "networksetup -listnetworkserviceorder", "configd", id="networksetup-optional"),
        pytest.param(SW_VERS, "sw_vers", "run it by hand on the Mac", id="generic"),
        pytest.param(SYSCTL, "sysctl -n hw.memsize hw.model hw.ncpu", "run it by hand on the Mac", id="sysctl"),
        pytest.param(IFCONFIG, "ifconfig -v", "raise mlx_cluster_command_timeout", id="ifconfig"),
    ],
)
def test_any_other_hung_command_fails_the_mac_naming_it_and_the_fix(
    module_runner, read_fixture, tmp_path, hung, command, fix
):
    out = cluster_facts(module_runner, read_fixture, tmp_path, [hung], args={"command_timeout": 5})
    assert out.failed
    msg = out.result["msg"]
    assert msg.startswith(f"`{command}` did not answer within 5 s on this Mac (stopped). Fix: "), msg
    assert fix in msg
    assert out.result["cmd"] == list(hung) and out.result["timeout"] == 5
    assert "Traceback" not in str(out.result)


def test_thunderbolt_facts_fails_on_a_hung_system_profiler(module_runner, read_fixture):
    table = {k: v for k, v in STUDIO_A.items() if k in (SP, HWPORTS, ORDER)}
    commands = answers(read_fixture, table)
    commands[SP] = HANG
    out = module_runner("thunderbolt_facts", args={"command_timeout": 4}, bins=BINS, commands=commands)
    assert out.failed
    assert out.result["msg"].startswith("`system_profiler SPThunderboltDataType -json` did not answer within 4 s")
    assert "reboot the Mac" in out.result["msg"]


def test_a_command_that_cannot_start_fails_named(module_runner, read_fixture, tmp_path):
    commands = answers(read_fixture, STUDIO_A)
    commands[SW_VERS] = OSError(8, "Exec format error")
    out = module_runner("mlx_cluster_facts", args={"disk_path": str(tmp_path)}, bins=BINS, env=SSH, commands=commands)
    assert out.failed and out.result["msg"].startswith("cannot read `sw_vers`: could not be started")


LINK = {
    "cable": "m1:en2~m2:en2",
    "iface": "en2",
    "address": "10.208.0.1",
    "peer_address": "10.208.0.2",
    "peer_host": "m2",
    "peer_iface": "en2",
}


def test_thunderbolt_links_fails_on_a_hung_networksetup(module_runner, read_fixture):
    commands = answers(read_fixture, {HWPORTS: STUDIO_A[HWPORTS], ORDER: STUDIO_A[ORDER], IFCONFIG: STUDIO_A[IFCONFIG]})
    commands[HWPORTS] = HANG
    out = module_runner(
        "thunderbolt_links",
        args={"links": [LINK], "host_routes": False, "command_timeout": 6},
        bins=BINS,
        commands=commands,
    )
    assert out.failed
    assert out.result["msg"].startswith("`networksetup -listallhardwareports` did not answer within 6 s")
    assert "configd" in out.result["msg"]


def test_thunderbolt_ping_counts_a_hung_ping_as_no_answer(module_runner):
    argv = ("/sbin/ping", "-q", "-o", "-c", "2", "-t", "3", "-S", LINK["address"], LINK["peer_address"])
    out = module_runner(
        "thunderbolt_ping",
        args={"links": [LINK], "fail_on_no_answer": False},
        bins={"ping": "/sbin/ping"},
        commands={argv: HANG},
    )
    assert not out.failed
    assert out.result["results"][0]["ok"] is False
    assert out.timeouts == [30]  # the module's bound (above the ping's own -t 3 + 10)
    assert any("`ping -q -o -c 2 -t 3" in w and "did not answer within 30 s" in w for w in out.warnings)


def test_run_cleanup_fails_on_a_hung_ps(module_runner):
    out = module_runner(
        "mlx_run_cleanup",
        args={"run_id": "0123456789abcdef0123", "command_timeout": 2},
        bins={"ps": "/bin/ps"},
        commands={("/bin/ps", "-ax", "-ww", "-o", "pid=,args="): HANG},
    )
    assert out.failed
    assert out.result["msg"].startswith("`ps -ax -ww -o pid=,args=` did not answer within 2 s on this Mac")


def test_server_stop_gives_launchctl_bootout_the_grace_and_more(module_runner, tmp_path):
    plist = tmp_path / "x.plist"
    plist.write_text("")
    out = module_runner(
        "mlx_server_stop",
        args={
            "run_dir": str(tmp_path),
            "supervisor": "launchd",
            "plist": str(plist),
            "grace": 40,
            "command_timeout": 5,
        },
        bins={"launchctl": "/usr/bin/launchctl", "ps": "/bin/ps"},
        commands={
            ("/usr/bin/launchctl", "print", "system/org.mlx-cluster.server"): (
                0,
                "system/org.mlx-cluster.server = {\n\tstate = running\n\tpid = 4242\n}\n",
                "",
            ),
            ("/usr/bin/launchctl", "bootout", "system/org.mlx-cluster.server"): HANG,
        },
    )
    assert out.failed
    assert out.timeouts == [5, 70]
    assert out.result["msg"].startswith("`launchctl bootout system/org.mlx-cluster.server` did not answer within 70 s")
