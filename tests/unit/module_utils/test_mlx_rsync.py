"""plugins/module_utils/mlx_rsync.py: itemized output, argv, destination safety, manifests."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rsync import (
    OUT_FORMAT,
    PROGRESS_OPTION,
    CopyProgress,
    check_dest,
    compare_manifests,
    explain_failure,
    is_weight_file,
    parse_itemized,
    parse_rsync_version,
    remote_spec,
    rsync_argv,
    ssh_command,
    without_progress,
)
from tests.budget import examples
from tests.unit.conftest import FIXTURES

# Captured from GNU rsync 3.5.0 (`--out-format=%i %n%L`), the runs of tests/unit/modules/
# test_model_rsync_local.py; the openrsync lines follow Apple's openrsync log.c (tag rsync-182,
# printf_doformat case 'i': 9-character item strings, `<` on the sender and `>` on the receiver,
# `c` for a local change such as a new directory, all-dot flags blanked for `.` items) and
# sender.c file_deleted (`*deleting name`, one space).
GNU_FIRST = """\
created directory /tmp/m2/models/qwen
cd+++++++++ ./
>f+++++++++ config.json
>f+++++++++ model-00001-of-00002.safetensors
>f+++++++++ model-00002-of-00002.safetensors
cd+++++++++ sub/
>f+++++++++ sub/tokenizer.json
"""
GNU_UPDATE = """\
*deleting   old.npz
>f..t...... config.json
.f...p..... sub/a.bin
.d..t...... sub/
"""
GNU_CHECKSUM_DRY = ">fc........ model.safetensors\n"
GNU_ATTRS = ".f..t...... model.safetensors\n.d..t...... ./\n.f...p..... tokenizer.json\n.f....og... x.bin\n"
OPENRSYNC_FIRST = "cd+++++++ ./\n>f+++++++ config.json\n>f+++++++ model.safetensors\ncd+++++++ sub/\n"
OPENRSYNC_DIRS = "cd....... ./\ncd..t.... sub/\n"
# A re-run pushed by openrsync as issue #11 reads it: every unchanged file as `<f.......`; the
# --check run after one file changed (size and time), and a new one added.
OPENRSYNC_SENDER_RERUN = "<f....... config.json\n<f....... model.safetensors\n<f....... sub/tokenizer.json\n"
OPENRSYNC_SENDER_CHECK = (
    "<f....... config.json\n<f.st.... model.safetensors\n<f+++++++ new.json\n"
    "<f....... sub/tokenizer.json\n.d..t.... ./\n*deleting old.npz\n"
)
# GNU rsync pushing with -ii: unchanged items with blank flags (not items of the regex).
GNU_SENDER_II = ".d          ./\n.f          config.json\n<f..t...... model.safetensors\n"
OPENRSYNC_BLANK = ".d        ./\n.f        config.json\n"
LINKS = (
    "cL+++++++++ link.safetensors -> model.safetensors\nhf+++++++++ b.bin => a.bin\n"
    "cL......... relink -> elsewhere\n.L..t...... same-link -> target\n"
)


def items(**kw):
    out = {"transferred": [], "created": [], "deleted": [], "attrs_only": [], "unchanged": []}
    out.update(kw)
    out["changed"] = bool(out["transferred"] or out["created"] or out["deleted"])
    return out


@pytest.mark.parametrize(
    "text, expected",
    [
        pytest.param(
            GNU_FIRST,
            items(
                created=["./", "sub/"],
                transferred=[
                    "config.json",
                    "model-00001-of-00002.safetensors",
                    "model-00002-of-00002.safetensors",
                    "sub/tokenizer.json",
                ],
            ),
            id="gnu-first-copy",
        ),
        pytest.param("", items(), id="gnu-nothing-to-do"),
        pytest.param(
            GNU_UPDATE,
            items(deleted=["old.npz"], transferred=["config.json"], attrs_only=["sub/a.bin", "sub/"]),
            id="gnu-delete-and-update",
        ),
        pytest.param(GNU_CHECKSUM_DRY, items(transferred=["model.safetensors"]), id="gnu-checksum-dry-run"),
        pytest.param(
            GNU_ATTRS,
            items(attrs_only=["model.safetensors", "./", "tokenizer.json", "x.bin"]),
            id="gnu-attributes-only",
        ),
        pytest.param(
            OPENRSYNC_FIRST,
            items(created=["./", "sub/"], transferred=["config.json", "model.safetensors"]),
            id="openrsync-first",
        ),
        pytest.param(OPENRSYNC_DIRS, items(attrs_only=["sub/"]), id="openrsync-unchanged-directories"),
        pytest.param(
            "<f+++++++++ model.safetensors\n<f.st...... config.json\n",
            items(transferred=["model.safetensors", "config.json"]),
            id="gnu-push-sender-side",
        ),
        pytest.param(
            OPENRSYNC_SENDER_RERUN,
            items(unchanged=["config.json", "model.safetensors", "sub/tokenizer.json"]),
            id="openrsync-sender-rerun",
        ),
        pytest.param(
            OPENRSYNC_SENDER_CHECK,
            items(
                transferred=["model.safetensors", "new.json"],
                deleted=["old.npz"],
                attrs_only=["./"],
                unchanged=["config.json", "sub/tokenizer.json"],
            ),
            id="openrsync-sender-check",
        ),
        pytest.param(">f....... config.json\n", items(unchanged=["config.json"]), id="openrsync-receiver-no-reason"),
        pytest.param(GNU_SENDER_II, items(transferred=["model.safetensors"]), id="gnu-sender-ii"),
        pytest.param(OPENRSYNC_BLANK, items(), id="openrsync-blank-flags"),
        pytest.param(
            LINKS, items(created=["link.safetensors", "b.bin", "relink"], attrs_only=["same-link"]), id="links"
        ),
        pytest.param(
            ">f+++++++++ my model.safetensors\r\n*deleting   old dir/\r\n",
            items(transferred=["my model.safetensors"], deleted=["old dir/"]),
            id="spaces-and-crlf",
        ),
        pytest.param(
            ".Lc........ changed-link -> new\n.D.s....... dev\n",
            items(transferred=["changed-link", "dev"]),
            id="in-place-content-change",
        ),
        pytest.param(
            "sending incremental file list\nsent 1,234 bytes  received 35 bytes\n"
            "total size is 9  speedup is 0.01 (DRY RUN)\nrsync: warning: some files vanished\n",
            items(),
            id="non-item-lines-ignored",
        ),
    ],
)
def test_parse_itemized(text, expected):
    assert parse_itemized(text) == expected


def test_parse_itemized_takes_bytes():
    assert parse_itemized(b">f+++++++++ caf\xc3\xa9.bin\n")["transferred"] == ["caf\u00e9.bin"]


def test_the_brief_examples():
    assert parse_itemized(">f+++++++++ model.safetensors")["changed"] is True
    assert parse_itemized("cd+++++++++ sub/")["created"] == ["sub/"]
    assert parse_itemized(".f..t...... x")["changed"] is False
    assert parse_itemized("*deleting   x")["deleted"] == ["x"]


_NAME = (
    st.text(
        alphabet=st.characters(whitelist_categories=("L", "N"), whitelist_characters="._- /"), min_size=1, max_size=20
    )
    .map(str.strip)
    .filter(lambda s: s and " -> " not in s and " => " not in s)
)
_ATTR = st.sampled_from(["..t......", "...p.....", "....og...", "..T......"])
_ENTRY = st.one_of(
    st.tuples(
        st.just("transferred"),
        st.sampled_from([">f+++++++++", "<f+++++++++", ">f.st......", ">fc........", ">f+++++++", ">f..t......"]),
        _NAME,
    ),
    st.tuples(st.just("created"), st.sampled_from(["cd+++++++++", "cd+++++++", "cL+++++++++"]), _NAME),
    st.tuples(st.just("deleted"), st.just("*deleting  "), _NAME),
    st.tuples(st.just("attrs_only"), _ATTR.map(lambda a: ".f" + a), _NAME),
    st.tuples(st.just("unchanged"), st.sampled_from(["<f.......", ">f.......", "<f........."]), _NAME),
    st.tuples(st.just("none"), st.just("cd......."), _NAME),
)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(_ENTRY, max_size=30))
def test_parse_itemized_invariants(entries):
    text = "".join(f"{item} {name}\n" for _, item, name in entries)
    got = parse_itemized(text)
    for key in ("transferred", "created", "deleted", "attrs_only", "unchanged"):
        assert got[key] == [name for kind, _, name in entries if kind == key]
    assert got["changed"] == any(kind in ("transferred", "created", "deleted") for kind, _, _ in entries)


@settings(max_examples=examples(200), deadline=None)
@given(st.text(max_size=400))
def test_parse_itemized_never_raises(text):
    got = parse_itemized(text)
    assert got["changed"] == bool(got["transferred"] or got["created"] or got["deleted"])


# --- argv -----------------------------------------------------------------------------------

BASE = [
    "/usr/bin/rsync",
    "--recursive",
    "--copy-links",
    "--perms",
    "--times",
    "--whole-file",
    f"--out-format={OUT_FORMAT}",
]


# the own transport's record and part files are never copied (nor deleted by --delete)
OWN = ["--exclude=.mlx-cluster-*", "--exclude=.*.mlxpart"]


@pytest.mark.parametrize(
    "kwargs, options, after",
    [
        pytest.param({}, [], [], id="local"),
        pytest.param({"dry_run": True}, ["--dry-run"], [], id="dry-run"),
        pytest.param({"delete": True, "checksum": True}, ["--checksum", "--delete"], [], id="delete-checksum"),
        pytest.param({"log_file": "/tmp/sync.log"}, ["--log-file=/tmp/sync.log"], [], id="log-file"),
        pytest.param(
            {"ssh_command": "/usr/bin/ssh -o BatchMode=yes"}, [], ["--rsh", "/usr/bin/ssh -o BatchMode=yes"], id="ssh"
        ),
        pytest.param(
            {"rsync_path": "/opt/homebrew/bin/rsync"}, [], ["--rsync-path=/opt/homebrew/bin/rsync"], id="rsync-path"
        ),
    ],
)
def test_rsync_argv(kwargs, options, after):
    assert rsync_argv("/usr/bin/rsync", "/src", "/dest", **kwargs) == BASE + options + OWN + after + ["/src/", "/dest/"]


def test_rsync_argv_remote_and_trailing_slashes():
    argv = rsync_argv(
        "/usr/bin/rsync",
        "/src/",
        remote_spec("admin@10.208.0.2", "/Users/admin/m/x"),
        ssh_command=ssh_command("/usr/bin/ssh", ["-o", "HostKeyAlias=m2", "-o", "BatchMode=yes"]),
    )
    assert argv[-4:] == [
        "--rsh",
        "/usr/bin/ssh -o HostKeyAlias=m2 -o BatchMode=yes",
        "/src/",
        "admin@10.208.0.2:/Users/admin/m/x/",
    ]
    assert "--delete" not in argv and "--dry-run" not in argv


def test_remote_spec():
    assert remote_spec("", "/a/b") == "/a/b"
    assert remote_spec("m2", "/a/b") == "m2:/a/b"


@pytest.mark.parametrize("word", ["-o Host Key", "'quoted'", 'a"b', "back\\slash", "tab\there", "last-newline\n", ""])
def test_ssh_command_refuses_words_rsync_would_split(word):
    with pytest.raises(ValueError, match="separate plain words"):
        ssh_command("/usr/bin/ssh", ["-F", word])


def test_ssh_command_joins_plain_words():
    assert (
        ssh_command("/usr/bin/ssh", ["-F", "/tmp/sim/ssh_config", "-p", "2222"])
        == "/usr/bin/ssh -F /tmp/sim/ssh_config -p 2222"
    )


# --- destination safety ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, home, fragment",
    [
        pytest.param("/", "/Users/admin", "whole disk", id="root"),
        pytest.param("//", "/Users/admin", "whole disk", id="root-slashes"),
        pytest.param("/Users/admin", "/Users/admin", "home directory itself", id="home"),
        pytest.param("/Users/admin/", "/Users/admin", "home directory itself", id="home-slash"),
        pytest.param("/Users", "/Users/admin", "above the home", id="above-home"),
        pytest.param("/Users/admin/models", "/Users/admin", "only 1 level below", id="one-below-home"),
        pytest.param("/Users/admin/mlx/../x/y", "/Users/admin", "'..'", id="dotdot"),
        pytest.param("relative/models/x", "/Users/admin", "not an absolute", id="relative"),
        pytest.param("/Users/admin/my models/x", "/Users/admin", "shell characters", id="space"),
        pytest.param("/Users/admin/m/$(reboot)", "/Users/admin", "shell characters", id="shell"),
        pytest.param("/Users/admin/mlx/models/x\n", "/Users/admin", "shell characters", id="last-newline"),
        pytest.param("~/mlx/models/x", "/Users/admin", "not an absolute", id="tilde"),
        pytest.param("/tmp", "/Users/admin", "top-level", id="top-level"),
        pytest.param("/Users/admin/x", None, "fewer than four", id="home-unknown-short"),
        pytest.param("", "/Users/admin", "empty", id="empty"),
    ],
)
def test_check_dest_refuses(path, home, fragment):
    problem = check_dest(path, home)
    assert problem is not None and fragment in problem


@pytest.mark.parametrize(
    "path, home",
    [
        pytest.param("/Users/admin/mlx-cluster/models/Qwen3-4B", "/Users/admin", id="default-layout"),
        pytest.param("/Users/admin/models/Qwen3-4B/", "/Users/admin/", id="two-below-home"),
        pytest.param("/Volumes/Models/Qwen3-4B", "/Users/admin", id="outside-home"),
        pytest.param("/Users/admin/mlx-cluster/models/x", None, id="home-unknown-long"),
        pytest.param("/srv/admin/mlx-cluster/models/tiny", "/srv/admin", id="simulated-mac"),
    ],
)
def test_check_dest_accepts(path, home):
    assert check_dest(path, home) is None


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.sampled_from(["Users", "admin", "models", "x", "..", "."]), max_size=6))
def test_check_dest_never_accepts_home_or_above(parts):
    path = "/" + "/".join(parts)
    if check_dest(path, "/Users/admin") is None:
        assert ".." not in parts and "." not in parts
        home = ["Users", "admin"]
        assert home[: len(parts)] != parts  # neither home nor a directory above it
        if parts[:2] == home:
            assert len(parts) >= 4  # at least two levels below home
        assert len(parts) >= 2


# --- manifests ------------------------------------------------------------------------------

SOURCE = {
    "config.json": {"size": 10},
    "model.safetensors": {"size": 1000, "sha256": "a" * 64},
    "sub/tokenizer.json": {"size": 20},
}


def test_compare_identical_is_clean():
    assert compare_manifests(SOURCE, {"m1": dict(SOURCE), "m2": dict(SOURCE)}) == []


def test_compare_names_host_file_expected_and_got():
    m2 = dict(SOURCE, **{"model.safetensors": {"size": 999, "sha256": "a" * 64}})
    m3 = dict(SOURCE, **{"model.safetensors": {"size": 1000, "sha256": "b" * 64}})
    m4 = {k: v for k, v in SOURCE.items() if k != "config.json"}
    m4["old.npz"] = {"size": 5}
    m4["notes.txt"] = {"size": 1}
    problems = compare_manifests(SOURCE, {"m4": m4, "m3": m3, "m2": m2, "m1": SOURCE})
    assert [(p["host"], p["file"], p["kind"], p["expected"], p["got"]) for p in problems] == [
        ("m2", "model.safetensors", "size", 1000, 999),
        ("m3", "model.safetensors", "sha256", "a" * 64, "b" * 64),
        ("m4", "config.json", "missing", 10, None),
        ("m4", "old.npz", "extra_weight", None, 5),
    ]
    for p in problems:
        assert p["msg"].startswith(f"{p['host']}: ") and (p["file"] in p["msg"])
    assert "999 bytes, expected 1000" in problems[0]["msg"]


def test_compare_missing_directory_is_one_problem():
    [problem] = compare_manifests(SOURCE, {"m2": None})
    assert (problem["host"], problem["kind"], problem["file"]) == ("m2", "missing_dir", "*")
    assert "none of the model's 3 files" in problem["msg"]


def test_compare_sha256_only_where_both_have_one():
    no_sha = {k: {"size": v["size"]} for k, v in SOURCE.items()}
    assert compare_manifests(SOURCE, {"m2": no_sha}) == []
    assert compare_manifests(no_sha, {"m2": SOURCE}) == []


_MANIFEST = st.dictionaries(
    st.from_regex(r"[a-z]{1,8}(/[a-z]{1,8})?\.(json|safetensors|bin|txt)", fullmatch=True),
    st.fixed_dictionaries({"size": st.integers(0, 10**12), "sha256": st.from_regex(r"[0-9a-f]{64}", fullmatch=True)}),
    min_size=1,
    max_size=8,
)


@settings(max_examples=examples(100), deadline=None)
@given(_MANIFEST, st.data())
def test_compare_finds_exactly_the_changed_file(source, data):
    rel = data.draw(st.sampled_from(sorted(source)))
    host = data.draw(st.sampled_from(["m1", "m2", "studio-3"]))
    bad = dict(source, **{rel: {"size": source[rel]["size"] + 1, "sha256": source[rel]["sha256"]}})
    problems = compare_manifests(source, {host: bad, "ok": dict(source)})
    assert [(p["host"], p["file"], p["kind"]) for p in problems] == [(host, rel, "size")]
    assert compare_manifests(source, {host: dict(source)}) == []


@pytest.mark.parametrize(
    "rel, weight",
    [
        ("model.safetensors", True),
        ("x/model-00001-of-00004.SAFETENSORS", True),
        ("m.gguf", True),
        ("w.npz", True),
        ("pytorch_model.bin", True),
        ("config.json", False),
        ("tokenizer.model", False),
        ("model.safetensors.index.json", False),
    ],
)
def test_is_weight_file(rel, weight):
    assert is_weight_file(rel) is weight


# --- failures and versions ------------------------------------------------------------------


@pytest.mark.parametrize(
    "rc, stderr, fragments",
    [
        pytest.param(
            255,
            "admin@10.208.0.2: Permission denied (publickey,password,keyboard-interactive).\n"
            "rsync: connection unexpectedly closed (0 bytes received so far) [sender]\n",
            ["ssh from m1 to admin@10.208.0.2 (admin@10.208.0.2) failed", "refused the key", "authorized_keys"],
            id="no-key",
        ),
        pytest.param(
            255,
            "Host key verification failed.\nrsync: connection unexpectedly closed\n",
            ["ssh from m1 to admin@10.208.0.2 (admin@10.208.0.2) failed", "known_hosts"],
            id="host-key",
        ),
        pytest.param(
            255,
            "ssh: connect to host 10.208.0.2 port 22: Connection refused\n",
            ["ssh from m1 to admin@10.208.0.2 (admin@10.208.0.2) failed", "Remote Login"],
            id="refused",
        ),
        pytest.param(
            12,
            "sh: rsync: command not found\nrsync: connection unexpectedly closed\n",
            ["rsync is not installed on admin@10.208.0.2"],
            id="no-remote-rsync",
        ),
        pytest.param(
            255,
            "kex_exchange_identification: read: Connection reset by peer\n",
            ["ssh from m1 to admin@10.208.0.2 (admin@10.208.0.2) failed", "does not answer"],
            id="other-255",
        ),
        pytest.param(
            1,
            "rsync: on remote machine: --log-format=%i: unknown option\n",
            ["does not understand an option", "model_sync_rsync_path"],
            id="openrsync-server-option",
        ),
        pytest.param(
            2,
            "protocol version mismatch -- is your shell clean?\n(see the rsync manpage for an explanation)\n"
            "rsync error: protocol incompatibility (code 2) at compat.c(626) [sender=3.2.7]\n",
            [
                "the login shell on admin@10.208.0.2 prints text for a command run over ssh",
                "~/.zshenv",
                "`ssh admin@10.208.0.2 true` run on m1 must print nothing",
            ],
            id="shell-not-clean",
        ),
        pytest.param(
            # openrsync, the client, on "Welcome to m1\n": "Welc" the version, "ome " the seed,
            # "to m" a header of tag 'm'-7 = 102 with a length past its buffer (io.c)
            1,
            "rsync(4242): error: multiplex buffer overflow (tag 102 0x6d206f74, len 2125684)\n",
            [
                "what came back from admin@10.208.0.2 was not rsync's protocol",
                "most often the login shell on admin@10.208.0.2 prints text",
                "~/.zshenv",
                "model_sync_rsync_path",
            ],
            id="shell-not-clean-openrsync-overflow",
        ),
        pytest.param(
            1,
            "rsync(4242): error: unexpected tag 25 (0x203a6e69), len 3829353\n",
            ["was not rsync's protocol", "`ssh admin@10.208.0.2 true` run on m1 must print nothing"],
            id="shell-not-clean-openrsync-tag",
        ),
        pytest.param(
            2,
            "rsync(4242): error: remote protocol -2139062143 is older than our minimum supported 27: exiting\n",
            ["was not rsync's protocol"],
            id="shell-not-clean-openrsync-negative-version",
        ),
        pytest.param(
            11,
            'rsync: write failed on "/x/model.safetensors": No space left on device (28)\n',
            ["the disk is full", "admin@10.208.0.2:/Users/admin/m/x"],
            id="disk-full",
        ),
        pytest.param(
            23,
            "rsync: some error\n",
            ["rsync into admin@10.208.0.2:/Users/admin/m/x failed with exit code 23", "some error"],
            id="other",
        ),
    ],
)
def test_explain_failure(rc, stderr, fragments):
    msg = explain_failure(rc, stderr, "admin@10.208.0.2", "/Users/admin/m/x", "m1")
    for fragment in fragments:
        assert fragment in msg


def test_explain_failure_local():
    assert explain_failure(11, "", "", "/d/x/y", "m1") == "rsync into /d/x/y failed with exit code 11: exit code 11"


@pytest.mark.parametrize(
    "text, expected",
    [
        pytest.param(
            "rsync  version 3.5.0  protocol version 32\nCopyright (C) 1996-2026\n",
            {"flavour": "rsync", "version": "3.5.0", "log_file": True},
            id="gnu-3.5",
        ),
        pytest.param(
            "rsync  version v3.2.7  protocol version 31\n",
            {"flavour": "rsync", "version": "3.2.7", "log_file": True},
            id="gnu-3.2.7",
        ),
        pytest.param(
            "rsync  version 2.6.9  protocol version 29\n",
            {"flavour": "rsync", "version": "2.6.9", "log_file": False},
            id="apple-2.6.9",
        ),
        pytest.param(
            "openrsync: protocol version 29\nrsync version 2.6.9 compatible\n",
            {"flavour": "openrsync", "version": "2.6.9", "log_file": None},
            id="openrsync",
        ),
        pytest.param("", {"flavour": "unknown", "version": None, "log_file": False}, id="empty"),
    ],
)
def test_parse_rsync_version(text, expected):
    assert parse_rsync_version(text) == expected


# --progress, as GNU rsync 3.5.0 printed it copying a 3-byte config.json, a 30 MB
# model.safetensors and a 5000-byte sub/tok.bin (captured: tests/fixtures/rsync_progress_gnu_3.5.txt,
# updates ended by "\r", each file's last by "(xfr#N, to-chk=...)\n"); and as openrsync prints it,
# built from Apple's client.c rsync_progress (tags rsync-146 and rsync-182 alike: " %14llu",
# " %3.0f%%", " %7.2fMB/s" (nothing below 1 KB/s), "   %02d:%02d:%02d", "\r" or
# " (xfer#%zu, to-check=%zu/%zu)\n"), the item line after the file (sender.c, BLKSTAT_DONE).
GNU_PROGRESS_BYTES = 3 + 30_000_000 + 5000
OPENRSYNC_PROGRESS = (
    "cd+++++++ ./\n"
    "              3 100%   00:00:00 (xfer#1, to-check=1/4)\n"
    "<f+++++++ config.json\n"
    "        4194304  14%   19.53MB/s   00:00:01\r"
    "       22085632  74%   17.06MB/s   00:00:00\r"
    "       30000000 100%   19.91MB/s   00:00:01 (xfer#2, to-check=2/4)\n"
    "<f+++++++ model.safetensors\n"
)


def gnu_progress_capture():
    """The capture as rsync wrote it: its carriage returns kept (no newline translation)."""
    return (FIXTURES / "rsync_progress_gnu_3.5.txt").read_bytes().decode()


def test_copy_progress_reads_gnu_rsync_in_any_pieces():
    text = gnu_progress_capture()
    assert "\r" in text and "(xfr#3, to-chk=0/5)" in text
    for size in (1, 7, 64, len(text)):
        p = CopyProgress(total=GNU_PROGRESS_BYTES)
        for i in range(0, len(text), size):
            p.feed(text[i : i + size], i / 1000)
        state = p.state(len(text) / 1000)
        assert (state["bytes"], state["files"], state["total"]) == (GNU_PROGRESS_BYTES, 3, GNU_PROGRESS_BYTES), size


def test_copy_progress_counts_the_file_being_sent_once():
    p = CopyProgress()
    assert p.feed("sending incremental file list\n>f+++++++++ a.bin\n", 0.0) is False
    assert p.feed("\r      1,048,576  10%  1.00MB/s    0:00:09\r", 1.0) is True
    assert p.feed("      2,097,", 2.0) is False  # the rest of the update has not arrived
    assert p.feed("152  20%  1.00MB/s    0:00:08\r", 2.0) is True
    assert (p.bytes, p.files) == (2_097_152, 0)
    p.feed("     10,485,760 100%  1.00MB/s    0:00:10 (xfr#1, to-chk=0/2)\n", 10.0)
    assert (p.bytes, p.files) == (10_485_760, 1)
    assert p.feed("cd+++++++++ sub/\n", 11.0) is False


def test_copy_progress_reads_openrsync():
    p = CopyProgress(total=30_000_003)
    p.feed(OPENRSYNC_PROGRESS[:120], 0.0)
    p.feed(OPENRSYNC_PROGRESS[120:], 1.0)
    assert (p.bytes, p.files) == (30_000_003, 2)
    assert parse_itemized(OPENRSYNC_PROGRESS)["transferred"] == ["config.json", "model.safetensors"]


def test_copy_progress_rate_follows_the_last_seconds():
    p = CopyProgress()
    assert p.state(0.0)["rate"] is None
    p.feed("x\n", 0.0)
    for t in range(1, 11):  # 1 MB a second for 10 s
        p.feed(f"\r {t * 1_000_000} {t * 10}%\r", float(t))
    assert p.rate(10.0) == pytest.approx(1_000_000, rel=0.01)
    # nothing for 5 s: the rate falls (over the window), it does not stay at the last value
    assert p.rate(15.0) < 600_000
    state = p.state(15.0, done=True)
    assert state["done"] is True and state["elapsed"] == 15.0 and state["bytes"] == 10_000_000


def test_nothing_to_copy_shows_no_bytes():
    p = CopyProgress(total=100)
    p.feed("sending incremental file list\n.d..t...... ./\n", 0.0)
    assert p.state(1.0) == {"bytes": 0, "files": 0, "total": 100, "rate": None, "elapsed": 1.0, "done": False}


def test_itemized_output_is_read_alike_with_progress():
    text = gnu_progress_capture()
    items = parse_itemized(text)
    assert items["transferred"] == ["config.json", "model.safetensors", "sub/tok.bin"]
    assert items["created"] == ["sub/"] and items["attrs_only"] == ["./"]
    assert without_progress(text) == (
        "sending incremental file list\n.d..t...... ./\n>f+++++++++ config.json\n"
        ">f+++++++++ model.safetensors\ncd+++++++++ sub/\n>f+++++++++ sub/tok.bin\n"
    )


def test_progress_option_in_the_argv():
    argv = rsync_argv("rsync", "/a", "m2:/b", progress=True)
    assert argv[argv.index("--out-format=%i %n%L") + 1] == PROGRESS_OPTION == "--progress"
    assert PROGRESS_OPTION not in rsync_argv("rsync", "/a", "m2:/b")


@given(
    pieces=st.lists(st.text(alphabet=st.sampled_from(list("0123456789,. %\r\nxfer#()abc")), max_size=40), max_size=30)
)
@settings(max_examples=examples(200))
def test_copy_progress_takes_any_output(pieces):
    p = CopyProgress(total=10)
    for i, piece in enumerate(pieces):
        p.feed(piece, float(i))
    state = p.state(float(len(pieces)))
    assert state["bytes"] >= 0 and state["files"] >= 0 and (state["rate"] is None or state["rate"] >= 0)


def test_copy_progress_never_goes_back():
    p = CopyProgress()
    p.feed("\r      900,000  90%\r", 1.0)
    p.feed("\r      100,000  10%\r", 2.0)  # the next file, the first one's last update missing
    assert p.bytes == 1_000_000
    assert p.rate(2.0) > 0


def test_stall_timeout_is_rsyncs_io_timeout():
    assert rsync_argv("rsync", "/a", "m2:/b", stall_timeout=90)[-5:-2] == ["--timeout=90"] + OWN
    assert not any(a.startswith("--timeout") for a in rsync_argv("rsync", "/a", "m2:/b", stall_timeout=0))
    assert not any(a.startswith("--timeout") for a in rsync_argv("rsync", "/a", "m2:/b"))


GNU_STALL = (
    "[sender] io timeout after 120 seconds -- exiting\n"
    "rsync error: timeout in data send/receive (code 30) at io.c(248) [sender=3.5.0]\n"
)


def test_a_stalled_copy_names_both_ends_and_says_it_resumes():
    msg = explain_failure(30, GNU_STALL, "admin@10.208.0.2", "/Users/admin/m", "m1", name="m2", stall_timeout=120)
    assert msg.startswith("rsync into admin@10.208.0.2:/Users/admin/m from m1 stalled: no data moved for 120 s")
    assert "between m1 and m2" in msg and "resumes" in msg and "model_sync_stall_timeout" in msg
    # without a stall bound the same exit code is not called a stall
    assert "stalled" not in explain_failure(30, GNU_STALL, "admin@10.208.0.2", "/Users/admin/m", "m1")
