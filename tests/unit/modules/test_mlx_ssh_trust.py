"""library/mlx_ssh_trust.py: read (and make) the cluster key, read the host keys, write the
marked authorized_keys block and the toolkit's known_hosts only when they differ."""

from __future__ import annotations

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_trust import marker_lines
from tests.unit.conftest import HANG, run_module

MARKER = "# {mark} mlx-cluster: keys of the Macs that copy to this one (ssh_trust_state=absent removes it)"
BEGIN, END = marker_lines(MARKER)


@pytest.fixture
def mac(tmp_path):
    """A Mac's home and /etc/ssh: {home, etc, env, args}."""
    home, etc = tmp_path / "home", tmp_path / "etc_ssh"
    home.mkdir()
    etc.mkdir()
    (etc / "ssh_host_ed25519_key.pub").write_text("ssh-ed25519 AAAAhostm2 root@m2\n")
    (etc / "ssh_host_rsa_key.pub").write_text("ssh-rsa AAAArsam2 root@m2\n")
    return {"home": home, "env": {"HOME": str(home)}, "args": {"host_key_dir": str(etc)}}


def keygen_argv(home, comment="mlx-cluster"):
    key = str(home / ".ssh" / "mlx_cluster_ed25519")
    return ("/usr/bin/ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", key)


def test_a_first_read_on_a_mac_that_copies_makes_the_key_and_reads_the_host_keys(capsys, mac):
    argv = keygen_argv(mac["home"], "mlx-cluster m1")
    run = run_module(
        capsys,
        "mlx_ssh_trust",
        dict(mac["args"], make_key=True, comment="mlx-cluster m1"),
        commands={argv: (0, "", "")},
        env=mac["env"],
    )
    assert not run.failed, run.result
    assert run.calls == [list(argv)]
    assert (mac["home"] / ".ssh").stat().st_mode & 0o777 == 0o700
    r = run.result
    assert r["changed"] and r["key_created"]
    assert r["host_keys"] == ["ssh-ed25519 AAAAhostm2", "ssh-rsa AAAArsam2"]  # file name order
    assert r["authorized_keys"] is None and r["known_hosts"] is None


def test_a_key_in_place_is_read_not_made_and_the_trust_in_place_reported(capsys, mac):
    ssh = mac["home"] / ".ssh"
    ssh.mkdir(mode=0o700)
    (ssh / "mlx_cluster_ed25519").write_text("private\n")
    (ssh / "mlx_cluster_ed25519.pub").write_text("ssh-ed25519 AAAAm1 mlx-cluster m1\n")
    (ssh / "authorized_keys").write_text(f"ssh-rsa AAAAuser\n{BEGIN}\nssh-ed25519 AAAAm3 mlx-cluster m3\n{END}\n")
    (ssh / "mlx_cluster_known_hosts").write_text("m2 ssh-ed25519 AAAAhostm2\n")
    run = run_module(capsys, "mlx_ssh_trust", dict(mac["args"], make_key=True), env=mac["env"])
    assert not run.failed and run.calls == []
    r = run.result
    assert not r["changed"] and not r["key_created"]
    assert r["public_key"] == "ssh-ed25519 AAAAm1 mlx-cluster m1"
    assert r["authorized_keys"] == ["ssh-ed25519 AAAAm3 mlx-cluster m3"]
    assert r["known_hosts"] == "m2 ssh-ed25519 AAAAhostm2\n"


