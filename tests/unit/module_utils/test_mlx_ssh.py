"""mlx_ssh: the private ssh given to mlx.launch, and ssh failures in words."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_ssh import explain_ssh_failure, wrapper_files

TARGETS = {
    "m1": {
        "host": "10.99.0.2",
        "ssh": "FAKE",
        "options": ["-o", "BatchMode=yes", "-o", "User=admin", "-F", "/state/ssh_config"],
    },
    "m2": {"host": "10.99.0.3", "ssh": "FAKE", "options": ["-o", "BatchMode=yes", "-o", "User=admin"]},
}


@pytest.fixture
def wrapper(tmp_path):
    """The wrapper written out as mlx_launch does, with a stand-in ssh that prints its argv."""
    fake = tmp_path / "fake-ssh"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    targets = {n: dict(t, ssh=str(fake)) for n, t in TARGETS.items()}
    d = tmp_path / "w"
    d.mkdir()
    for name, text in wrapper_files(targets, sys.executable, ssh=str(fake)).items():
        (d / name).write_text(text)
    (d / "ssh").chmod(0o700)

    def run(*args):
        out = subprocess.run([str(d / "ssh"), *args], capture_output=True, text=True, check=True).stdout
        return json.loads(out)

    return run


def test_the_launchers_call_becomes_ansibles_destination_and_options(wrapper):
    # exactly how mlx.launch starts a rank, and how it ends one
    assert wrapper("-tt", "-o", "LogLevel=QUIET", "m1", "cd /x; python y.py") == [
        "-o",
        "BatchMode=yes",
        "-o",
        "User=admin",
        "-F",
        "/state/ssh_config",
        "-tt",
        "-o",
        "LogLevel=QUIET",
        "10.99.0.2",
        "cd /x; python y.py",
    ]
    assert wrapper("m2", "kill 12") == ["-o", "BatchMode=yes", "-o", "User=admin", "10.99.0.3", "kill 12"]


@pytest.mark.parametrize(
    "args",
    [
        ["-p22", "m2", "true"],
        ["-l", "someone", "m2", "true"],
        ["-vv", "-i", "/k", "m2"],
        ["--", "m2", "true"],
    ],
    ids=["glued-value", "option-value", "flags-then-option", "double-dash"],
)
def test_options_before_the_destination_are_skipped(wrapper, args):
    out = wrapper(*args)
    assert "10.99.0.3" in out and "m2" not in out


def test_other_destinations_pass_through_unchanged(wrapper):
    assert wrapper("-o", "BatchMode=yes", "10.1.2.3", "true") == ["-o", "BatchMode=yes", "10.1.2.3", "true"]
    assert wrapper("-V") == ["-V"]


def test_malformed_targets_are_refused():
    with pytest.raises(ValueError, match="m1"):
        wrapper_files({"m1": {"options": []}}, sys.executable, "/usr/bin/ssh")
    # a bare `ssh` would find the wrapper itself on its PATH
    with pytest.raises(ValueError, match="absolute path"):
        wrapper_files({"m1": {"host": "h", "ssh": "ssh", "options": []}}, sys.executable, "/usr/bin/ssh")


@pytest.mark.parametrize(
    "stderr, rc, words",
    [
        (
            "ssh: Could not resolve hostname studio-1: Name or service not known",
            255,
            ["does not resolve on the controller", "set ansible_host of studio-1"],
        ),
        (
            "admin@10.0.0.2: Permission denied (publickey,password,keyboard-interactive).",
            255,
            ["refused the key", "ssh-copy-id admin@10.0.0.2", "ansible_ssh_private_key_file"],
        ),
        ("Host key verification failed.", 255, ["not in the controller's known_hosts", "ssh admin@10.0.0.2 true"]),
        ("ssh: connect to host 10.0.0.2 port 22: Connection refused", 255, ["Remote Login"]),
        (
            "ssh: connect to host 10.0.0.2 port 22: Operation timed out",
            255,
            ["does not answer at 10.0.0.2", "powered on"],
        ),
    ],
    ids=["unresolvable-name", "refused-key", "unknown-host-key", "remote-login-off", "down"],
)
def test_each_ssh_failure_gets_its_own_fix(stderr, rc, words):
    msg = explain_ssh_failure(
        stderr, rc, "the controller", "studio-1", "10.0.0.2" if "studio-1:" not in stderr else "studio-1", user="admin"
    )
    assert msg.startswith("ssh from the controller to studio-1 (")
    for w in words:
        assert w in msg, (w, msg)


CHANGED = """@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!
Someone could be eavesdropping on you right now (man-in-the-middle attack)!
It is also possible that a host key has just been changed.
The fingerprint for the ED25519 key sent by the remote host is
SHA256:395r/iB8n6nXWsa1O16Mb7/hI5lYXTdhgo8jnhEm3aQ.
Please contact your system administrator.
Add correct host key in /Users/me/.ssh/known_hosts to get rid of this message.
Offending ED25519 key in /Users/me/.ssh/known_hosts:7
  remove with:
  ssh-keygen -f "/Users/me/.ssh/known_hosts" -R "10.0.0.2"
