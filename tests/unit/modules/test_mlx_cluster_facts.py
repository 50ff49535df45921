"""library/mlx_cluster_facts.py: main() with get_bin_path/run_command mocked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.modules.mac_commands import (
    BINS,
    C_LOCALE,
    HWPORTS,
    IBV_DEVICES,
    IBV_DEVINFO,
    IFCONFIG,
    ORDER,
    PMSET,
    RDMA_CTL,
    ROUTE,
    SP,
    STUDIO_A,
    SW_VERS,
    SYSCTL,
    UPDATES,
    WIRED_LIMIT,
    answers,
)

SSH = {"SSH_CONNECTION": "10.1.2.99 50522 10.1.2.3 22"}
# the block ssh_trust writes (its module's default marker), written here as a Mac would hold it
MARKER = "# {mark} mlx-cluster: keys of the Macs that copy to this one (ssh_trust_state=absent removes it)"
# bridge0 comes from the plain ifconfig: no `ifconfig bridge0`
ORDER_RUN = [
    SYSCTL,
    WIRED_LIMIT,
    SP,
    HWPORTS,
    ORDER,
    IBV_DEVICES,
    IBV_DEVINFO,
    RDMA_CTL,
    IFCONFIG,
    SW_VERS,
    PMSET,
    UPDATES,
]


def run(module_runner, read_fixture, tmp_path, env=SSH, bins=BINS, **overrides):
    return module_runner(
        "mlx_cluster_facts",
        args={"disk_path": str(tmp_path)},
        bins=bins,
        env=env,
        commands=answers(read_fixture, STUDIO_A, **overrides),
    )


def test_one_run_gathers_everything(module_runner, read_fixture, tmp_path):
    out = run(module_runner, read_fixture, tmp_path, env={**SSH, "HOME": "/Users/tester"})
    assert not out.failed, out.result
    # started side by side: each command once, in any order
    assert sorted(out.calls) == sorted(list(argv) for argv in ORDER_RUN)
    assert all(env == C_LOCALE for env in out.envs)
    facts = out.result["mlx_cluster"]
    assert set(facts) == {
        "thunderbolt",
        "rdma",
        "interfaces",
        "services",
        "mgmt",
        "os",
        "hw",
        "disk",
        "home",
        "power",
        "updates",
        "pythons",
        "trust_keys",
    }
    assert facts["trust_keys"] == 0  # no authorized_keys at all
    assert set(facts["pythons"]) == {"found", "module"}  # found by name: no command run for them
    assert facts["power"] == {"AC Power": facts["power"]["AC Power"]} and facts["power"]["AC Power"]["sleep"] == 0
    assert facts["updates"] == {
        "automatic_check": True,
        "automatic_download": True,
        "install_macos_updates": False,
        "critical_update_install": True,
    }
    assert facts["home"] == "/Users/tester"  # what ~ means there: the plan resolves the remote dir with it
    assert facts["mgmt"] == {"iface": "en0", "address": "10.1.2.3"}
    assert facts["os"] == {"product_version": "26.2", "build_version": "25C56"}
    assert facts["hw"] == {"memsize": 137438953472, "model": "Mac16,9", "ncpu": 16, "wired_limit_mb": 0}
    assert facts["disk"]["path"] == str(tmp_path)
    st = os.statvfs(tmp_path)
    assert abs(facts["disk"]["free_bytes"] - st.f_bavail * st.f_frsize) < 64 * 2**20
    assert facts["thunderbolt"]["mac"]["model_id"] == "Mac16,9"
    assert facts["interfaces"]["en2"]["ipv4"][0] == {"address": "10.208.0.1", "prefix": 30}
    assert facts["rdma"]["usable"] is True and facts["rdma"]["problems"] == []
    assert [(x["name"], x["device"], x["enabled"]) for x in facts["services"]][:2] == [
        ("Ethernet", "en0", True),
        ("Thunderbolt Bridge", "bridge0", True),
    ]


def test_mgmt_falls_back_to_the_default_route(module_runner, read_fixture, tmp_path):
    out = run(module_runner, read_fixture, tmp_path, env={"SSH_CONNECTION": "::1 50522 ::1 22"})
    assert list(ROUTE) in out.calls
    assert out.result["mlx_cluster"]["mgmt"] == {"iface": "en0", "address": "10.1.2.3"}


def test_cabled_ports_feed_the_rdma_problems(module_runner, read_fixture, tmp_path):
    # studio A has a Mac behind en2; rdma_en2 is up but has no IPv4-mapped GID yet
    out = run(module_runner, read_fixture, tmp_path, ibv_devinfo=(0, "ibv_devinfo_v_mini_active_no_ipv4.txt", ""))
    problems = out.result["mlx_cluster"]["rdma"]["problems"]
    assert [(p["code"], p["iface"]) for p in problems] == [("no_ipv4_gid", "en2")]


def test_unreadable_disk_path_is_a_warning(module_runner, read_fixture, tmp_path):
    out = module_runner(
        "mlx_cluster_facts",
        args={"disk_path": str(tmp_path / "nope")},
        bins=BINS,
        env=SSH,
        commands=answers(read_fixture, STUDIO_A),
    )
    assert not out.failed
    assert out.result["mlx_cluster"]["disk"]["free_bytes"] is None
    assert any("free space" in w for w in out.warnings)


@pytest.mark.parametrize(
    "content, keys",
    [
        pytest.param("ssh-ed25519 AAAAuser laptop\n", 0, id="no-block"),
        pytest.param(
            "ssh-ed25519 AAAAuser laptop\n{begin}\nssh-ed25519 AAAAm1 mlx-cluster m1\n\n"
            'restrict,from="10.0.0.1" ssh-ed25519 AAAAm2 mlx-cluster m2\n{end}\n',
            2,
            id="two-keys",
        ),
        pytest.param("{begin}\n{end}\n", 0, id="emptied-block"),
        pytest.param(None, None, id="unreadable"),
    ],
)
def test_the_cluster_keys_this_mac_trusts_are_counted(
    module_runner, read_fixture, monkeypatch, tmp_path, content, keys
):
    begin, end = (MARKER.replace("{mark}", m) for m in ("BEGIN", "END"))
    ssh = tmp_path / ".ssh"
    ssh.mkdir()
    if content is None:
        (ssh / "authorized_keys").mkdir()  # not a file it can read
    else:
        (ssh / "authorized_keys").write_text(content.format(begin=begin, end=end))
    monkeypatch.setenv("HOME", str(tmp_path))
    out = module_runner("mlx_cluster_facts", bins=BINS, env=SSH, commands=answers(read_fixture, STUDIO_A))
    assert not out.failed, out.result
    assert out.result["mlx_cluster"]["trust_keys"] == keys


def test_disk_path_defaults_to_home(module_runner, read_fixture, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    out = module_runner("mlx_cluster_facts", bins=BINS, env=SSH, commands=answers(read_fixture, STUDIO_A))
    assert out.result["mlx_cluster"]["disk"]["path"] == str(tmp_path)


@pytest.mark.parametrize(
    "override, command, fragment",
    [
        pytest.param({"sysctl": (0, "sw_vers_26_2.txt", "")}, SYSCTL, "is not a number", id="sysctl"),
        pytest.param({"sw_vers": (0, "sysctl_hw_studio_m4max.txt", "")}, SW_VERS, "ProductVersion", id="sw-vers"),
        pytest.param({"ifconfig": (0, "sw_vers_26_2.txt", "")}, IFCONFIG, "unexpected line", id="ifconfig"),
        pytest.param({"sp": (0, "sw_vers_26_2.txt", "")}, SP, "not JSON", id="system-profiler"),
        pytest.param({"ibv_devinfo": (0, "sw_vers_26_2.txt", "")}, IBV_DEVINFO, "hca_id", id="ibv-devinfo"),
        pytest.param({"sw_vers": (72, None, "sw_vers: no\n")}, SW_VERS, "exited with 72", id="sw-vers-rc"),
    ],
)
def test_malformed_output_fails_naming_the_command(module_runner, read_fixture, tmp_path, override, command, fragment):
    out = run(module_runner, read_fixture, tmp_path, **override)
    assert out.failed
    label = " ".join([command[0].rsplit("/", 1)[1], *command[1:]])
    assert out.result["msg"].startswith(f"cannot read `{label}`") and fragment in out.result["msg"]
    assert out.result["cmd"] == list(command)


def test_a_command_whose_output_was_lost_is_run_again(module_runner, read_fixture, tmp_path):
    # ansible-core's run_command can drop the output of a command that exits right after a
    # quiet second (under load): status 0 and nothing printed is not an answer
    class Twice(dict):
        def __getitem__(self, key):
            if key == SW_VERS and not self.get("_lost"):
                self["_lost"] = True
                return (0, "", "")
            return dict.__getitem__(self, key)

    out = module_runner(
        "mlx_cluster_facts",
        args={"disk_path": str(tmp_path)},
        bins=BINS,
        env=SSH,
        commands=Twice(answers(read_fixture, STUDIO_A)),
    )
    assert not out.failed, out.result
    assert out.calls.count(list(SW_VERS)) == 2
    assert out.result["mlx_cluster"]["os"]["product_version"] == "26.2"


def test_probe_links_reads_services_routes_and_pings_the_addressed_ports(module_runner, read_fixture, tmp_path):
    # the studio's en2 holds 10.208.0.1/30 with carrier; a service "Thunderbolt 1" sits on it
    order = (
        read_fixture("networksetup_order_bridge_enabled.txt")
        + "\n(5) Thunderbolt 1\n(Hardware Port: Thunderbolt 1, Device: en2)\n"
    )
    commands = answers(read_fixture, STUDIO_A)
    commands[ORDER] = (0, order, "")
    getinfo = ("/usr/sbin/networksetup", "-getinfo", "Thunderbolt 1")
    route = ("/usr/sbin/netstat", "-rn", "-f", "inet")
    ping = ("/sbin/ping", "-q", "-o", "-c", "2", "-t", "2", "-S", "10.208.0.1", "10.208.0.2")
    commands[getinfo] = (0, "Manual Configuration\nIP address: 10.208.0.1\nSubnet mask: 255.255.255.252\n", "")
    commands[route] = (0, read_fixture("netstat_rn_inet_cluster.txt"), "")
    commands[ping] = (0, "", "")
    out = module_runner(
        "mlx_cluster_facts",
        args={"disk_path": str(tmp_path), "probe_links": True},
        bins=dict(BINS, ping="/sbin/ping"),
        env=SSH,
        commands=commands,
    )
    assert not out.failed, out.result
    # one netstat for every host route, not a `route -n get` per peer
    assert sorted(out.calls) == sorted([list(a) for a in ORDER_RUN] + [list(getinfo), list(route), list(ping)])
    state = out.result["mlx_cluster"]["links_state"]
    assert state["service_info"]["Thunderbolt 1"]["address"] == "10.208.0.1"
    assert state["routes"]["10.208.0.2"]["interface"] == "en2"
    assert state["pings"] == {"en2": {"address": "10.208.0.1", "peer_address": "10.208.0.2", "ok": True}}
    # the far end of a cable (the /30's second address) reads the same but does not ping:
    # one ping per cable, from the end with the first address
    far = dict(commands)
    far[IFCONFIG] = (0, commands[IFCONFIG][1].replace("10.208.0.1", "10.208.0.2"), "")
    far[getinfo] = (0, "Manual Configuration\nIP address: 10.208.0.2\nSubnet mask: 255.255.255.252\n", "")
    far_route = route
    out = module_runner(
        "mlx_cluster_facts",
        args={"disk_path": str(tmp_path), "probe_links": True},
        bins=dict(BINS, ping="/sbin/ping"),
        env=SSH,
        commands=far,
    )
    assert not out.failed, out.result
    assert sorted(out.calls) == sorted([list(a) for a in ORDER_RUN] + [list(getinfo), list(far_route)])
    far_state = out.result["mlx_cluster"]["links_state"]
    assert far_state["pings"] == {}
    assert far_state["routes"] == {"10.208.0.1": {"destination": None, "interface": None, "gateway": None, "flags": []}}
    # without the option nothing more runs
    plain = module_runner("mlx_cluster_facts", args={"disk_path": str(tmp_path)}, bins=BINS, env=SSH, commands=commands)
    assert "links_state" not in plain.result["mlx_cluster"]
    assert sorted(plain.calls) == sorted(list(a) for a in ORDER_RUN)


def test_read_files_reports_sha256_and_mode_or_none(module_runner, read_fixture, tmp_path):
    import hashlib

    hostfile = tmp_path / "mlx-cluster" / "hostfile.json"
    hostfile.parent.mkdir()
    hostfile.write_text('{"backend": "ring"}\n')
    hostfile.chmod(0o600)
    out = module_runner(
        "mlx_cluster_facts",
        args={"disk_path": str(tmp_path), "read_files": [str(hostfile), str(tmp_path / "absent.json")]},
        bins=BINS,
        env=SSH,
        commands=answers(read_fixture, STUDIO_A),
    )
    assert not out.failed, out.result
    assert out.result["mlx_cluster"]["files"] == {
        str(hostfile): {"sha256": hashlib.sha256(b'{"backend": "ring"}\n').hexdigest(), "mode": "0600"},
        str(tmp_path / "absent.json"): None,
    }


def test_the_toolkit_directory_is_checked_never_made(module_runner, read_fixture, tmp_path):
    os.chmod(tmp_path, 0o755)
    mine = tmp_path / "mlx-cluster"
    args = {"disk_path": str(tmp_path), "cluster_dir": str(mine)}

    def checked():
        out = module_runner(
            "mlx_cluster_facts", args=args, bins=BINS, env=SSH, commands=answers(read_fixture, STUDIO_A)
        )
        assert not out.failed, out.result
        return out.result["mlx_cluster"]["cluster_dir"]

    assert checked() == {"path": str(mine), "problem": ""} and not mine.exists()  # made later, by the stages
    mine.mkdir(mode=0o700)
    assert checked()["problem"] == ""
    mine.chmod(0o770)  # the group may change what the venv, the scripts and the server run
    assert checked()["problem"] == f"{mine} is writable by group or others (mode 0770)"


def test_probe_links_takes_the_services_from_the_preferences_file(module_runner, read_fixture, tmp_path):
    fixtures = Path(__file__).resolve().parents[2] / "fixtures"
    order = (
        read_fixture("networksetup_order_bridge_enabled.txt")
        + "\n(5) Thunderbolt 1\n(Hardware Port: Thunderbolt 1, Device: en2)\n"
    )
    commands = answers(read_fixture, STUDIO_A)
    commands[ORDER] = (0, order, "")
    netstat = ("/usr/sbin/netstat", "-rn", "-f", "inet")
    ping = ("/sbin/ping", "-q", "-o", "-c", "2", "-t", "2", "-S", "10.208.0.1", "10.208.0.2")
    commands[netstat] = (0, read_fixture("netstat_rn_inet_cluster.txt"), "")
    commands[ping] = (0, "", "")
    out = module_runner(
        "mlx_cluster_facts",
        args={"disk_path": str(tmp_path), "probe_links": True},
        bins=dict(BINS, ping="/sbin/ping"),
        env=SSH,
        commands=commands,
        module_attrs={"SC_PREFERENCES": str(fixtures / "sc_preferences_studio.plist")},
    )
    assert not out.failed, out.result
    assert not any("-getinfo" in c for c in out.calls)  # no networksetup -getinfo at all
    info = out.result["mlx_cluster"]["links_state"]["service_info"]
    assert info["Thunderbolt 1"] == {
        "method": "manual",
        "address": "10.208.0.1",
        "subnet": "255.255.255.252",
        "router": None,
    }
    # an unreadable file: networksetup answers, as before
    commands[("/usr/sbin/networksetup", "-getinfo", "Thunderbolt 1")] = (0, "DHCP Configuration\n", "")
    out = module_runner(
        "mlx_cluster_facts",
        args={"disk_path": str(tmp_path), "probe_links": True},
        bins=dict(BINS, ping="/sbin/ping"),
        env=SSH,
        commands=commands,
        module_attrs={"SC_PREFERENCES": str(tmp_path / "missing.plist")},
    )
    assert ["/usr/sbin/networksetup", "-getinfo", "Thunderbolt 1"] in out.calls
    assert out.result["mlx_cluster"]["links_state"]["service_info"]["Thunderbolt 1"]["method"] == "dhcp"


SUDO_PROBE = ("/usr/bin/sudo", "-n", "/bin/sh", "-c", "true")  # what Ansible's become runs: /bin/sh -c


@pytest.mark.parametrize(
    "answer, passwordless, message",
    [
        ((0, "", ""), True, None),
        ((1, "", "sudo: a password is required\n"), False, "sudo: a password is required"),
        ("hang", False, "`sudo -n /bin/sh -c true` did not answer within 30 s on this Mac (stopped)"),
    ],
)
def test_probe_sudo_runs_sudo_n_beside_the_other_commands(
    module_runner, read_fixture, tmp_path, hang, answer, passwordless, message
):
    commands = answers(read_fixture, STUDIO_A)
    commands[SUDO_PROBE] = hang if answer == "hang" else answer
    out = module_runner(
        "mlx_cluster_facts",
        args={"disk_path": str(tmp_path), "probe_sudo": True, "command_timeout": 30},
        bins=dict(BINS, sudo="/usr/bin/sudo"),
        env={**SSH, "USER": "tester", "LOGNAME": "tester"},
        commands=commands,
    )
    assert not out.failed, out.result
    assert sorted(out.calls) == sorted([list(a) for a in ORDER_RUN] + [list(SUDO_PROBE)])
    assert out.result["mlx_cluster"]["sudo"] == {
        "user": "tester",
        "passwordless": passwordless,
        "message": message,
    }


def test_probe_sudo_without_sudo_on_path_says_so(module_runner, read_fixture, tmp_path):
    out = module_runner(
        "mlx_cluster_facts",
        args={"disk_path": str(tmp_path), "probe_sudo": True},
        bins=dict(BINS, sudo=None),
        env={**SSH, "USER": "tester", "LOGNAME": "tester"},
        commands=answers(read_fixture, STUDIO_A),
    )
    assert not out.failed, out.result
    sudo = out.result["mlx_cluster"]["sudo"]
    assert sudo["passwordless"] is False and "not on PATH" in sudo["message"]


def test_no_sudo_probe_unless_asked(module_runner, read_fixture, tmp_path):
    out = run(module_runner, read_fixture, tmp_path)
    assert "sudo" not in out.result["mlx_cluster"]
    assert not any(c[0].endswith("sudo") for c in out.calls)


def test_power_and_update_settings_are_not_read_when_not_asked(module_runner, read_fixture, tmp_path):
    out = module_runner(
        "mlx_cluster_facts",
        args={"disk_path": str(tmp_path), "read_power": False, "read_updates": False},
        bins=BINS,
        env=SSH,
        commands=answers(read_fixture, STUDIO_A),
    )
    assert not out.failed, out.result
    assert sorted(out.calls) == sorted(list(a) for a in ORDER_RUN if a not in (PMSET, UPDATES))
    facts = out.result["mlx_cluster"]
    assert "power" not in facts and "updates" not in facts
    out = module_runner(
        "mlx_cluster_facts",
        args={"disk_path": str(tmp_path), "read_updates": False},
        bins=BINS,
        env=SSH,
        commands=answers(read_fixture, STUDIO_A),
    )
    assert sorted(out.calls) == sorted(list(a) for a in ORDER_RUN if a != UPDATES)
    assert "power" in out.result["mlx_cluster"]


@pytest.mark.parametrize(
    "env,refused",
    [
        pytest.param({"SUDO_USER": "admin", "USER": "root", "HOME": "/var/root"}, True, id="become on: sudo to root"),
        pytest.param({"SUDO_USER": "admin", "USER": "admin"}, False, id="sudo to the same user"),
        pytest.param({"SUDO_USER": "", "USER": "admin"}, False, id="no sudo"),
    ],
)
def test_a_discovery_run_through_sudo_as_another_user_stops_naming_the_fix(
    module_runner, read_fixture, tmp_path, env, refused
):
    out = run(module_runner, read_fixture, tmp_path, env={**SSH, **env})
    assert out.failed is refused
    if refused:
        msg = out.result["msg"]
        assert msg.startswith("discovery ran through sudo as root, not as admin, the user Ansible logs in as")
        assert "under /var/root" in msg and "run without -b/--become and remove ansible_become" in msg
        assert out.calls == []  # nothing was run on the Mac
