"""tests/simcluster/local_network/sitecustomize.py: what the simulated launchd puts on PYTHONPATH
of the programs it starts while a Mac has `local_network_denied_to_daemons` (macOS Local Network
privacy refusing a launchd-started interpreter, as reported for macOS 26/27): their Python's
connects to anything but loopback fail at once with EHOSTUNREACH; loopback still connects."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from ansible_collections.mlx.cluster.plugins.module_utils import mlx_port_connect

DENIED = Path(__file__).resolve().parents[2] / "simcluster" / "local_network"

CONNECT = r"""
import errno, json, socket, sys
out = []
for host, port in json.loads(sys.argv[1]):
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.settimeout(2)
    try:
        s.connect((host, port))
        out.append("connected")
    except OSError as exc:
        out.append(errno.errorcode.get(exc.errno, str(exc)))
    finally:
        s.close()
print(json.dumps(out))
"""


def run(argv):
    """argv as the simulated launchd starts a program while the setting is on."""
    env = dict(os.environ, PYTHONPATH=str(DENIED))
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_a_job_connects_to_loopback_only():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        port = srv.getsockname()[1]
        # 192.0.2.1 (TEST-NET-1): refused before any packet leaves, whatever this machine routes
        pairs = [["127.0.0.1", port], ["192.0.2.1", port], ["10.208.0.2", 42323], ["example.invalid", 80]]
        res = run([sys.executable, "-c", CONNECT, json.dumps(pairs)])
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout) == ["connected", "EHOSTUNREACH", "EHOSTUNREACH", "EHOSTUNREACH"]
        # connect_ex too (what a program that polls its connect uses)
        ex = run([sys.executable, "-c", "import socket; print(socket.socket().connect_ex(('192.0.2.1', 9)))"])
        assert ex.stdout.strip() == str(errno.EHOSTUNREACH), ex.stderr


def test_the_probe_run_as_such_a_job_names_ehostunreach(tmp_path):
    """The port probe's own program (what mlx_port_probe's launchd job runs) under the setting:
    the refusal arrives as `unreachable`, EHOSTUNREACH, at once (not a timeout)."""
    job = tmp_path / "targets.json"
    targets = [{"host": "m2", "address": "192.0.2.1", "port": 42323, "role": "ring"}]
    job.write_text(json.dumps({"token": "tok", "timeout": 5, "targets": targets}))
    res = run([sys.executable, mlx_port_connect.__file__, str(job), str(tmp_path / "results.json")])
    assert res.returncode == 0, res.stderr
    (r,) = json.loads((tmp_path / "results.json").read_text())["results"]
    assert (r["result"], r["error"], r["errno"]) == ("unreachable", "EHOSTUNREACH", errno.EHOSTUNREACH)
    assert r["seconds"] < 1
