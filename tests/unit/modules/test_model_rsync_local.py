"""library/model_rsync.py and model_manifest.py for real: rsync copies temporary directories.

Nothing is mocked: main() runs the real rsync (GNU rsync here; the argv uses only options
openrsync shares). A fake `ssh` on PATH runs the far end's command locally through sh, as
sshd would, so the `host:path` form and `--rsh` are exercised too. One test goes through
`ansible localhost -m model_rsync` with the project's ansible.cfg.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from ansible_collections.mlx.cluster.plugins.modules import model_manifest, model_rsync

ROOT = Path(__file__).resolve().parents[3]
RSYNC = shutil.which("rsync")
pytestmark = pytest.mark.skipif(RSYNC is None, reason="rsync is not installed")

FAKE_SSH = """#!/bin/sh
# ssh stand-in: log the argv, skip the options and the host, run the command as sshd would
echo "$*" >> "{log}"
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-F|-p|-i|-l) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
shift
exec /bin/sh -c "$*"
"""
DENIED_SSH = """#!/bin/sh
echo "admin@10.208.0.2: Permission denied (publickey)." >&2
exit 255
"""


# The modules as Ansible names them (mlx.cluster.<name>), imported through the collection.
LIBRARY = {"model_manifest": model_manifest, "model_rsync": model_rsync}


@pytest.fixture
def run(capsys):
    """run(name, args, env=None) -> the module's JSON result, its real main() run in-process."""
    from ansible.module_utils.common import warnings as ansible_warnings
    from ansible.module_utils.testing import patch_module_args

    def _run(name, args, env=None):
        for store in ("_global_warnings", "_global_deprecations"):
            getattr(ansible_warnings, store, {}).clear()
        try:
            from ansible.module_utils import _internal as ansible_internal

            controller_flag = mock.patch.object(ansible_internal, "is_controller", False)
        except (ImportError, AttributeError):
            controller_flag = contextlib.nullcontext()
        module = LIBRARY[name]
        with controller_flag, patch_module_args(args), mock.patch.dict("os.environ", env or {}):
            capsys.readouterr()
            with pytest.raises(SystemExit):
                module.main()
        return json.loads(capsys.readouterr().out)

    return _run


