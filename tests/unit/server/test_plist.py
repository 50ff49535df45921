"""plugins/module_utils/mlx_server.py launchd_plist, the LaunchDaemon plist's one writer (the
server's ranks through the filter mlx_launchd_plist, the port probe's launchd job), read back
with plistlib: a valid launchd job with the rank's argv, escaped, and none of its environment
but HOME (the supervisor reads the rest from the 0600 env file).

launchd itself cannot run here: `launchctl bootstrap` of this plist runs on the simulated Macs
(tests/e2e/test_server.py)."""

from __future__ import annotations

import plistlib

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_server import launchd_plist
from tests.unit.filter.controller import controller_imports

ARGV = [
    "/Users/admin/mlx-cluster/venv/bin/python",
    "/Users/admin/mlx-cluster/server/mlx_cluster_server.py",
    "--model",
    "/Users/admin/models/Qwen & <friends>",
    "--model-id",
    "q\"uoted'",
    "--run-id",
    "abc123",
]
RUN_DIR = "/Users/admin/mlx-cluster/server"


def render(**overrides):
    kw = {
        "user": "admin",
        "home": "/Users/admin",
        "workdir": RUN_DIR,
        "log": f"{RUN_DIR}/rank1.log",
        "exit_timeout": 30,
        "comment": "Written by mlx-cluster (role mlx_server): rank 1",
    }
    kw.update(overrides)
    label = kw.pop("label", "org.mlx-cluster.server")
    text = launchd_plist(label, kw.pop("argv", ARGV), **kw)
    return text, plistlib.loads(text.encode())


def test_plist_is_a_valid_launch_daemon_for_the_rank():
    text, plist = render()
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    assert "<!-- Written by mlx-cluster (role mlx_server): rank 1 -->\n<plist" in text
    assert plist["Label"] == "org.mlx-cluster.server"
    assert plist["ProgramArguments"] == ARGV  # escaped in XML, exact once parsed
    assert "Qwen &amp; &lt;friends&gt;" in text
    # the rank's environment stays in its 0600 env file, out of a plist every user may read
    assert plist["EnvironmentVariables"] == {"HOME": "/Users/admin"}
    assert plist["UserName"] == "admin"
    assert plist["WorkingDirectory"] == RUN_DIR
    assert plist["StandardOutPath"] == plist["StandardErrorPath"] == f"{RUN_DIR}/rank1.log"
    assert plist["RunAtLoad"] is True
    assert plist["KeepAlive"] == {"SuccessfulExit": False}  # restarted on failure, not after a clean stop
    assert plist["ExitTimeOut"] == 30
    assert plist["ThrottleInterval"] == 10
    assert plist["Umask"] == 0o077
    assert plist["ProcessType"] == "Interactive"


def test_plist_is_deterministic_and_follows_the_settings():
    a, _ = render()
    b, _ = render()
    assert a == b
    _, other = render(exit_timeout=90, label="com.example.llm")
    assert other["ExitTimeOut"] == 90
    assert other["Label"] == "com.example.llm"


def test_a_job_run_once_has_no_keep_alive():
    """The port probe's job: run at load, never again (launchd keeps it loaded, not running,
    until the module boots it out)."""
    _, plist = render(keep_alive=False, argv=["/venv/bin/python", "/tmp/x/probe.py", "a", "b"])
    assert "KeepAlive" not in plist and "ThrottleInterval" not in plist
    assert plist["RunAtLoad"] is True and plist["UserName"] == "admin"


@pytest.mark.parametrize("comment", ["a -- b", "ends with -"])
def test_no_double_dash_inside_xml_comments(comment):
    with pytest.raises(ValueError, match="XML comment"):
        render(comment=comment)


def test_the_filter_is_the_same_writer():
    with controller_imports():
        from ansible_collections.mlx.cluster.plugins.filter.server_filters import FilterModule
    mlx_launchd_plist = FilterModule().filters()["mlx_launchd_plist"]
    text = mlx_launchd_plist(
        ARGV,
        "org.mlx-cluster.server",
        "admin",
        "/Users/admin",
        RUN_DIR,
        f"{RUN_DIR}/rank1.log",
        "30",
        comment="Written by mlx-cluster (role mlx_server): rank 1",
    )
    assert text == render()[0]
