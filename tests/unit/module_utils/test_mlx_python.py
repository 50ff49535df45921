"""The Pythons a Mac has, found by name in Homebrew's, python.org's and /usr/local's places."""

import os

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_python import find_pythons, python_facts


def exe(path, mode=0o755):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod(path, mode)


def test_versioned_pythons_in_the_homes_order_newest_first(tmp_path):
    brew, org, local = tmp_path / "brew", tmp_path / "Versions", tmp_path / "local"
    for name in ("python3.12", "python3.13", "python3", "python3.13-config", "pip3.13"):
        exe(str(brew / name))
    exe(str(org / "3.11" / "bin" / "python3.11"))
    os.makedirs(org / "Current", exist_ok=True)  # python.org's link to the newest: not a version
    exe(str(local / "python3.11"))
    exe(str(local / "python3.10"), mode=0o644)  # not executable: left out
    os.symlink(str(tmp_path / "gone"), str(local / "python3.9"))  # dangling: left out
    homes = (("homebrew", str(brew)), ("python.org", str(org)), ("/usr/local/bin", str(local)))
    assert find_pythons(homes) == [
        {"path": str(brew / "python3.13"), "version": "3.13", "source": "homebrew"},
        {"path": str(brew / "python3.12"), "version": "3.12", "source": "homebrew"},
        {"path": str(org / "3.11" / "bin" / "python3.11"), "version": "3.11", "source": "python.org"},
        {"path": str(local / "python3.11"), "version": "3.11", "source": "/usr/local/bin"},
    ]


def test_a_mac_with_none_and_the_module_interpreter(tmp_path):
    got = python_facts((("homebrew", str(tmp_path / "nothing")),))
    assert got["found"] == []
    assert got["module"]["path"] and got["module"]["version"].count(".") == 2
