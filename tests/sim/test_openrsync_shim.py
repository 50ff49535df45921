"""The simulated Macs' `rsync` (tests/simcluster/shims/openrsync.py), run through the real shim
entry point with a fake state directory (no network namespaces: nothing to lock).

The expected texts come from Apple's openrsync (github.com/apple-oss-distributions/rsync,
openrsync/main.c rsync_lopts and case 'V', log.c printf_doformat case 'i') and macOS libc's
getopt_long (Libc stdlib/FreeBSD/getopt_long.c, GNU_COMPATIBLE messages).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIMS = ROOT / "tests" / "simcluster" / "shims"
sys.path.insert(0, str(SHIMS))
import openrsync  # noqa: E402

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rsync import parse_itemized, rsync_argv  # noqa: E402

pytestmark = pytest.mark.skipif(openrsync.gnu_rsync() is None, reason="GNU rsync is not installed")


@pytest.fixture
def mac(tmp_path):
    """A one-Mac state directory whose host is this machine's node name; returns run(argv, macos)."""
    host = os.uname().nodename
    bindir = tmp_path / "state" / "hosts" / host / "bin"
    bindir.mkdir(parents=True)
    (bindir / "rsync").symlink_to(SHIMS / "rsync")
    state = tmp_path / "state"
    (state / "live.json").write_text(json.dumps({"hosts": {}, "cables": {}}))
    # The far end of a push: a remote shell that runs the command with the Mac's PATH, so the
    # `rsync --server` it starts is the shim too.
    rsh = tmp_path / "rsh"
    rsh.write_text(f'#!/bin/sh\nshift\nexec env PATH="{bindir}:$PATH" "$@"\n')
    rsh.chmod(0o755)

    def run(argv, macos="26.1"):
        (state / "cluster.json").write_text(json.dumps({"name": "t", "hosts": {host: {"macos": macos}}}))
        env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", LC_ALL="C")
        return subprocess.run(["rsync", *argv], capture_output=True, text=True, env=env, timeout=60)

    run.rsh = str(rsh)
    run.argv_log = state / "hosts" / host / "argv.log"
    return run


def test_version(mac):
    r = mac(["--version"])
    assert (r.returncode, r.stdout, r.stderr) == (
        0,
        "openrsync: protocol version 29\nrsync version 2.6.9 compatible\n",
        "",
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        pytest.param(["--info=progress2", "a/", "b/"], "rsync: unrecognized option `--info=progress2'", id="long"),
        pytest.param(["-X", "a/", "b/"], "rsync: invalid option -- X", id="short"),
        pytest.param(["--rsh"], "rsync: option `--rsh' requires an argument", id="missing-argument"),
        pytest.param(["--dele", "a/", "b/"], "rsync: option `--dele' is ambiguous", id="ambiguous"),
    ],
)
def test_options_openrsync_lacks_are_refused(mac, argv, message):
    r = mac(argv)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines()[0] == message and r.stderr.splitlines()[1].startswith("usage: rsync [-0468B")


def test_log_file_only_from_macos_26(mac):
    probe = ["--log-file=/dev/null", "--version"]
    assert mac(probe, macos="26.1").returncode == 0
    r = mac(probe, macos="15.5")
    assert r.returncode == 1 and r.stderr.startswith("rsync: unrecognized option `--log-file=/dev/null'")


def test_before_15_4_it_is_not_openrsync(mac):
    assert "openrsync" not in mac(["--version"], macos="15.3").stdout


def test_every_argv_the_product_passes_is_accepted():
    for kw in (
        {},
        {"dry_run": True, "delete": True, "checksum": True, "rsync_path": "rsync"},
        {"log_file": "/tmp/x.log"},
    ):
        argv = rsync_argv("rsync", "/s", "h:/d", ssh_command="ssh -o BatchMode=yes", **kw)[1:]
        assert openrsync.plan(argv, "26.1")[0] == "run", argv
    assert openrsync.plan(["--server", "-nWtpr", "--log-format=%i%I", "--delete", ".", "/d/"], "15.5")[0] == "run"


