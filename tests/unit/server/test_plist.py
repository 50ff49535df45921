"""roles/mlx_server/templates/mlx_server.plist.j2, rendered by Ansible's own templating and
read back with plistlib: a valid launchd job with the rank's argv, escaped, and none of its
environment but HOME (the supervisor reads the rest from the 0600 env file).

launchd itself cannot run here: `launchctl bootstrap` of this plist is not exercised."""

from __future__ import annotations

import plistlib
from pathlib import Path

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

try:  # ansible-core >= 2.19 renders only trusted template text
    from ansible.template import trust_as_template
except ImportError:  # pragma: no cover - older ansible-core

    def trust_as_template(text):
        return text


ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = ROOT / "roles" / "mlx_server" / "templates" / "mlx_server.plist.j2"
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
ENV = {
    "MLX_RANK": "1",
    "MLX_HOSTFILE": "/Users/admin/mlx-cluster/server/ring_hosts.json",
    "HF_HUB_OFFLINE": "1",
    "WEIRD": "a<b>&c",
}


def render(**overrides):
    variables = {
        "mlx_server_label": "org.mlx-cluster.server",
        "mlx_server_launch_argv": ARGV,
        "mlx_server_rank": {"rank": 1, "env": ENV, "user": "admin", "home": "/Users/admin"},
        "mlx_server_dir": "/Users/admin/mlx-cluster/server",
        "mlx_server_stop_timeout": 30,
    }
    variables.update(overrides)
    text = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(TEMPLATE.read_text()))
    return text, plistlib.loads(text.encode())


def test_plist_is_a_valid_launch_daemon_for_the_rank():
    text, plist = render()
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    assert plist["Label"] == "org.mlx-cluster.server"
    assert plist["ProgramArguments"] == ARGV  # escaped in XML, exact once parsed
    # the rank's environment stays in its 0600 env file, out of a plist every user may read
    assert plist["EnvironmentVariables"] == {"HOME": "/Users/admin"}
    assert "a<b>&c" not in text and "a&lt;b&gt;" not in text and "MLX_HOSTFILE" not in text
    assert plist["UserName"] == "admin"
    assert plist["WorkingDirectory"] == "/Users/admin/mlx-cluster/server"
    assert plist["StandardOutPath"] == plist["StandardErrorPath"] == "/Users/admin/mlx-cluster/server/rank1.log"
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
    _, other = render(mlx_server_stop_timeout=90, mlx_server_label="com.example.llm")
    assert other["ExitTimeOut"] == 90
    assert other["Label"] == "com.example.llm"


def test_no_double_dash_inside_xml_comments():
    text, _ = render()
    for chunk in text.split("<!--")[1:]:
        assert "--" not in chunk.split("-->")[0], "XML comments may not contain --"
