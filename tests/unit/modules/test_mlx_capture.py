"""library/mlx_capture.py: discovery's own commands recorded as the Mac answered them, then
what the other stages read, also when discovery's parsers refuse an output."""

from __future__ import annotations

import os

from tests.unit.modules.mac_commands import BINS, NETSTAT, SP, STUDIO_A, answers

SSH = {"SSH_CONNECTION": "10.1.2.99 50522 10.1.2.3 22"}
SERVICES = ("Ethernet", "Thunderbolt Bridge", "Wi-Fi", "Tailscale")  # networksetup_order_bridge_enabled.txt
FIREWALL = ("/usr/bin/socketfilterfw", "--getglobalstate", "--getblockall", "--getstealthmode", "--getallowsigned")


def extras(read_fixture):
    out = {
        NETSTAT: (0, read_fixture("netstat_rn_inet_cluster.txt"), ""),
        FIREWALL: (0, read_fixture("socketfilterfw_getters_off.txt"), ""),
        ("/usr/bin/launchctl", "print", "system/org.mlx-cluster.wired-limit"): (
            113,
            "",
            'Could not find service "org.mlx-cluster.wired-limit" in domain for system\n',
        ),
        ("/usr/bin/rsync", "--version"): (0, "openrsync: protocol version 29\nrsync version 2.6.9 compatible\n", ""),
        # model_rsync's probe: whether this rsync takes --log-file (openrsync of macOS 15 does not)
        ("/usr/bin/rsync", "--log-file=/dev/null", "--version"): (1, "", "openrsync: unrecognized option\n"),
        ("/usr/bin/xcode-select", "-p"): (0, "/Library/Developer/CommandLineTools\n", ""),
    }
    for name in SERVICES:
        out[("/usr/sbin/networksetup", "-getinfo", name)] = (0, "DHCP Configuration\nIP address: 10.1.2.3\n", "")
    return out


def named(argv):
    """An argv by its tool's name (the capture keeps the argv discovery asked for: `sysctl`,
    not `/usr/sbin/sysctl`; the firewall's tool has its path, as the port check runs it)."""
    return (os.path.basename(argv[0]), *argv[1:])


def capture(module_runner, read_fixture, **overrides):
    commands = {**answers(read_fixture, STUDIO_A, **overrides), **extras(read_fixture)}
    return module_runner("mlx_capture", args={}, bins=BINS, env=SSH, commands=commands)


def test_every_command_discovery_parses_then_the_other_stages_reads(module_runner, read_fixture):
    run = capture(module_runner, read_fixture)
    assert not run.failed, run.result
    res = run.result
    assert res["changed"] is False and res["notes"] == []
    taken = {named(c["argv"]): c for c in res["commands"]}
    # every command the test Mac answers is in the capture, once, as it answered
    want = {named(a): v for a, v in {**answers(read_fixture, STUDIO_A), **extras(read_fixture)}.items()}
    assert set(taken) == set(want) and len(res["commands"]) == len(want)
    for argv, (rc, out, err) in want.items():
        assert (taken[argv]["rc"], taken[argv]["stdout"], taken[argv]["stderr"]) == (rc, out, err), argv
    # discovery's order first (its conditions), the rest after it, each service's -getinfo last
    assert res["commands"][0]["argv"][-3:] == ["hw.memsize", "hw.model", "hw.ncpu"]
    assert [c["argv"][-1] for c in res["commands"][-5:-1]] == list(SERVICES)
    assert res["commands"][-1]["argv"] == list(FIREWALL)  # found where the port check finds it
    assert set(res["files"]) >= {"/Library/Preferences/SystemConfiguration/preferences.plist"}


def test_an_output_discovery_refuses_is_captured_and_the_rest_too(module_runner, read_fixture):
    run = capture(module_runner, read_fixture, sp=(0, "{not json", ""))
    assert not run.failed, run.result
    res = run.result
    (note,) = res["notes"]
    assert "system_profiler SPThunderboltDataType -json" in note and "not JSON" in note
    taken = {named(c["argv"]): c for c in res["commands"]}
    assert taken[named(SP)]["stdout"] == "{not json"  # as the Mac printed it
    assert ("rdma_ctl", "status") in taken and ("rsync", "--version") in taken


def test_a_label_that_is_not_a_launchd_label_is_refused_before_anything_is_read(module_runner, read_fixture):
    commands = {**answers(read_fixture, STUDIO_A), **extras(read_fixture)}
    bad = "../../../Users/admin/.ssh/id_ed25519"
    run = module_runner(
        "mlx_capture", args={"launchd_labels": ["org.example.ok", bad]}, bins=BINS, env=SSH, commands=commands
    )
    assert run.failed, run.result
    assert f"capture_launchd_labels {bad!r} is not a launchd label" in run.result["msg"]
    assert "org.example.ok" not in run.result["msg"]
    assert run.calls == [], run.calls  # nothing run, nothing read
