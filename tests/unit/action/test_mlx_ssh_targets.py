"""mlx_ssh_targets: what Ansible's ssh connection would use, as a destination and options."""

from __future__ import annotations

import subprocess

import pytest

from plugins.action.mlx_ssh_targets import TargetError, probe, ssh_target


def _opt(target, name):
    """The value of `-o Name=value` in the target's options (first one: what ssh takes)."""
    words = target["options"]
    for i, w in enumerate(words[:-1]):
        if w == "-o" and words[i + 1].split("=", 1)[0] == name:
            return words[i + 1].split("=", 1)[1]
    return None


def test_inventory_host_user_port_key_and_args():
    t = ssh_target(
        "studio-1",
        {
            "host": "192.168.1.21",
            "remote_user": "admin",
            "port": 2222,
            "private_key_file": "/keys/cluster",
            "ssh_common_args": "-F /etc/sim/ssh_config",
            "ssh_extra_args": "-o ProxyJump=bastion",
            "ssh_args": "",
            "ssh_executable": "ssh",
        },
    )
    assert t["host"] == "192.168.1.21" and t["user"] == "admin" and t["port"] == 2222
    assert t["options"][:2] == ["-o", "BatchMode=yes"]
    assert _opt(t, "User") == "admin" and _opt(t, "Port") == "2222" and _opt(t, "IdentityFile") == "/keys/cluster"
    i = t["options"].index("-F")
    assert t["options"][i + 1] == "/etc/sim/ssh_config"
    assert t["options"].index("ProxyJump=bastion") > i  # common args before extra args, as Ansible
    # our defaults come last, so what the inventory says wins (ssh keeps the first value)
    assert t["options"][-6:] == [
        "-o",
        "ConnectTimeout=10",
        "-o",
        "ServerAliveInterval=10",
        "-o",
        "ServerAliveCountMax=3",
    ]


def test_name_is_the_destination_without_ansible_host_and_nothing_is_invented():
    t = ssh_target("m1.local", {"host": None, "remote_user": None, "port": None})
    assert t["host"] == "m1.local" and t["user"] is None and t["port"] is None
    assert _opt(t, "User") is None and _opt(t, "Port") is None and _opt(t, "IdentityFile") is None


def test_connection_reuse_options_of_ansible_are_left_out():
    t = ssh_target(
        "m1",
        {
            "host": "10.0.0.2",
            "ssh_args": "-C -o ControlMaster=auto -o ControlPersist=60s -oControlPath=/x -o ServerAliveInterval=5",
        },
    )
    words = " ".join(t["options"])
    assert "Control" not in words
    assert "-C" in t["options"] and _opt(t, "ServerAliveInterval") == "5"


def test_host_key_checking_is_never_loosened():
    t = ssh_target("m1", {"host": "10.0.0.2", "ssh_args": ""})
    assert "StrictHostKeyChecking" not in " ".join(t["options"])
    assert "UserKnownHostsFile" not in " ".join(t["options"])


@pytest.mark.parametrize(
    "options, words",
    [
        ({"connection": "local"}, "ansible_connection is 'local'"),
        ({"private_key": "-----BEGIN OPENSSH PRIVATE KEY-----"}, "ansible_ssh_private_key_file"),
    ],
    ids=["not-ssh", "key-as-text"],
)
def test_settings_ssh_cannot_use_are_named(options, words):
    with pytest.raises(TargetError, match=words) as exc:
        ssh_target("studio-2", {"host": "10.0.0.3", **options})
    assert str(exc.value).startswith("studio-2:")


def test_a_key_path_with_a_space_is_quoted_for_ssh():
    t = ssh_target("m1", {"host": "10.0.0.2", "private_key_file": "/Users/a b/key"})
    assert _opt(t, "IdentityFile") == '"/Users/a b/key"'


TARGET = {"name": "m2", "host": "10.0.0.3", "user": "admin", "ssh": "ssh", "options": ["-o", "BatchMode=yes"]}


def test_a_probe_runs_ssh_true_as_the_target_says_bounded():
    seen = {}

    def run(argv, **kw):
        seen.update(argv=argv, **kw)
        return subprocess.CompletedProcess(argv, 0, "", "")

    assert probe(TARGET, run=run, timeout=7) == {"ok": True, "why": None}
    assert seen["argv"] == ["ssh", "-o", "BatchMode=yes", "10.0.0.3", "true"]
    assert seen["timeout"] == 7 and seen["stdin"] == subprocess.DEVNULL


@pytest.mark.parametrize(
    "outcome, words",
    [
        (
            subprocess.CompletedProcess([], 255, "", "ssh: connect to host 10.0.0.3 port 22: Connection refused\n"),
            "Fix: turn Remote Login on",
        ),
        (subprocess.TimeoutExpired(["ssh"], 7), "ssh timed out after 7 s. m2 does not answer at 10.0.0.3"),
        (FileNotFoundError(2, "No such file or directory"), "ssh: No such file or directory"),
        (subprocess.CompletedProcess([], 1, "", "sh: true: not found\n"), "failed: sh: true: not found."),
    ],
    ids=["remote-login-off", "hung", "no-ssh-program", "not-an-ssh-failure"],
)
def test_a_failed_probe_says_why_naming_the_mac(outcome, words):
    def run(argv, **kw):
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    got = probe(TARGET, run=run, timeout=7)
    assert got["ok"] is False and "to m2 (" in got["why"] and words in got["why"], got