@pytest.fixture
def tree(tmp_path):
    """A source model, a home with the destination's parent, and the destination path."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "config.json").write_text('{"model_type": "qwen3"}\n')
    (src / "model.safetensors").write_bytes(os.urandom(64 * 1024))
    (src / "sub" / "tokenizer.json").write_text("{}\n")
    home = tmp_path / "home"
    (home / "mlx-cluster" / "models").mkdir(parents=True)
    (home / "keep.txt").write_text("not the model's\n")
    dest = home / "mlx-cluster" / "models" / "qwen"
    return src, home, dest


def sync(run, src, home, dest, **extra):
    return run("model_rsync", dict({"src": str(src), "dest": str(dest)}, **extra), env={"HOME": str(home)})


def manifest(run, path, expected=None, label="m2", sha256=True):
    args = {"path": str(path), "sha256": sha256, "label": label}
    if expected is not None:
        args["expected"] = expected
    return run("model_manifest", args)


def test_copy_then_nothing_to_do(run, tree):
    src, home, dest = tree
    first = sync(run, src, home, dest)
    assert not first.get("failed"), first
    assert first["changed"] is True
    assert sorted(first["transferred"]) == ["config.json", "model.safetensors", "sub/tokenizer.json"]
    assert "./" in first["created"] and "sub/" in first["created"]
    assert (dest / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()

    second = sync(run, src, home, dest)
    assert not second.get("failed"), second
    assert second["changed"] is False and second["transferred"] == [] and second["created"] == []

    source = manifest(run, src)["files"]
    assert manifest(run, dest, expected=source)["problems"] == []


def test_check_mode_reports_and_copies_nothing(run, tree):
    src, home, dest = tree
    sync(run, src, home, dest)
    (src / "config.json").write_text('{"model_type": "qwen3", "changed": true}\n')
    (src / "extra.safetensors").write_bytes(b"new shard")
    before = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}

    dry = sync(run, src, home, dest, _ansible_check_mode=True)
    assert not dry.get("failed"), dry
    assert "--dry-run" in dry["cmd"]
    assert dry["changed"] is True
    assert sorted(dry["transferred"]) == ["config.json", "extra.safetensors"]
    assert {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()} == before
    assert not (dest / "extra.safetensors").exists()

    real = sync(run, src, home, dest)
    assert real["changed"] is True and sorted(real["transferred"]) == ["config.json", "extra.safetensors"]


def test_a_corrupted_copy_is_named_then_repaired_with_checksum(run, tree):
    src, home, dest = tree
    sync(run, src, home, dest)
    source = manifest(run, src)["files"]
    weights = dest / "model.safetensors"
    stat = weights.stat()
    data = bytearray(weights.read_bytes())
    data[1000] ^= 0xFF  # same size, same mtime: the quick check cannot see it
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    (dest / "sub" / "tokenizer.json").write_text("{truncated")

    problems = manifest(run, dest, expected=source, label="m3")["problems"]
    assert [(p["host"], p["file"], p["kind"]) for p in problems] == [
        ("m3", "model.safetensors", "sha256"),
        ("m3", "sub/tokenizer.json", "size"),
    ]
    assert all(p["msg"].startswith("m3: ") for p in problems)

    quick = sync(run, src, home, dest)
    assert quick["transferred"] == ["sub/tokenizer.json"]  # size differs: found by the quick check
    assert [p["file"] for p in manifest(run, dest, expected=source)["problems"]] == ["model.safetensors"]

    repaired = sync(run, src, home, dest, checksum=True)
    assert repaired["changed"] is True and repaired["transferred"] == ["model.safetensors"]
    assert manifest(run, dest, expected=source)["problems"] == []


def test_delete_stays_inside_the_model_directory(run, tree):
    src, home, dest = tree
    sync(run, src, home, dest)
    (dest / "old-00001.safetensors").write_bytes(b"stale")
    (home / "mlx-cluster" / "models" / "other-model").mkdir()

    kept = sync(run, src, home, dest)
    assert kept["changed"] is False and (dest / "old-00001.safetensors").exists()
    problems = manifest(run, dest, expected=manifest(run, src)["files"])["problems"]
    assert [(p["file"], p["kind"]) for p in problems] == [("old-00001.safetensors", "extra_weight")]

    dry = sync(run, src, home, dest, delete=True, _ansible_check_mode=True)
    assert dry["changed"] is True and dry["deleted"] == ["old-00001.safetensors"]
    assert (dest / "old-00001.safetensors").exists()

    deleted = sync(run, src, home, dest, delete=True)
    assert deleted["changed"] is True and deleted["deleted"] == ["old-00001.safetensors"]
    assert not (dest / "old-00001.safetensors").exists()
    assert (home / "keep.txt").exists() and (home / "mlx-cluster" / "models" / "other-model").is_dir()


def test_refuses_the_home_directory_even_with_delete(run, tree):
    src, home, _ = tree
    out = sync(run, src, home, home, delete=True)
    assert out.get("failed") and "home directory itself" in out["msg"]
    assert (home / "keep.txt").exists()


def fake_ssh(tmp_path, home):
    """FAKE_SSH as `ssh` first on PATH: (its directory, its argv log, the module's env)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "ssh.log"
    (bindir / "ssh").write_text(FAKE_SSH.format(log=log))
    (bindir / "ssh").chmod(0o755)
    return bindir, log, {"HOME": str(home), "PATH": f"{bindir}:{os.environ['PATH']}"}


def test_push_through_ssh(run, tree, tmp_path):
    src, home, dest = tree
    bindir, log, env = fake_ssh(tmp_path, home)
    args = {
        "src": str(src),
        "dest": str(dest),
        "host": "admin@10.208.0.2",
        "dest_home": str(home),
        "ssh_args": ["-o", "HostKeyAlias=m2", "-o", "BatchMode=yes"],
        "source_name": "m1",
    }

    first = run("model_rsync", args, env=env)
    assert not first.get("failed"), first
    assert first["cmd"][-4:] == [
        "--rsh",
        f"{bindir}/ssh -o HostKeyAlias=m2 -o BatchMode=yes",
        f"{src}/",
        f"admin@10.208.0.2:{dest}/",
    ]
    assert first["changed"] is True
    assert sorted(first["transferred"]) == ["config.json", "model.safetensors", "sub/tokenizer.json"]
    # rsync hands ssh the user as -l (GNU) or keeps user@host (openrsync)
    assert log.read_text().startswith(
        (
            "-o HostKeyAlias=m2 -o BatchMode=yes -l admin 10.208.0.2 rsync --server",
            "-o HostKeyAlias=m2 -o BatchMode=yes admin@10.208.0.2 rsync --server",
        )
    )
    assert run("model_rsync", args, env=env)["changed"] is False

    (bindir / "ssh").write_text(DENIED_SSH)
    denied = run("model_rsync", args, env=env)
    # rsync exits with ssh's 255, or with 12 (protocol stream) when it reads the closed pipe
    # before it reaps ssh: a race in rsync itself. The message must not depend on which.
    assert denied.get("failed") and denied["rc"] in (12, 255), denied
    assert "ssh from m1 to admin@10.208.0.2 (admin@10.208.0.2) failed" in denied["msg"]
    assert "refused the key" in denied["msg"]


def test_progress_log_file(run, tree, tmp_path):
    src, home, dest = tree
    version = subprocess.run([RSYNC, "--version"], capture_output=True, text=True).stdout
    if "openrsync" in version or "version 2." in version:
        pytest.skip("this rsync writes no client log file")
    log = tmp_path / "logs" / "model_sync.log"
    out = sync(run, src, home, dest, log_file=str(log))
    assert out["log_file"] == str(log)
    text = log.read_text()
    for rel in ("config.json", "model.safetensors", "sub/tokenizer.json"):
        assert f">f+++++++++ {rel}" in text


def adhoc_runner(tmp_path, home, path_first=None):
    """adhoc(args, *extra) -> (result, stdout): `ansible localhost -m mlx.cluster.model_rsync` with the
    project's ansible.cfg (the minimal callback prints "localhost | CHANGED => {...}" last)."""
    ansible = Path(sys.executable).parent / "ansible"
    if not ansible.exists():
        pytest.skip("no ansible command beside this Python")
    env = dict(
        os.environ,
        HOME=str(home),
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_STDOUT_CALLBACK="minimal",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-rtmp"),
    )
    if path_first:
        env["PATH"] = f"{path_first}:{env['PATH']}"

    def adhoc(args, *extra):
        proc = subprocess.run(
            [
                str(ansible),
                "localhost",
                "-i",
                "localhost,",
                "-c",
                "local",
                "-e",
                f"ansible_python_interpreter={sys.executable}",
                "-m",
                "mlx.cluster.model_rsync",
                "-a",
                json.dumps(args),
                *extra,
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        before, _, body = proc.stdout.rpartition("localhost | ")
        head, _, body = body.partition(" => ")
        assert head in ("CHANGED", "SUCCESS"), proc.stdout
        return json.loads(body), before

    return adhoc


def test_through_the_ansible_command(tree, tmp_path):
    src, home, dest = tree
    adhoc = adhoc_runner(tmp_path, home)
    args = {"src": str(src), "dest": str(dest)}
    dry, _ = adhoc(args, "--check")
    assert dry["changed"] is True and not dest.exists()
    first, _ = adhoc(args)
    assert first["changed"] is True and "model.safetensors" in first["transferred"]
    assert adhoc(args)[0]["changed"] is False


SLOW_RSYNC = """#!/bin/sh
# the machine's rsync at 4 MB/s: a copy of a few seconds
exec {rsync} --bwlimit=4000 "$@"
"""


def test_progress_lines_while_the_copy_runs(tree, tmp_path):
    """The action plugin (progress_interval) runs the module, reads its progress file while it
    copies and prints the copy's progress before the result, which keeps the keys of a plain run;
    the task's temporary directory (the progress file's) is removed at the end."""
    src, home, dest = tree
    (src / "model.safetensors").write_bytes(os.urandom(16 * 1000 * 1000))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "rsync").write_text(SLOW_RSYNC.format(rsync=RSYNC))
    (bindir / "rsync").chmod(0o755)
    adhoc = adhoc_runner(tmp_path, home, path_first=bindir)
    args = {"src": str(src), "dest": str(dest), "progress_interval": 1}
    first, shown = adhoc(args)
    assert first["changed"] is True and sorted(first["transferred"]) == [
        "config.json",
        "model.safetensors",
        "sub/tokenizer.json",
    ]
    assert "--progress" in first["cmd"]
    lines = [line for line in shown.splitlines() if line.startswith("[localhost] model: ")]
    assert lines, shown
    assert re.match(r"^\[localhost\] model: \d+\.\d/16\.0 MB \(\d+%\)(, [\d.]+ [KM]?B/s)?$", lines[-1]), lines
    assert not set(first) & {"ansible_job_id", "started", "finished", "results_file"}
    plain, _ = adhoc(dict(args, progress_interval=0))
    assert sorted(plain) == sorted(first) and plain["changed"] is False
    again, shown = adhoc(args)  # nothing to copy: no progress line
    assert again["changed"] is False and "model:" not in shown
    assert not list(home.glob(".ansible/tmp/ansible-tmp-*")), "the task's temporary directory is left behind"
    assert not (home / ".ansible_async").exists(), "an async job was started"


def test_a_copy_that_stops_moving_data_is_ended_and_named(run, tree, tmp_path):
    """stall_timeout is rsync's --timeout: a far end that never answers (an ssh that connects and
    then hangs) ends the copy in about that many seconds, with a message naming both ends."""
    import time

    src, home, dest = tree
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ssh").write_text("#!/bin/sh\nexec sleep 30\n")
    (bindir / "ssh").chmod(0o755)
    env = {"HOME": str(home), "PATH": f"{bindir}:{os.environ['PATH']}"}
    args = {
        "src": str(src),
        "dest": str(dest),
        "host": "admin@10.208.0.2",
        "dest_home": str(home),
        "host_label": "m2",
        "source_name": "m1",
        "stall_timeout": 2,
    }
    start = time.monotonic()
    stalled = run("model_rsync", args, env=env)
    assert time.monotonic() - start < 20
    assert stalled.get("failed") and "--timeout=2" in stalled["cmd"], stalled
    assert "rsync into admin@10.208.0.2:" in stalled["msg"] and "from m1 stalled" in stalled["msg"]
    assert "no data moved for 2 s" in stalled["msg"] and "between m1 and m2" in stalled["msg"]
    assert "resumes" in stalled["msg"] and "model_sync_stall_timeout" in stalled["msg"]


def relay_still_receiving(src, tmp_path, partial):
    """A relaying Mac's copy still arriving: config.json and the tokenizer complete, the weights
    only as rsync's temporary `.model.safetensors.Xy12Ab` holding `partial`."""
    relay = tmp_path / "relay"
    (relay / "sub").mkdir(parents=True)
    shutil.copy2(src / "config.json", relay / "config.json")
    shutil.copy2(src / "sub" / "tokenizer.json", relay / "sub" / "tokenizer.json")
    (relay / ".model.safetensors.Xy12Ab").write_bytes(partial)
    return relay


def test_wait_for_passes_each_file_on_once_complete_in_the_copy_still_arriving(run, tree, tmp_path):
    """The copy being relayed (`relay`) has config.json; the weights arrive as rsync writes them
    (a temporary `.name.XXXX`, renamed into place with the source's time) a second later."""
    import threading
    import time

    src, home, dest = tree
    source = manifest(run, src, sha256=False)["files"]
    relay = relay_still_receiving(src, tmp_path, (src / "model.safetensors").read_bytes()[:1000])
    temp = relay / ".model.safetensors.Xy12Ab"

    def arrive():
        time.sleep(1.5)
        shutil.copy2(src / "model.safetensors", temp)
        os.replace(temp, relay / "model.safetensors")

    arriving = threading.Thread(target=arrive)
    arriving.start()
    try:
        out = sync(run, relay, home, dest, wait_for=source, upstream_name="m1", host_label="m3", stall_timeout=10)
    finally:
        arriving.join()
    assert not out.get("failed"), out
    assert [p["excluded"] for p in out["passes"]] == [1, 0], out["passes"]
    assert sorted(out["transferred"]) == ["config.json", "model.safetensors", "sub/tokenizer.json"]
    assert out["changed"] is True and not any(".Xy12Ab" in i for i in out["transferred"] + out["created"])
    assert manifest(run, dest, expected=source)["problems"] == []
    again = sync(run, relay, home, dest, wait_for=source, upstream_name="m1")
    assert again["changed"] is False and len(again["passes"]) == 1, again


def test_wait_for_a_copy_that_stops_arriving_fails_naming_the_upstream(run, tree, tmp_path):
    src, home, dest = tree
    source = manifest(run, src, sha256=False)["files"]
    relay = tmp_path / "relay"
    relay.mkdir()
    shutil.copy2(src / "config.json", relay / "config.json")
    (relay / ".model.safetensors.Xy12Ab").write_bytes(b"partial")
    out = sync(
        run, relay, home, dest, wait_for=source, upstream_name="m1", host_label="m3", source_name="m2", stall_timeout=1
    )
    assert out.get("failed") is True, out
    assert "m2 stopped waiting to pass the model on to m3: its own copy from m1 has not grown" in out["msg"]
    assert out["pending"] == ["model.safetensors", "sub/tokenizer.json"] and out["complete"] == ["config.json"]
    assert [p["excluded"] for p in out["passes"]] == [2]  # config.json went on meanwhile
    assert (dest / "config.json").exists() and not (dest / "model.safetensors").exists()
    assert not list(dest.glob(".model*"))


def test_a_relay_over_ssh_runs_its_passes_over_one_master_and_ends_it(run, tree, tmp_path):
    """With a host, the relay's passes share one SSH connection: every pass's ssh gets the same
    ControlPath (a directory of the run's own), and `ssh -O exit` ends the master afterwards;
    the directory is gone with it."""
    src, home, dest = tree
    source = manifest(run, src, sha256=False)["files"]
    bindir, log, env = fake_ssh(tmp_path, home)
    args = {
        "src": str(src),
        "dest": str(dest),
        "host": "10.208.0.2",
        "dest_home": str(home),
        "ssh_args": ["-o", "BatchMode=yes"],
        "source_name": "m2",
        "wait_for": source,
    }
    out = run("model_rsync", args, env=env)
    assert not out.get("failed"), out
    assert out["changed"] is True and len(out["passes"]) == 1
    calls = log.read_text().splitlines()
    paths = {w.split("=", 1)[1] for line in calls for w in line.split() if w.startswith("ControlPath=")}
    (control,) = paths
    assert os.path.basename(os.path.dirname(control)).startswith("mlxc-relay-") and control.endswith("/cm")
    assert "-o ControlMaster=auto" in calls[0] and "-o ControlPersist=30" in calls[0]
    assert calls[-1] == f"-o ControlPath={control} -O exit 10.208.0.2"
    assert not os.path.exists(os.path.dirname(control))
    # a copy that is not a relay (no wait_for) is one pass: no master
    log.unlink()
    del args["wait_for"]
    (dest / "config.json").unlink()
    assert run("model_rsync", args, env=env)["changed"] is True
    assert "ControlPath" not in log.read_text()


def test_a_copy_that_comes_two_ways_each_sender_sends_its_share_and_leaves_the_other_alone(run, tree, tmp_path):
    """The tree's split: the source sends model.safetensors straight to the Mac while the relay,
    whose own copy still lacks it, passes on the rest (skip: the other sender's files). The
    relay waits only for its share; with delete, neither removes the other's files, done or in
    progress (the source's temporary name on the receiver)."""
    src, home, dest = tree
    source = manifest(run, src, sha256=False)["files"]
    relay = relay_still_receiving(src, tmp_path, b"partial")  # its weights never complete here
    dest.mkdir()
    (dest / ".model.safetensors.Qr34Cd").write_bytes(b"the direct copy, in progress")

    relayed = sync(
        run,
        relay,
        home,
        dest,
        wait_for=source,
        skip=["model.safetensors"],
        upstream_name="m1",
        host_label="m3",
        delete=True,
        stall_timeout=5,
    )
    assert not relayed.get("failed"), relayed
    assert sorted(relayed["transferred"]) == ["config.json", "sub/tokenizer.json"] and relayed["deleted"] == []
    assert [p["excluded"] for p in relayed["passes"]] == [0]  # nothing of its share was pending
    assert (dest / ".model.safetensors.Qr34Cd").exists()

    (dest / ".model.safetensors.Qr34Cd").unlink()
    direct = sync(run, src, home, dest, skip=["config.json", "sub/tokenizer.json"], host_label="m3", delete=True)
    assert not direct.get("failed"), direct
    assert direct["transferred"] == ["model.safetensors"] and direct["deleted"] == []
    assert manifest(run, dest, expected=source)["problems"] == []


def test_skip_leaves_a_file_out_of_a_plain_copy(run, tree):
    src, home, dest = tree
    out = sync(run, src, home, dest, skip=["model.safetensors"])
    assert sorted(out["transferred"]) == ["config.json", "sub/tokenizer.json"]
    assert not (dest / "model.safetensors").exists()
