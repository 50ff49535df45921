"""plugins/module_utils/mlx_trust.py RECEIVE_ONLY and authorized_line, and the filter
mlx_cluster_key_line: what a cluster key may run on the Mac that trusts it, run for real with
/bin/sh as sshd runs a forced command (SSH_ORIGINAL_COMMAND), a stand-in rsync printing what
it was given."""

from __future__ import annotations

import subprocess

import pytest

from ansible_collections.mlx.cluster.plugins.filter.trust_filters import mlx_cluster_key_line, sender_addresses
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_trust import RECEIVE_ONLY, authorized_line

DIR = "/Users/admin/mlx-cluster/models/tiny"


@pytest.fixture
def forced(tmp_path):
    script = tmp_path / "receive_only"
    script.write_text(RECEIVE_ONLY)
    rsync = tmp_path / "bin" / "rsync"
    rsync.parent.mkdir()
    rsync.write_text('#!/bin/sh\necho "RAN $*"\n')
    rsync.chmod(0o755)

    def run(command, rsync_path=""):
        env = {"PATH": f"{rsync.parent}:/usr/bin:/bin", "SSH_ORIGINAL_COMMAND": command}
        args = ["/bin/sh", str(script), DIR] + ([rsync_path] if rsync_path else [])
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=10)

    run.rsync = str(rsync)
    return run


@pytest.mark.parametrize(
    "command",
    [
        # GNU rsync 3.x's server_options for rsync_argv's options (clustered, capabilities after e.)
        f"rsync --server -rLptWe.iLsfxCIvu --timeout=120 --delete . {DIR}/",
        f"rsync --server -nrLptcW --log-format=X . {DIR}/",
        # macOS's openrsync (fargs.c, rsync-182): one word per option
        f"rsync --server -r -t -p -W --delete-during --log-format=%i . {DIR}",
    ],
)
def test_rsyncs_receiving_end_into_the_models_directory_runs(forced, command):
    out = forced(command)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "RAN " + command.split(" ", 1)[1] + "\n"


def test_the_rsync_the_toolkit_was_told_to_start_runs_and_no_other(forced):
    assert forced(f"{forced.rsync} --server -rt . {DIR}", rsync_path=forced.rsync).returncode == 0
    out = forced(f"{DIR}/rsync --server -rt . {DIR}", rsync_path=forced.rsync)
    assert out.returncode == 126 and "not the rsync the toolkit starts" in out.stderr


@pytest.mark.parametrize(
    "command, why",
    [
        ("id", "too few words"),
        ("/bin/sh -c id x y", "not the rsync the toolkit starts"),
        (f"rsync --server --sender -rt . {DIR}/", "option --sender"),
        (f"rsync --server --log-file=.zshrc -rt . {DIR}/", "option --log-file=.zshrc"),
        (f"rsync --server -T tmp . {DIR}/", "option -T"),
        (f"rsync --server -rtl . {DIR}/", "option -rtl"),  # a symbolic link made could lead out
        (f"rsync --server --temp-dir=x . {DIR}/", "option --temp-dir=x"),
        (f"rsync --server --timeout=1x . {DIR}/", "option --timeout=1x"),
        (f"rsync --server -rt . {DIR}/../../.ssh", "not the model's directory"),
        (f"rsync --server -rt . {DIR}2", "not the model's directory"),
        (f"rsync --server -rt x {DIR}", "not rsync's receiving end"),
        (f"rsync --server -rt . {DIR}; id", "a character"),
        ("rsync --server -rt . $(id)", "a character"),
        (f"rsync --server -rt . {DIR} `id`", "a character"),
        (f"rsync --server -rt . {DIR}\nid", "a character"),
    ],
)
def test_anything_else_is_refused_naming_it(forced, command, why):
    out = forced(command)
    assert out.returncode == 126 and out.stdout == "", out.stdout
    assert why in out.stderr and f"only lets rsync receive into {DIR}" in out.stderr, out.stderr


def test_the_line_restricts_the_key_to_its_macs_addresses_and_the_forced_command():
    line = authorized_line(
        "ssh-ed25519 AAAAm1 mlx-cluster m1",
        ["10.208.0.1", "10.0.0.11", "10.0.0.11"],
        "~/.ssh/mlx_cluster_receive_only",
        DIR,
    )
    assert line == (
        'restrict,from="10.0.0.11,10.208.0.1",command="/bin/sh $HOME/.ssh/mlx_cluster_receive_only '
        f'{DIR}" ssh-ed25519 AAAAm1 mlx-cluster m1'
    )


@pytest.mark.parametrize(
    "key, addresses, directory",
    [
        ("", ["10.0.0.1"], DIR),
        ("ssh-ed25519 AAAA", [], DIR),
        ("ssh-ed25519 AAAA", ["fe80::1"], DIR),
        ("ssh-ed25519 AAAA", ['10.0.0.1",command="id'], DIR),
        ("ssh-ed25519 AAAA", ["10.0.0.1"], "models/tiny"),
        ("ssh-ed25519 AAAA", ["10.0.0.1"], '/a" b'),
    ],
)
def test_a_line_that_cannot_be_written_safely_is_refused(key, addresses, directory):
    with pytest.raises(ValueError):
        authorized_line(key, addresses, "~/.ssh/x", directory)


def test_the_sending_macs_addresses_are_its_interfaces_its_management_address_and_its_cable_ends():
    facts = {
        "interfaces": {
            "lo0": {"ipv4": [{"address": "127.0.0.1"}]},
            "en0": {"ipv4": [{"address": "10.0.0.11"}]},
            "en2": {"ipv4": []},
        },
        "mgmt": {"iface": "en0", "address": "10.0.0.11"},
    }
    assert sender_addresses(facts, [{"address": "10.208.0.1"}]) == ["10.0.0.11", "10.208.0.1"]
    line = mlx_cluster_key_line("ssh-ed25519 AAAAm1 c", "m1", facts, [{"address": "10.208.0.1"}], "~/.ssh/x", DIR)
    assert line.startswith('restrict,from="10.0.0.11,10.208.0.1",')
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="the cluster key of m1"):
        mlx_cluster_key_line("ssh-ed25519 AAAAm1 c", "m1", {}, [], "~/.ssh/x", DIR)
