"""library/model_rsync.py: main() with get_bin_path/run_command mocked; the argv it runs."""

from __future__ import annotations

import pytest

RSYNC = "/usr/bin/rsync"
SSH = "/usr/bin/ssh"
BINS = {"rsync": RSYNC, "ssh": SSH}
OFFLINE_C = {"LC_ALL": "C", "LANG": "C", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
HOME = "/Users/admin"
DEST = "/Users/admin/mlx-cluster/models/qwen"
BASE = [RSYNC, "--recursive", "--copy-links", "--perms", "--times", "--whole-file", "--out-format=%i %n%L"]
STALL = "--timeout=120"  # the module's default stall_timeout
OWN = ["--exclude=.mlx-cluster-*", "--exclude=.*.mlxpart"]  # the cables' own files never go by rsync
FIRST = "cd+++++++++ ./\n>f+++++++++ config.json\n>f+++++++++ model.safetensors\n"
GNU_VERSION = (0, "rsync  version 3.2.7  protocol version 31\n", "")
OPENRSYNC_VERSION = (0, "openrsync: protocol version 29\nrsync version 2.6.9 compatible\n", "")


@pytest.fixture
def src(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"w")
    return str(d)


def push(src, host="admin@10.208.0.2", **extra):
    args = {"src": src, "dest": DEST, "host": host, "dest_home": HOME, "source_name": "m1"}
    args.update(extra)
    return args


def remote_argv(src, *flags, rsh=f"{SSH} -o HostKeyAlias=m2 -o BatchMode=yes", host="admin@10.208.0.2"):
    return tuple(BASE + list(flags) + [STALL] + OWN + ["--rsh", rsh, src + "/", f"{host}:{DEST}/"])


SSH_ARGS = ["-o", "HostKeyAlias=m2", "-o", "BatchMode=yes"]


def test_push_over_ssh(module_runner, src):
    argv = remote_argv(src)
    out = module_runner("model_rsync", args=push(src, ssh_args=SSH_ARGS), bins=BINS, commands={argv: (0, FIRST, "")})
    assert not out.failed, out.result
    assert out.calls == [list(argv)]
    assert out.envs == [OFFLINE_C]
    r = out.result
    assert r["changed"] is True
    assert r["transferred"] == ["config.json", "model.safetensors"] and r["created"] == ["./"]
    assert r["rc"] == 0 and r["cmd"] == list(argv) and r["log_file"] is None


def test_nothing_to_do_is_not_changed(module_runner, src):
    argv = remote_argv(src)
    out = module_runner(
        "model_rsync", args=push(src, ssh_args=SSH_ARGS), bins=BINS, commands={argv: (0, ".d..t...... ./\n", "")}
    )
    assert out.result["changed"] is False and out.result["attrs_only"] == ["./"]


def test_check_mode_is_a_dry_run_that_still_measures(module_runner, src):
    argv = remote_argv(src, "--dry-run")
    out = module_runner(
        "model_rsync",
        args=dict(push(src, ssh_args=SSH_ARGS), _ansible_check_mode=True),
        bins=BINS,
        commands={argv: (0, FIRST, "")},
    )
    assert not out.failed, out.result
    assert out.calls == [list(argv)]
    assert out.result["changed"] is True and out.result["transferred"] == ["config.json", "model.safetensors"]


@pytest.mark.parametrize(
    "options, flags",
    [
        pytest.param({"delete": True}, ["--delete"], id="delete"),
        pytest.param({"checksum": True}, ["--checksum"], id="checksum"),
        pytest.param({"delete": True, "checksum": True}, ["--checksum", "--delete"], id="both"),
    ],
)
def test_options_add_their_flags(module_runner, src, options, flags):
    argv = remote_argv(src, *flags, rsh=SSH)
    out = module_runner(
        "model_rsync", args=push(src, **options), bins=BINS, commands={argv: (0, "*deleting   old.npz\n", "")}
    )
    assert out.calls == [list(argv)]
    assert out.result["changed"] is True and out.result["deleted"] == ["old.npz"]


def test_rsync_path_for_the_far_end(module_runner, src):
    argv = remote_argv(src, rsh=SSH)
    argv = argv[:-2] + ("--rsync-path=/opt/homebrew/bin/rsync",) + argv[-2:]
    out = module_runner(
        "model_rsync", args=push(src, rsync_path="/opt/homebrew/bin/rsync"), bins=BINS, commands={argv: (0, "", "")}
    )
    assert not out.failed, out.result
    assert out.calls == [list(argv)]


def test_local_copy_uses_no_ssh(module_runner, src, tmp_path):
    dest = str(tmp_path / "home" / "mlx-cluster" / "models" / "qwen")
    argv = tuple(BASE + [STALL] + OWN + [src + "/", dest + "/"])
    out = module_runner(
        "model_rsync",
        args={"src": src, "dest": dest},
        bins={"rsync": RSYNC, "ssh": None},
        commands={argv: (0, "", "")},
        env={"HOME": str(tmp_path / "home")},
    )
    assert not out.failed, out.result
    assert out.calls == [list(argv)] and out.result["changed"] is False


def test_log_file_with_gnu_rsync(module_runner, src, tmp_path):
    log = str(tmp_path / "logs" / "sync.log")
    argv = remote_argv(src, f"--log-file={log}", rsh=SSH)
    out = module_runner(
        "model_rsync",
        args=push(src, log_file=log),
        bins=BINS,
        commands={(RSYNC, "--version"): GNU_VERSION, argv: (0, FIRST, "")},
    )
    assert out.calls == [[RSYNC, "--version"], list(argv)]
    assert out.result["log_file"] == log
    assert (tmp_path / "logs").is_dir()


# openrsync's answers to `rsync --log-file=/dev/null --version` (main.c rsync_lopts; getopt_long of
# macOS's libc): macOS 15.x (rsync-146) has no --log-file, macOS 26 (rsync-170 and later) has.
PROBE = (RSYNC, "--log-file=/dev/null", "--version")
OPENRSYNC_15_PROBE = (1, "", "rsync: unrecognized option `--log-file=/dev/null'\nusage: rsync [-0468B...]\n")
OPENRSYNC_26_PROBE = OPENRSYNC_VERSION


def test_log_file_with_macos15_openrsync_warns_and_copies_without(module_runner, src, tmp_path):
    log = str(tmp_path / "sync.log")
    argv = remote_argv(src, rsh=SSH)
    out = module_runner(
        "model_rsync",
        args=push(src, log_file=log),
        bins=BINS,
        commands={(RSYNC, "--version"): OPENRSYNC_VERSION, PROBE: OPENRSYNC_15_PROBE, argv: (0, FIRST, "")},
    )
    assert not out.failed, out.result
    assert out.calls == [[RSYNC, "--version"], list(PROBE), list(argv)]
    assert out.result["log_file"] is None
    assert any("openrsync" in w and "progress file" in w for w in out.warnings)


def test_log_file_with_macos26_openrsync(module_runner, src, tmp_path):
    log = str(tmp_path / "logs" / "sync.log")
    argv = remote_argv(src, f"--log-file={log}", rsh=SSH)
    out = module_runner(
        "model_rsync",
        args=push(src, log_file=log),
        bins=BINS,
        commands={(RSYNC, "--version"): OPENRSYNC_VERSION, PROBE: OPENRSYNC_26_PROBE, argv: (0, FIRST, "")},
    )
    assert not out.failed, out.result
    assert out.calls == [[RSYNC, "--version"], list(PROBE), list(argv)]
    assert out.result["log_file"] == log and not out.warnings


def test_rerun_with_openrsync_as_sender_is_not_a_change(module_runner, src):
    """openrsync (issue #11's reading) lists unchanged files as `<f.......` when it sends."""
    argv = remote_argv(src, rsh=SSH)
    rerun = "<f....... config.json\n<f....... model.safetensors\n"
    out = module_runner("model_rsync", args=push(src), bins=BINS, commands={argv: (0, rerun, "")})
    assert not out.failed, out.result
    assert out.result["changed"] is False and out.result["transferred"] == []
    assert out.result["unchanged"] == ["config.json", "model.safetensors"]


def test_diff_mode_shows_the_itemized_changes(module_runner, src):
    argv = remote_argv(src, rsh=SSH)
    out = module_runner(
        "model_rsync", args=dict(push(src), _ansible_diff=True), bins=BINS, commands={argv: (0, FIRST, "")}
    )
    assert out.result["diff"] == {"prepared": FIRST}


@pytest.mark.parametrize(
    "rc, stderr, fragments",
    [
        pytest.param(
            255,
            "admin@10.208.0.2: Permission denied (publickey).\n",
            ["ssh from m1 to admin@10.208.0.2 (admin@10.208.0.2) failed", "refused the key"],
            id="keys",
        ),
        pytest.param(
            255, "Host key verification failed.\n", ["known_hosts", "ssh admin@10.208.0.2 true"], id="host-key"
        ),
        pytest.param(
            23,
            "rsync: some files could not be transferred\n",
            [f"rsync into admin@10.208.0.2:{DEST} failed with exit code 23"],
            id="partial",
        ),
    ],
)
def test_failure_names_host_dest_and_fix(module_runner, src, rc, stderr, fragments):
    argv = remote_argv(src, rsh=SSH)
    out = module_runner("model_rsync", args=push(src), bins=BINS, commands={argv: (rc, "", stderr)})
    assert out.failed
    for fragment in fragments:
        assert fragment in out.result["msg"]
    assert out.result["rc"] == rc and out.result["cmd"] == list(argv) and out.result["stderr"] == stderr


@pytest.mark.parametrize(
    "dest, home, fragment",
    [
        pytest.param("/", HOME, "whole disk", id="root"),
        pytest.param(HOME, HOME, "home directory itself", id="home"),
        pytest.param(f"{HOME}/models", HOME, "level below", id="one-below"),
        pytest.param("/Users/admin/x", "", "fewer than four", id="remote-home-unknown"),
        pytest.param(f"{HOME}/a b/c", HOME, "shell characters", id="space"),
    ],
)
def test_unsafe_destination_runs_nothing(module_runner, src, dest, home, fragment):
    out = module_runner("model_rsync", args=dict(push(src, delete=True), dest=dest, dest_home=home), bins=BINS)
    assert out.failed and out.calls == []
    assert "refusing to sync into admin@10.208.0.2:" in out.result["msg"] and fragment in out.result["msg"]


def test_missing_source_runs_nothing(module_runner, tmp_path):
    out = module_runner("model_rsync", args=push(str(tmp_path / "nope")), bins=BINS)
    assert out.failed and out.calls == []
    assert "does not exist on m1" in out.result["msg"] and "nothing is downloaded" in out.result["msg"]


def test_ssh_args_that_rsync_would_split_are_refused(module_runner, src):
    out = module_runner("model_rsync", args=push(src, ssh_args=["-o", "ProxyCommand=nc %h 22"]), bins=BINS)
    assert out.failed and out.calls == [] and "ssh_args" in out.result["msg"]


def test_a_relay_whose_socket_path_ssh_cannot_carry_copies_without_a_master(module_runner, src, tmp_path, monkeypatch):
    """A temporary directory with a space in its path cannot go into rsync's -e: the relay's
    passes then run over plain ssh, no master is ended, and the directory is removed at once."""
    import os
    import tempfile

    spaced = tmp_path / "with space"
    spaced.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spaced))
    st = os.stat(os.path.join(src, "model.safetensors"))
    wait_for = {"model.safetensors": {"size": st.st_size, "mtime": int(st.st_mtime)}}
    argv = remote_argv(src)
    out = module_runner(
        "model_rsync", args=push(src, ssh_args=SSH_ARGS, wait_for=wait_for), bins=BINS, commands={argv: (0, FIRST, "")}
    )
    assert not out.failed, out.result
    assert out.calls == [list(argv)]
    assert [p["excluded"] for p in out.result["passes"]] == [0] and out.result["passes"][0]["rc"] == 0
    assert list(spaced.iterdir()) == []


