"""library/model_manifest.py: main() on temporary directories (it runs no command at all)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_copy import HASHES


def make_model(root, files=None):
    files = files or {
        "config.json": b"{}",
        "model.safetensors": b"weights-1",
        "sub/tokenizer.json": b"tok",
        "sub/w.npz": b"npz",
        "adapter.bin": b"bin",
        "m.gguf": b"gguf",
    }
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (MTIME + 0.75, MTIME + 0.75))
    return root


MTIME = 1764130000  # every file's time (plus a fraction, which the manifest drops)


def without_mtime(files):
    """The manifest's files without their times (the tests that look at sizes and hashes)."""
    return {rel: {k: v for k, v in e.items() if k != "mtime"} for rel, e in files.items()}


def sha(data):
    return hashlib.sha256(data).hexdigest()


def test_sizes_only_by_default(module_runner, tmp_path):
    root = make_model(tmp_path / "m")
    out = module_runner("model_manifest", args={"path": str(root)})
    assert not out.failed, out.result
    assert out.calls == []  # read-only, no command
    r = out.result
    assert r["changed"] is False and r["exists"] is True and r["problems"] == []
    assert {e["mtime"] for e in r["files"].values()} == {MTIME}  # whole seconds, what wait_for compares
    assert without_mtime(r["files"]) == {
        "adapter.bin": {"size": 3},
        "config.json": {"size": 2},
        "m.gguf": {"size": 4},
        "model.safetensors": {"size": 9},
        "sub/tokenizer.json": {"size": 3},
        "sub/w.npz": {"size": 3},
    }
    assert r["total_bytes"] == 24


def test_sha256_for_weight_files_only(module_runner, tmp_path):
    root = make_model(tmp_path / "m")
    files = module_runner("model_manifest", args={"path": str(root), "sha256": True}).result["files"]
    assert files["model.safetensors"]["sha256"] == sha(b"weights-1")
    assert files["sub/w.npz"]["sha256"] == sha(b"npz")
    assert files["adapter.bin"]["sha256"] == sha(b"bin") and files["m.gguf"]["sha256"] == sha(b"gguf")
    assert "sha256" not in files["config.json"] and "sha256" not in files["sub/tokenizer.json"]


def test_missing_directory_is_not_a_failure(module_runner, tmp_path):
    out = module_runner("model_manifest", args={"path": str(tmp_path / "absent")})
    assert not out.failed
    assert out.result["exists"] is False and out.result["files"] == {} and out.result["total_bytes"] == 0


def test_a_file_in_the_way_fails(module_runner, tmp_path):
    (tmp_path / "f").write_text("x")
    out = module_runner("model_manifest", args={"path": str(tmp_path / "f"), "label": "m2"})
    assert out.failed and "on m2 is not a directory" in out.result["msg"]


def test_check_mode_reads_all_the_same(module_runner, tmp_path):
    root = make_model(tmp_path / "m")
    out = module_runner("model_manifest", args={"path": str(root), "sha256": True, "_ansible_check_mode": True})
    assert not out.failed and out.result["files"]["model.safetensors"]["sha256"] == sha(b"weights-1")


def test_links_are_followed_as_the_copy_follows_them(module_runner, tmp_path):
    blobs = make_model(tmp_path / "blobs", {"abc": b"weights"})
    snap = tmp_path / "snapshot"
    snap.mkdir()
    os.symlink(blobs / "abc", snap / "model.safetensors")
    os.symlink(tmp_path / "nowhere", snap / "broken.json")
    out = module_runner("model_manifest", args={"path": str(snap), "sha256": True})
    assert without_mtime(out.result["files"]) == {"model.safetensors": {"size": 7, "sha256": sha(b"weights")}}
    assert any("broken.json" in w for w in out.warnings)


def test_a_link_loop_is_walked_once(module_runner, tmp_path):
    root = make_model(tmp_path / "m", {"a/x.json": b"1"})
    os.symlink(root, root / "a" / "up")
    out = module_runner("model_manifest", args={"path": str(root)})
    assert not out.failed
    assert without_mtime(out.result["files"]) == {"a/x.json": {"size": 1}}
    assert any("link loop" in w for w in out.warnings)


def test_compare_with_the_source_names_host_and_file(module_runner, tmp_path):
    source = module_runner("model_manifest", args={"path": str(make_model(tmp_path / "src")), "sha256": True}).result[
        "files"
    ]
    copy = make_model(tmp_path / "copy")
    (copy / "model.safetensors").write_bytes(b"weights-2")  # same size, other content
    (copy / "sub" / "tokenizer.json").write_bytes(b"tokenizer")
    (copy / "config.json").unlink()
    (copy / "stale.safetensors").write_bytes(b"old")
    out = module_runner("model_manifest", args={"path": str(copy), "sha256": True, "expected": source, "label": "m3"})
    assert not out.failed  # problems are data; the role decides
    assert [(p["host"], p["file"], p["kind"]) for p in out.result["problems"]] == [
        ("m3", "config.json", "missing"),
        ("m3", "model.safetensors", "sha256"),
        ("m3", "sub/tokenizer.json", "size"),
        ("m3", "stale.safetensors", "extra_weight"),
    ]


def test_compare_when_the_copy_is_missing(module_runner, tmp_path):
    out = module_runner(
        "model_manifest",
        args={"path": str(tmp_path / "absent"), "label": "m2", "expected": {"model.safetensors": {"size": 9}}},
    )
    [problem] = out.result["problems"]
    assert (problem["host"], problem["kind"]) == ("m2", "missing_dir")