@pytest.mark.parametrize("check", [False, True], ids=["run", "check mode"])
def test_writes_the_block_and_known_hosts_keeping_the_users_lines(capsys, mac, check):
    ssh = mac["home"] / ".ssh"
    ssh.mkdir(mode=0o700)
    user = "ssh-ed25519 AAAAuser laptop\n"
    (ssh / "authorized_keys").write_text(user)
    args = dict(
        mac["args"],
        authorized_keys=["ssh-ed25519 AAAAm1 mlx-cluster m1"],
        known_hosts="m1,10.208.0.1 ssh-ed25519 AAAAhostm1\n",
        _ansible_check_mode=check,
        _ansible_diff=True,
    )
    run = run_module(capsys, "mlx_ssh_trust", args, env=mac["env"])
    assert not run.failed, run.result
    r = run.result
    assert r["changed"] and r["authorized_keys"] == ["ssh-ed25519 AAAAm1 mlx-cluster m1"]
    assert [d["before_header"] for d in r["diff"]] == [
        str(ssh / "authorized_keys"),
        str(ssh / "mlx_cluster_known_hosts"),
    ]
    if check:
        assert (ssh / "authorized_keys").read_text() == user
        assert not (ssh / "mlx_cluster_known_hosts").exists()
        return
    assert (ssh / "authorized_keys").read_text() == f"{user}{BEGIN}\nssh-ed25519 AAAAm1 mlx-cluster m1\n{END}\n"
    assert (ssh / "authorized_keys").stat().st_mode & 0o777 == 0o600
    assert (ssh / "mlx_cluster_known_hosts").read_text() == "m1,10.208.0.1 ssh-ed25519 AAAAhostm1\n"
    again = run_module(capsys, "mlx_ssh_trust", dict(args, _ansible_diff=False), env=mac["env"])
    assert not again.result["changed"]


def test_no_host_key_names_the_directory_and_the_fix(capsys, mac, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    run = run_module(capsys, "mlx_ssh_trust", dict(host_key_dir=str(empty)), env=mac["env"])
    assert run.failed
    assert str(empty) in run.result["msg"] and "Remote Login" in run.result["msg"]


def test_keygen_that_fails_or_hangs_is_named(capsys, mac):
    argv = keygen_argv(mac["home"])
    failed = run_module(
        capsys,
        "mlx_ssh_trust",
        dict(mac["args"], make_key=True),
        commands={argv: (1, "", "Saving key failed: Permission denied")},
        env=mac["env"],
    )
    assert failed.failed and "ssh-keygen could not make the cluster key" in failed.result["msg"]
    assert "Permission denied" in failed.result["msg"]
    hung = run_module(capsys, "mlx_ssh_trust", dict(mac["args"], make_key=True), commands={argv: HANG}, env=mac["env"])
    assert hung.failed and "ssh-keygen" in hung.result["msg"]


def test_a_line_that_runs_the_forced_command_brings_it_and_an_empty_block_takes_it_away(capsys, mac):
    from ansible_collections.mlx.cluster.plugins.module_utils.mlx_trust import RECEIVE_ONLY, authorized_line

    ssh = mac["home"] / ".ssh"
    line = authorized_line(
        "ssh-ed25519 AAAAm1 mlx-cluster m1",
        ["10.0.0.11"],
        "~/.ssh/mlx_cluster_receive_only",
        "/Users/admin/mlx-cluster/models/tiny",
    )
    run = run_module(capsys, "mlx_ssh_trust", dict(mac["args"], authorized_keys=[line]), env=mac["env"])
    assert not run.failed, run.result
    assert run.result["changed"] and run.result["command_file_ok"]
    assert (ssh / "mlx_cluster_receive_only").read_text() == RECEIVE_ONLY
    assert (ssh / "mlx_cluster_receive_only").stat().st_mode & 0o777 == 0o600
    read = run_module(capsys, "mlx_ssh_trust", dict(mac["args"]), env=mac["env"])
    assert not read.result["changed"] and read.result["command_file_ok"] and read.result["authorized_keys"] == [line]
    (ssh / "mlx_cluster_receive_only").write_text('exec "$@"\n')  # changed behind our back: put back
    fixed = run_module(capsys, "mlx_ssh_trust", dict(mac["args"], authorized_keys=[line]), env=mac["env"])
    assert fixed.result["changed"] and (ssh / "mlx_cluster_receive_only").read_text() == RECEIVE_ONLY
    gone = run_module(capsys, "mlx_ssh_trust", dict(mac["args"], authorized_keys=[]), env=mac["env"])
    assert gone.result["changed"] and not gone.result["command_file_ok"]
    assert not (ssh / "mlx_cluster_receive_only").exists() and gone.result["authorized_keys"] == []
