"""mlx_files' logic (module_utils/mlx_files.py): written when it differs, atomically, measured."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import FilesError, write_files


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_creates_parents_then_leaves_a_right_file_alone(tmp_path):
    path = tmp_path / "a" / "b" / "hostfile.json"
    res = write_files([{"path": str(path), "content": "x\n", "mode": "0600"}])
    assert res["changed"] and res["files"] == [{"path": str(path), "created": True, "mode": "0600", "changed": True}]
    assert path.read_text() == "x\n" and _mode(path) == 0o600 and _mode(tmp_path / "a") == 0o700
    again = write_files([{"path": str(path), "content": "x\n", "mode": "0600"}])
    assert not again["changed"] and not again["files"][0]["created"]


def test_mode_alone_differs(tmp_path):
    path = tmp_path / "f"
    path.write_text("x")
    path.chmod(0o644)
    res = write_files([{"path": str(path), "content": "x", "mode": "0600"}])
    assert res["changed"] and _mode(path) == 0o600


def test_check_mode_writes_nothing_and_diff_says_what(tmp_path):
    path = tmp_path / "f"
    path.write_text("old\n")
    path.chmod(0o600)
    res = write_files([{"path": str(path), "content": "new\n"}], check_mode=True, diff=True)
    assert res["changed"] and path.read_text() == "old\n"
    assert res["diff"] == [{"before_header": str(path), "after_header": str(path), "before": "old\n", "after": "new\n"}]
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize(
    "spec, words",
    [
        ({"path": "relative/f", "content": ""}, "must be absolute"),
        ({"path": "/tmp/x", "content": "", "mode": "rw"}, "octal string"),
    ],
    ids=["relative", "bad-mode"],
)
def test_bad_input_is_named(spec, words):
    with pytest.raises(FilesError, match=words):
        write_files([spec])


def test_a_directory_in_the_way_is_named(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(FilesError, match="not a regular file: move it away"):
        write_files([{"path": str(tmp_path / "d"), "content": ""}])


# ---- root writing a user's files: nothing the user can change leads root elsewhere ---------
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="root writes for a user only when run as root")
OTHER = 4242  # a uid that is neither root nor the owner given


def test_a_file_that_is_a_link_is_refused_and_its_target_left_alone(tmp_path):
    target = tmp_path / "precious"
    target.write_text("keep me")
    target.chmod(0o644)
    (tmp_path / "hostfile.json").symlink_to(target)
    with pytest.raises(FilesError, match="not a regular file: move it away"):
        write_files([{"path": str(tmp_path / "hostfile.json"), "content": "{}"}])
    assert target.read_text() == "keep me" and stat.S_IMODE(target.stat().st_mode) == 0o644


def test_a_new_mode_alone_is_written_by_a_rename_not_a_chmod(tmp_path):
    path = tmp_path / "f"
    path.write_text("same")
    path.chmod(0o644)
    os.link(path, tmp_path / "other-name")  # the same inode under a name the write is not about
    out = write_files([{"path": str(path), "content": "same", "mode": "0600"}])
    assert out["changed"] and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "other-name").stat().st_mode) == 0o644


@as_root
def test_root_does_not_write_through_a_link_another_user_owns(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.chmod(tmp_path, 0o755)
    (tmp_path / "cluster").symlink_to(elsewhere)
    os.lchown(tmp_path / "cluster", OTHER, OTHER)
    with pytest.raises(FilesError, match=r"cluster is a symbolic link owned by uid 4242, not root"):
        write_files([{"path": str(tmp_path / "cluster" / "hostfile.json"), "content": "{}"}], owner=(1000, 1000))
    assert list(elsewhere.iterdir()) == []


@as_root
def test_root_writes_only_in_directories_of_root_or_of_the_user_and_not_shared(tmp_path):
    os.chmod(tmp_path, 0o755)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, OTHER, OTHER)
    with pytest.raises(FilesError, match=r"theirs belongs to uid 4242, not to this user \(uid 1000\) or root"):
        write_files([{"path": str(theirs / "f"), "content": "x"}], owner=(1000, 1000))
    out = write_files([{"path": str(theirs / "f"), "content": "x"}], owner=(OTHER, OTHER))  # the user's own
    assert out["changed"] and (theirs / "f").stat().st_uid == OTHER
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # world-writable, not sticky: anyone could swap what is in it
    with pytest.raises(FilesError, match=r"shared is writable by group or others \(mode 0777\)"):
        write_files([{"path": str(shared / "f"), "content": "x"}], owner=(1000, 1000))
    shared.chmod(0o1777)  # root's and sticky, as /tmp and /Users/Shared: a directory of one's own below it is fine
    out = write_files([{"path": str(shared / "mine" / "f"), "content": "x"}], owner=(1000, 1000))
    assert out["changed"] and (shared / "mine").stat().st_uid == 1000
