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


@pytest.mark.parametrize("spec, words", [
    ({"path": "relative/f", "content": ""}, "must be absolute"),
    ({"path": "/tmp/x", "content": "", "mode": "rw"}, "octal string"),
], ids=["relative", "bad-mode"])
def test_bad_input_is_named(spec, words):
    with pytest.raises(FilesError, match=words):
        write_files([spec])


def test_a_directory_in_the_way_is_named(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(FilesError, match="not a regular file: move it away"):
        write_files([{"path": str(tmp_path / "d"), "content": ""}])
