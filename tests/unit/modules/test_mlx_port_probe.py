"""library/mlx_port_probe.py: main() with a real listener on loopback (this machine's
interpreter) and socketfilterfw answered from captures."""

from __future__ import annotations

import os
import signal
import socket
import sys

import pytest

SFW = "/usr/libexec/ApplicationFirewall/socketfilterfw"
GETTERS = (SFW, "--getglobalstate", "--getblockall", "--getstealthmode", "--getallowsigned")
RUN_ID = "unit-test-run-id-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ended():
    pids = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_listen_starts_the_interpreters_listener_and_reads_the_firewall_then_connect_gets_its_answer(
    module_runner, read_fixture, ended
):
    port = free_port()
    exe = os.path.realpath(sys.executable)
    commands = {
        GETTERS: (0, read_fixture("socketfilterfw_getters_on_stealth.txt"), ""),
        (SFW, "--getappblocked", exe): (0, f"Incoming connection to {exe} is blocked \n", ""),
    }
    out = module_runner(
        "mlx_port_probe",
        bins={"socketfilterfw": SFW},
        commands=commands,
        args={
            "state": "listen",
            "python": sys.executable,
            "run_id": RUN_ID,
            "deadline": 30,
            "listen": [{"address": "127.0.0.1", "port": port, "host": "m1", "peers": ["m2"]}],
        },
    )
    assert not out.failed, out.result
    listener = out.result["listener"]
    ended.append(listener["pid"])
    assert listener["bound"] == [["127.0.0.1", port]] and listener["errors"] == [] and listener["error"] is None
    assert listener["executable"] == exe
    assert out.result["alf"] == {
        "enabled": True,
        "state": 1,
        "block_all": False,
        "stealth": True,
        "allow_signed": True,
        "allow_signed_downloaded": False,
        "app": "blocked",
        "app_path": exe,
        "summary": "on (stealth, interpreter blocked)",
    }
    assert out.result["changed"] is False

    got = module_runner(
        "mlx_port_probe",
        args={
            "state": "connect",
            "token": RUN_ID,
            "timeout": 3,
            "targets": [
                {"host": "m1", "address": "127.0.0.1", "port": port, "role": "ring"},
                {"host": "m1", "address": "127.0.0.1", "port": free_port(), "role": "ring"},
            ],
        },
    )
    assert not got.failed, got.result
    assert [(r["host"], r["result"]) for r in got.result["results"]] == [("m1", "ok"), ("m1", "refused")]


def test_without_socketfilterfw_the_firewall_is_unknown_and_a_missing_interpreter_is_said(module_runner):
    out = module_runner(
        "mlx_port_probe",
        bins={"socketfilterfw": None},
        args={
            "state": "listen",
            "python": "/nonexistent/venv/bin/python",
            "run_id": RUN_ID,
            "listen": [{"address": "127.0.0.1", "port": 32323}],
        },
    )
    assert not out.failed, out.result
    assert out.result["alf"] is None
    assert out.result["listener"]["error"] == "the interpreter /nonexistent/venv/bin/python does not exist on this Mac"


def test_a_firewall_that_does_not_answer_is_a_warning_not_a_hang(module_runner, hang):
    out = module_runner(
        "mlx_port_probe",
        bins={"socketfilterfw": SFW},
        commands={GETTERS: hang},
        args={"state": "listen", "python": sys.executable, "run_id": RUN_ID, "listen": []},
    )
    assert not out.failed, out.result
    assert out.result["alf"] is None
    assert any("application firewall's state is unknown" in w for w in out.warnings), out.result


def test_a_short_run_id_is_refused(module_runner):
    out = module_runner("mlx_port_probe", args={"state": "listen", "python": sys.executable, "run_id": "short"})
    assert out.failed and "at least 16 characters" in out.result["msg"]