@pytest.mark.parametrize(
    "gnu, sender, shown",
    [
        pytest.param("<f+++++++++ a.bin", True, "<f+++++++ a.bin", id="new"),
        pytest.param("<f.st...... a.bin", True, "<f.st.... a.bin", id="update"),
        pytest.param("cd+++++++++ sub/", True, "cd+++++++ sub/", id="new-dir"),
        pytest.param(".d..t...... ./", True, ".d..t.... ./", id="dir-time"),
        pytest.param(".f          a.bin", True, None, id="unchanged-as-sender"),
        pytest.param(".f          a.bin", False, None, id="unchanged-as-receiver"),
        pytest.param(".d          ./", True, None, id="unchanged-dir"),
        pytest.param("*deleting   old.npz", True, "*deleting old.npz", id="deleting"),
        pytest.param("sent 10 bytes", True, "sent 10 bytes", id="other"),
    ],
)
def test_itemize_rewrite(gnu, sender, shown):
    assert openrsync.to_openrsync_item(gnu, sender) == shown


def test_the_earlier_reading_itemizes_unchanged_files_as_sent_and_the_parser_takes_it():
    """Issue #11's reading of openrsync (every unchanged file as `<f.......` when sending), kept
    as a switch: the product's parser counts those lines as no change."""
    line = openrsync.to_openrsync_item(".f          a.bin", True, unchanged_as_sent=True)
    assert line == "<f....... a.bin"
    items = parse_itemized(line + "\n")
    assert items["changed"] is False and items["transferred"] == []


def test_push_twice_then_check(mac, tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    (src / "sub").mkdir(parents=True)
    dest.mkdir()
    for name, data in (("config.json", b"{}"), ("model.safetensors", b"w" * 1000), ("sub/t.json", b"t")):
        (src / name).write_bytes(data)
    argv = rsync_argv("rsync", str(src), f"m2:{dest}", ssh_command=mac.rsh)[1:]

    first = mac(argv)
    assert first.returncode == 0, first.stderr
    assert "<f+++++++ model.safetensors" in first.stdout.splitlines()
    assert sorted(parse_itemized(first.stdout)["transferred"]) == ["config.json", "model.safetensors", "sub/t.json"]
    assert any("--server" in json.loads(line)["argv"] for line in mac.argv_log.read_text().splitlines())

    again = mac(argv)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == []  # unchanged files are not itemized when sending
    assert parse_itemized(again.stdout)["changed"] is False

    (src / "model.safetensors").write_bytes(b"v" * 1001)
    check = mac(rsync_argv("rsync", str(src), f"m2:{dest}", ssh_command=mac.rsh, dry_run=True)[1:])
    assert check.returncode == 0, check.stderr
    items = parse_itemized(check.stdout)
    assert items["transferred"] == ["model.safetensors"] and items["changed"] is True
    assert (dest / "model.safetensors").read_bytes() == b"w" * 1000  # a dry run copies nothing
    shutil.rmtree(dest)


def test_a_far_end_whose_shell_prints_fails_as_openrsync_says(mac, tmp_path):
    """GNU rsync underneath says "is your shell clean?"; a Mac's openrsync has no such check and
    fails on the text read as a multiplex header (rsync-182 io.c io_read_flush), exit code 1.
    The product names the shell from openrsync's words too."""
    from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rsync import explain_failure

    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text("{}")
    loud = tmp_path / "loud-rsh"
    loud.write_text(f'#!/bin/sh\necho "Last login: Mon Nov 30 on ttys000"\nexec {mac.rsh} "$@"\n')
    loud.chmod(0o755)
    r = mac(["-rt", "-e", str(loud), f"{src}/", f"m2:{tmp_path / 'dest'}/"])
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "shell clean" not in r.stderr and "protocol incompatibility" not in r.stderr, r.stderr
    line = r.stderr.strip().splitlines()[0]
    assert line.endswith("error: unexpected tag 25 (0x203a6e69), len 3829353"), r.stderr
    msg = explain_failure(r.returncode, r.stderr, "m2", "/d", "m1", name="m2")
    assert "what came back from m2 was not rsync's protocol" in msg and "~/.zshenv" in msg, msg
    # the same push through a quiet shell copies
    assert mac(["-rt", "-e", mac.rsh, f"{src}/", f"m2:{tmp_path / 'dest'}/"]).returncode == 0
    assert (tmp_path / "dest" / "config.json").read_text() == "{}"
