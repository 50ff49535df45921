"""The toolkit's one rule for names that reach a shell, a forced command or a root path
(module_utils/mlx_files.py unsafe_path, unsafe_label), and its filter (mlx_unsafe_path)."""

from __future__ import annotations

import pytest

from ansible_collections.mlx.cluster.plugins.filter.python_filters import mlx_unsafe_path
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import unsafe_label, unsafe_path


@pytest.mark.parametrize(
    "path, home",
    [
        ("/opt/mlx-cluster", False),
        ("/Users/admin/mlx-cluster/venv/bin/python3.13", False),
        ("/Volumes/Models_2/m@v1,a=b:c%2B+", False),
        ("~/mlx-cluster", True),
        ("~", True),
        ("/", False),
        ("/Users/admin/.ssh/x", False),
    ],
)
def test_safe_paths_pass(path, home):
    assert unsafe_path(path, "s", home=home) is None


@pytest.mark.parametrize(
    "path, home, match",
    [
        ("", False, "s is empty"),
        (None, False, "s is empty"),
        (["/opt/x"], False, "s ['/opt/x'] is not a path"),
        ("mlx-cluster", False, "is not an absolute path: give one"),
        ("~/mlx-cluster", False, "is not an absolute path: give one"),
        ("~alice/x", True, "(nor one under ~)"),
        ("/opt/mlx cluster", False, "holds whitespace"),
        ("/opt/x\ty", False, "holds whitespace"),
        ("/opt/x\ny", False, "holds whitespace"),
        ("/opt/x\n", False, "holds whitespace"),
        ("/opt/$HOME", False, "characters a shell reads"),
        ("/opt/`id`", False, "characters a shell reads"),
        ("/opt/x;rm", False, "characters a shell reads"),
        ("/opt/x'y", False, "characters a shell reads"),
        ('/opt/x"y', False, "characters a shell reads"),
        ("/opt/x*", False, "characters a shell reads"),
        ("/opt/\u00e9", False, "characters a shell reads"),
        ("/opt/../etc", False, "'.' or '..' components"),
        ("/opt/./x", False, "'.' or '..' components"),
        ("~/..", True, "'.' or '..' components"),
    ],
)
def test_unsafe_paths_are_named_with_the_setting(path, home, match):
    why = unsafe_path(path, "s", home=home)
    assert why and why.startswith("s ") and match in why


@pytest.mark.parametrize("label", ["org.mlx-cluster.server", "com.example.a_b", "x"])
def test_launchd_labels_pass(label):
    assert unsafe_label(label, "mlx_server_label") is None


@pytest.mark.parametrize("label", ["", None, "../x", "org/x", "a..b", ".a", "a.", "org.x y", "org.x\n", "-x"])
def test_labels_that_could_lead_a_root_path_elsewhere_are_refused(label):
    why = unsafe_label(label, "mlx_server_label")
    assert why and why.startswith("mlx_server_label") and "e.g. org.mlx-cluster.server" in why


def test_the_filter_answers_empty_for_a_safe_path_and_the_reason_otherwise():
    assert mlx_unsafe_path("/opt/v/bin/python", "python_env_venv_dir") == ""
    assert mlx_unsafe_path("~/v", "python_env_venv_dir", True) == ""
    assert mlx_unsafe_path("/opt/my venv/bin/python", "python_env_venv_dir").startswith(
        "python_env_venv_dir '/opt/my venv/bin/python' holds whitespace"
    )