@pytest.mark.parametrize(
    "rel, ok",
    [
        pytest.param("mlx-cluster/models/qwen", True, id="default-layout"),
        pytest.param("models", False, id="one-below-home"),
        pytest.param("", False, id="home-itself"),
    ],
)
def test_safe_dest_uses_this_users_home(module_runner, tmp_path, rel, ok):
    home = tmp_path / "home"
    home.mkdir()
    path = str(home / rel) if rel else str(home)
    out = module_runner(
        "model_manifest", args={"path": path, "safe_dest": True, "label": "m2"}, env={"HOME": str(home)}
    )
    assert out.failed is not ok
    assert out.result.get("home", str(home)) == str(home)
    if not ok:
        assert out.result["msg"].startswith(f"refusing to sync the model into {path} on m2")


@pytest.mark.parametrize("check_mode", [False, True], ids=["run", "check"])
def test_make_parent_makes_the_models_directory_once(module_runner, tmp_path, check_mode):
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    path = home / "mlx-cluster" / "models" / "qwen"
    args = {"path": str(path), "safe_dest": True, "make_parent": True, "label": "m2", "_ansible_check_mode": check_mode}
    out = module_runner("model_manifest", args=args, env={"HOME": str(home)})
    assert not out.failed, out.result
    assert out.result["changed"] is True and out.result["exists"] is False
    assert path.parent.is_dir() is not check_mode  # a dry run makes nothing
    if not check_mode:
        assert path.parent.stat().st_mode & 0o700 == 0o700
        again = module_runner("model_manifest", args=args, env={"HOME": str(home)})
        assert again.result["changed"] is False  # idempotent


def test_make_parent_checks_the_destination_first(module_runner, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    out = module_runner(
        "model_manifest",
        args={"path": str(home / "models"), "make_parent": True, "label": "m2"},
        env={"HOME": str(home)},
    )
    assert out.failed and out.result["msg"].startswith(f"refusing to sync the model into {home / 'models'} on m2")


def test_make_parent_names_the_mac_when_it_cannot(module_runner, tmp_path):
    home = tmp_path / "home"
    (home / "ro").mkdir(parents=True)
    (home / "ro" / "in-the-way").write_text("a file, not a directory")
    path = home / "ro" / "in-the-way" / "models" / "qwen"
    out = module_runner(
        "model_manifest", args={"path": str(path), "make_parent": True, "label": "m2"}, env={"HOME": str(home)}
    )
    assert out.failed and out.result["msg"].startswith(f"cannot create {path.parent} on m2:")
    assert "Fix:" in out.result["msg"]


def test_the_source_record_is_kept_outside_the_source(module_runner, tmp_path):
    """A source the user owns (a Hugging Face cache, a shared directory) is never written: the
    record goes to record_file, and the next run takes every hash from it."""
    root = make_model(tmp_path / "m")
    record = tmp_path / "artifacts" / "model-hashes" / "m.json"
    args = {"path": str(root), "sha256_all": True, "record": True, "record_file": str(record)}
    before = sorted(p.name for p in root.rglob("*"))
    first = module_runner("model_manifest", args=args)
    assert not first.failed, first.result
    assert sorted(p.name for p in root.rglob("*")) == before  # nothing of ours in the source
    saved = json.loads(record.read_text())
    assert saved["root"] == str(root)
    assert saved["files"]["model.safetensors"]["sha256"] == sha(b"weights-1")
    # the record vouches for files whose size and time match it: a planted hash is what comes back
    saved["files"]["model.safetensors"]["sha256"] = "0" * 64
    record.write_text(json.dumps(saved))
    again = module_runner("model_manifest", args=args)
    assert again.result["files"]["model.safetensors"]["sha256"] == "0" * 64


def test_a_record_left_in_the_source_by_an_earlier_version_is_read_once_not_written(module_runner, tmp_path):
    root = make_model(tmp_path / "m")
    size = (root / "model.safetensors").stat()
    old = root / HASHES
    old.write_text(
        json.dumps(
            {"files": {"model.safetensors": {"size": size.st_size, "mtime_ns": size.st_mtime_ns, "sha256": "1" * 64}}}
        )
    )
    kept = old.read_bytes()
    record = tmp_path / "elsewhere.json"
    args = {"path": str(root), "sha256_all": True, "record": True, "record_file": str(record)}
    out = module_runner("model_manifest", args=args)
    assert out.result["files"]["model.safetensors"]["sha256"] == "1" * 64  # taken from the old record
    assert old.read_bytes() == kept
    assert json.loads(record.read_text())["files"]["model.safetensors"]["sha256"] == "1" * 64


def test_a_record_of_another_directory_is_not_taken(module_runner, tmp_path):
    root = make_model(tmp_path / "m")
    st = (root / "model.safetensors").stat()
    record = tmp_path / "r.json"
    entry = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": "2" * 64}
    record.write_text(json.dumps({"root": str(tmp_path / "other"), "files": {"model.safetensors": entry}}))
    args = {"path": str(root), "sha256_all": True, "record": True, "record_file": str(record)}
    out = module_runner("model_manifest", args=args)
    assert out.result["files"]["model.safetensors"]["sha256"] == sha(b"weights-1")
    assert json.loads(record.read_text())["root"] == str(root)


def test_a_record_that_cannot_be_written_is_a_warning_naming_where(module_runner, tmp_path):
    root = make_model(tmp_path / "m")
    blocker = tmp_path / "file"
    blocker.write_text("in the way")
    record = blocker / "model-hashes" / "m.json"  # its parent is a file: cannot be made
    args = {"path": str(root), "sha256_all": True, "record": True, "record_file": str(record)}
    out = module_runner("model_manifest", args=args)
    assert not out.failed, out.result
    assert any(str(record) in w and "next run reads its files again" in w for w in out.warnings), out.warnings