def test_rsync_missing_fails(module_runner, src):
    out = module_runner("model_rsync", args=push(src), bins={"rsync": None, "ssh": SSH})
    assert out.failed and out.calls == [] and "rsync" in out.result["msg"]


def test_toolkit_trust_failure_names_the_mac_and_points_at_the_stage(module_runner, src):
    argv = remote_argv(src, rsh=SSH)
    out = module_runner(
        "model_rsync",
        args=push(src, host_label="m2", ssh_trust="toolkit"),
        bins=BINS,
        commands={argv: (255, "", "Permission denied (publickey).\n")},
    )
    assert out.failed
    assert out.result["msg"].startswith("ssh from m1 to m2 (admin@10.208.0.2) failed")
    assert "refused the cluster key of m1" in out.result["msg"] and "run the stage again" in out.result["msg"]


# GNU rsync's output with --progress (see tests/fixtures/rsync_progress_gnu_3.5.txt)
PROGRESS_OUT = (
    "cd+++++++++ ./\n>f+++++++++ model.safetensors\n\r              1 100%    0.00kB/s    0:00:00\r"
    "              1 100%    0.00kB/s    0:00:00 (xfr#1, to-chk=0/2)\n"
)


def test_progress_file_kept_while_rsync_prints_its_progress(module_runner, src, tmp_path):
    import json

    progress = tmp_path / "progress.json"
    argv = remote_argv(src, "--progress", rsh=SSH)
    out = module_runner(
        "model_rsync",
        args=push(src, progress_file=str(progress), progress_interval=5),
        bins=BINS,
        commands={argv: (0, PROGRESS_OUT, "")},
    )
    assert not out.failed, out.result
    assert out.calls == [list(argv)]
    assert out.result["transferred"] == ["model.safetensors"] and out.result["created"] == ["./"]
    state = json.loads(progress.read_text())
    assert state["done"] is True and (state["bytes"], state["files"], state["total"]) == (1, 1, 1)
    # (ansible-core adds `invocation` before 2.21, and from 2.21 only when told: not ours)
    assert sorted(set(out.result) - {"invocation"}) == sorted(
        [
            "attrs_only",
            "changed",
            "cmd",
            "created",
            "deleted",
            "log_file",
            "passes",
            "rc",
            "transferred",
            "unchanged",
        ]
    )


def test_progress_file_not_in_check_mode(module_runner, src, tmp_path):
    progress = tmp_path / "progress.json"
    argv = remote_argv(src, "--dry-run", rsh=SSH)
    out = module_runner(
        "model_rsync",
        args=dict(push(src, progress_file=str(progress)), _ansible_check_mode=True),
        bins=BINS,
        commands={argv: (0, FIRST, "")},
    )
    assert out.calls == [list(argv)] and not progress.exists()


def test_a_progress_file_that_cannot_be_written_does_not_stop_the_copy(module_runner, src, tmp_path):
    progress = tmp_path / "no-such-dir" / "progress.json"
    argv = remote_argv(src, "--progress", rsh=SSH)
    out = module_runner(
        "model_rsync", args=push(src, progress_file=str(progress)), bins=BINS, commands={argv: (0, PROGRESS_OUT, "")}
    )
    assert not out.failed and out.result["changed"] is True
    assert any("cannot write the progress file" in w for w in out.warnings), out.warnings