Host key for 10.0.0.2 has changed and you have requested strict checking.
Host key verification failed.
"""


def test_a_changed_host_key_is_named_with_ssh_s_own_command_to_remove_it():
    """(ssh's words as OpenSSH 9 prints them; its `@` banner is not the cause.) Accepting again
    alone would not do: ssh refuses a changed key until the old one is removed."""
    msg = explain_ssh_failure(CHANGED, 255, "this controller", "studio-1", "10.0.0.2", "admin")
    assert msg.startswith(
        "ssh from this controller to studio-1 (admin@10.0.0.2) failed: WARNING: REMOTE HOST IDENTIFICATION HAS "
        "CHANGED! studio-1's host key changed since this controller accepted it."
    ), msg
    assert '`ssh-keygen -f "/Users/me/.ssh/known_hosts" -R "10.0.0.2"`' in msg
    assert "`ssh admin@10.0.0.2 true`" in msg and "host-key checking stays on" in msg
    without = explain_ssh_failure(CHANGED.replace("ssh-keygen -f", "keygen"), 255, "c", "studio-1", "10.0.0.2")
    assert "`ssh-keygen -R 10.0.0.2`" in without
    # a key ssh has never seen (OpenSSH 8.x and 9.x words)
    for words in (
        "No ED25519 host key is known for 10.0.0.2 and you have requested strict checking.",
        "Host key verification failed.",
    ):
        assert "accept it once with `ssh admin@10.0.0.2 true`" in explain_ssh_failure(
            words, 255, "c", "studio-1", "10.0.0.2", "admin"
        )


def test_a_local_name_bonjour_did_not_find_is_told_as_such():
    """(the example inventory's names: studio-1.local; ssh's words on a Mac's controller)"""
    msg = explain_ssh_failure(
        "ssh: Could not resolve hostname studio-1.local: nodename nor servname provided, or not known",
        255,
        "this controller",
        "studio-1",
        "studio-1.local",
        "admin",
    )
    assert "Bonjour did not find studio-1.local from this controller" in msg, msg
    assert "Local hostname" in msg and "set ansible_host of studio-1 in the inventory to its address" in msg


def test_toolkit_trust_failures_point_at_the_stage():
    msg = explain_ssh_failure("Permission denied (publickey).", 255, "m1", "m2", "10.208.0.2", "admin", trust="toolkit")
    assert "cluster key of m1" in msg and "run the stage again" in msg
    msg = explain_ssh_failure("Host key verification failed.", 255, "m1", "m2", "10.208.0.2", trust="toolkit")
    assert "recorded on m1" in msg


def test_a_remote_command_failure_is_not_an_ssh_failure():
    assert explain_ssh_failure("python: No module named mlx", 1, "the controller", "m1", "10.0.0.2") is None
