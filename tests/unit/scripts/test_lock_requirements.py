"""scripts/lock_requirements.py without an index: which files a Mac may install, the markers,
and a lock made from a folder of wheels (a lab mirror's), read back as pip and the role read it."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from ansible_collections.mlx.cluster.plugins.plugin_utils.pythons import lock_problem

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "lock_requirements.py"
spec = importlib.util.spec_from_file_location("lock_requirements", SCRIPT)
lr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lr)


@pytest.mark.parametrize(
    "filename, ok",
    [
        ("mlx-0.32.4-cp312-cp312-macosx_14_0_arm64.whl", True),
        ("mlx-0.32.4-cp312-cp312-macosx_26_0_arm64.whl", True),
        ("numpy-2.5.5-cp312-cp312-macosx_11_0_universal2.whl", True),
        ("tqdm-4.70.1-py3-none-any.whl", True),
        ("regex-2026.11.19.tar.gz", True),
        ("mlx-0.32.4-cp312-cp312-manylinux_2_35_x86_64.whl", False),
        ("numpy-2.5.5-cp312-cp312-macosx_10_13_x86_64.whl", False),
        ("numpy-2.5.5-cp312-cp312-win_amd64.whl", False),
        ("x-1.0-py3-none-macosx_11_0_x86_64.macosx_11_0_arm64.whl", True),
    ],
)
def test_the_files_a_mac_may_install(filename, ok):
    assert lr.mac_file(filename) is ok


def test_a_version_for_every_python_has_no_marker_others_name_their_pythons():
    minors = ["3.14", "3.13", "3.12", "3.11"]
    assert lr.marker(["3.11", "3.12", "3.13", "3.14"], minors) == ""
    mark = lr.marker(["3.12", "3.11"], minors)
    assert mark == ' ; python_version == "3.11" or python_version == "3.12"'
    req = Requirement("numpy==2.4.6" + mark)
    assert [m for m in minors if req.marker.evaluate({"python_version": m})] == ["3.12", "3.11"]


def test_a_lock_from_a_folder_of_wheels_hashes_each_file(tmp_path):
    wheels = {
        "mlx-0.32.4-cp311-cp311-manylinux_2_35_x86_64.whl": b"mlx",
        "mlx_lm-0.32.2-py3-none-any.whl": b"mlx-lm",
        "mlx_cpu-0.32.4-py3-none-manylinux_2_35_x86_64.whl": b"cpu",
        "PyYAML-6.0.4-cp311-cp311-manylinux_2_17_x86_64.whl": b"yaml",
    }
    for name, data in wheels.items():
        (tmp_path / name).write_bytes(data)
    text = lr.lock_from_wheels(["mlx==0.32.4", "mlx-lm==0.32.2", "mlx-cpu==0.32.4"], tmp_path)
    assert text.startswith(lr.HEADER) and "# pins: mlx==0.32.4 mlx-lm==0.32.2 mlx-cpu==0.32.4\n" in text
    assert f"pyyaml==6.0.4 \\\n    --hash=sha256:{hashlib.sha256(b'yaml').hexdigest()}\n" in text
    assert lock_problem(text, ["mlx==0.32.4", "mlx-lm==0.32.2", "mlx-cpu==0.32.4"], "lab.lock") == ""
    assert "does not pin mlx-lm==0.33.0" in lock_problem(text, ["mlx==0.32.4", "mlx-lm==0.33.0"], "lab.lock")


def test_two_versions_of_one_project_in_the_folder_are_refused(tmp_path):
    (tmp_path / "numpy-2.4.6-cp311-cp311-any.whl").write_bytes(b"a")
    (tmp_path / "numpy-2.5.5-cp312-cp312-any.whl").write_bytes(b"b")
    with pytest.raises(SystemExit, match="two versions of numpy: 2.4.6 and 2.5.5"):
        lr.wheel_hashes(tmp_path)
