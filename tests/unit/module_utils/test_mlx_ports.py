"""plugins/module_utils/mlx_ports.py: the ports MLX's ranks listen on, socketfilterfw's answers,
the listener; plugins/module_utils/mlx_port_connect.py: the bounded connect, in-process and as the
program a launchd job runs (over real sockets on this machine's loopback)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils import mlx_port_connect
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_launch import STARTING_PORT
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_port_connect import connect_probe
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_ports import (
    LISTENER,
    alf_summary,
    app_bundle,
    endpoints,
    listener_argv,
    listens,
    merged_endpoints,
    parse_alf,
    parse_app_blocked,
    targets,
)


def ring_hostfile(ips):
    return {
        "backend": "ring",
        "envs": [],
        "hosts": [{"ssh": f"m{i + 1}", "ips": x, "rdma": []} for i, x in enumerate(ips)],
    }


def test_ring_ports_count_from_the_starting_port_per_rank_and_address_and_the_previous_rank_connects():
    # as mlx.launch's launch_ring: rank 0's addresses first, one port each, then rank 1's ...
    hf = ring_hostfile([["10.208.0.1"], ["10.208.0.6", "10.208.0.10"], ["10.208.0.13"]])
    got = [(e["host"], e["rank"], e["address"], e["port"], e["peers"]) for e in endpoints(hf)]
    assert got == [
        ("m1", 0, "10.208.0.1", 32323, ["m3"]),
        ("m2", 1, "10.208.0.6", 32324, ["m1"]),
        ("m2", 1, "10.208.0.10", 32325, ["m1"]),
        ("m3", 2, "10.208.0.13", 32326, ["m2"]),
    ]
    assert {e["role"] for e in endpoints(hf)} == {"ring"}
    assert STARTING_PORT == 32323
    assert [e["port"] for e in endpoints(hf, 40000)] == [40000, 40001, 40002, 40003]
    assert listens(endpoints(hf), "m2") == [["10.208.0.6", 32324], ["10.208.0.10", 32325]]
    assert targets(endpoints(hf), "m1") == [
        {"host": "m2", "address": "10.208.0.6", "port": 32324, "role": "ring"},
        {"host": "m2", "address": "10.208.0.10", "port": 32325, "role": "ring"},
    ]


def test_a_pair_listens_on_both_ends():
    eps = endpoints(ring_hostfile([["10.208.0.1"], ["10.208.0.2"]]))
    assert [(e["host"], e["port"], e["peers"]) for e in eps] == [("m1", 32323, ["m2"]), ("m2", 32324, ["m1"])]


@pytest.mark.parametrize("backend", ["jaccl", "jaccl-ring"])
def test_jaccl_is_rank_0s_coordinator_reached_by_every_other_rank(backend):
    hf = {
        "backend": backend,
        "envs": [],
        "hosts": [
            {"ssh": "m1", "ips": ["192.168.1.10"], "rdma": [None, "rdma_en2"]},
            {"ssh": "m2", "ips": ["192.168.1.11"], "rdma": ["rdma_en2", None]},
            {"ssh": "m3", "ips": ["192.168.1.12"], "rdma": []},
        ],
    }
    assert endpoints(hf) == [
        {
            "host": "m1",
            "rank": 0,
            "address": "192.168.1.10",
            "port": 32323,
            "role": "coordinator",
            "peers": ["m2", "m3"],
        }
    ]


@pytest.mark.parametrize(
    "hostfile, error",
    [
        pytest.param({"backend": "mpi", "hosts": []}, "backend 'mpi'", id="backend"),
        pytest.param(
            {"backend": "jaccl", "hosts": [{"ssh": "m1", "ips": []}, {"ssh": "m2", "ips": []}]},
            "rank 0's coordinator address",
            id="no-coordinator",
        ),
        pytest.param({"backend": "ring", "hosts": [{"ips": ["10.0.0.1"]}]}, "entry 0 has no 'ssh'", id="no-ssh"),
        pytest.param([], "expected an MLX hostfile", id="not-a-hostfile"),
    ],
)
def test_bad_hostfiles_are_named(hostfile, error):
    with pytest.raises(ValueError, match=error):
        endpoints(hostfile)


def test_the_fallback_ring_is_probed_too_each_address_and_port_once():
    # a jaccl plan (coordinator on the LAN address) and the ring it falls back to (Thunderbolt)
    jaccl = {
        "backend": "jaccl",
        "envs": [],
        "hosts": [
            {"ssh": "m1", "ips": ["192.168.1.10"], "rdma": [None, "rdma_en2"]},
            {"ssh": "m2", "ips": ["192.168.1.11"], "rdma": ["rdma_en2", None]},
        ],
    }
    ring = ring_hostfile([["10.208.0.1"], ["10.208.0.2"]])
    got = [(e["host"], e["address"], e["port"], e["role"], e["peers"]) for e in merged_endpoints([jaccl, ring])]
    assert got == [
        ("m1", "192.168.1.10", 32323, "coordinator", ["m2"]),
        ("m1", "10.208.0.1", 32323, "ring", ["m2"]),
        ("m2", "10.208.0.2", 32324, "ring", ["m1"]),
    ]
    # the same address and port in both: listened on once, every connecting host kept
    three = ring_hostfile([["10.208.0.1"], ["10.208.0.2"], ["10.208.0.3"]])
    coord = {
        "backend": "jaccl",
        "envs": [],
        "hosts": [
            {"ssh": "m1", "ips": ["10.208.0.1"], "rdma": []},
            {"ssh": "m2", "ips": [], "rdma": []},
            {"ssh": "m3", "ips": [], "rdma": []},
        ],
    }
    once = [e for e in merged_endpoints([coord, three]) if e["host"] == "m1"]
    assert len(once) == 1 and once[0]["role"] == "coordinator" and once[0]["peers"] == ["m2", "m3"]
    assert merged_endpoints([ring]) == endpoints(ring)


def test_one_rank_has_no_port():
    assert endpoints(ring_hostfile([["10.208.0.1"]])) == []


@pytest.mark.parametrize(
    "fixture, want",
    [
        pytest.param(
            "socketfilterfw_getters_on_stealth.txt",
            {
                "enabled": True,
                "state": 1,
                "block_all": False,
                "stealth": True,
                "allow_signed": True,
                "allow_signed_downloaded": False,
            },
            id="on-stealth",
        ),
        pytest.param(
            "socketfilterfw_getters_off.txt",
            {
                "enabled": False,
                "state": 0,
                "block_all": False,
                "stealth": False,
                "allow_signed": True,
                "allow_signed_downloaded": True,
            },
            id="off",
        ),
        pytest.param(
            "socketfilterfw_getters_older.txt",
            {
                "enabled": True,
                "state": 1,
                "block_all": False,
                "stealth": True,
                "allow_signed": True,
                "allow_signed_downloaded": None,
            },
            id="older-macos",
        ),
    ],
)
def test_parse_alf(read_fixture, fixture, want):
    assert parse_alf(read_fixture(fixture)) == want


def test_parse_alf_block_all_and_unknown_text():
    assert parse_alf("Firewall has block all state set to enabled.\n")["block_all"] is True
    assert parse_alf("Firewall is enabled. (State = 2)\n")["block_all"] is True  # older: essential services only
    assert parse_alf("Firewall settings cannot be modified from command line on managed Mac computers.\n") == {
        "enabled": None,
        "state": None,
        "block_all": None,
        "stealth": None,
        "allow_signed": None,
        "allow_signed_downloaded": None,
    }


@pytest.mark.parametrize(
    "text, want",
    [
        ("Incoming connection to /opt/homebrew/bin/python3 is blocked \n", "blocked"),
        ("Incoming connection to /opt/homebrew/bin/python3 is permitted \n", "permitted"),
        ("Application at path ( /x/Python.app ) is blocked from accepting incoming connections.\n", "blocked"),
        ("Application at path ( /x/Python.app ) is not blocked from accepting incoming connections.\n", "permitted"),
        ("The application is not part of the firewall \n", "not_listed"),
        ("", None),
    ],
)
def test_parse_app_blocked(text, want):
    assert parse_app_blocked(text) == want


def test_app_bundle_is_pythons_app_for_a_framework_build():
    fw = "/opt/homebrew/Cellar/python@3.12/3.12.8/Frameworks/Python.framework/Versions/3.12/bin/python3.12"
    assert app_bundle(fw) == (
        "/opt/homebrew/Cellar/python@3.12/3.12.8/Frameworks/Python.framework/Versions/3.12/Resources/Python.app"
    )
    assert app_bundle("/usr/local/bin/python3.12") == "/usr/local/bin/python3.12"


def test_alf_summary():
    assert alf_summary(None) == "unknown"
    assert alf_summary({"enabled": False}) == "off"
    assert (
        alf_summary({"enabled": True, "stealth": True, "block_all": True, "app": "not_listed"})
        == "on (block all, stealth, interpreter not listed)"
    )
    assert (
        alf_summary({"enabled": True, "allow_signed_downloaded": True, "app": "blocked"})
        == "on (signed downloads allowed, interpreter blocked)"
    )


# ---- the listener and the connect, on loopback ----------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def listener():
    procs = []

    def start(pairs, deadline=20):
        argv = listener_argv(sys.executable, "test-run-id-0123456789", deadline, pairs)
        assert argv[1:4] == ["-", "--run-id", "test-run-id-0123456789"]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        procs.append(proc)
        proc.stdin.write(LISTENER.encode())
        proc.stdin.close()
        return json.loads(proc.stdout.readline())

    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_the_listener_answers_the_probe_and_names_what_it_could_not_bind(listener):
    port = free_port()
    said = listener([("127.0.0.1", port), ("192.0.2.1", port)])  # TEST-NET-1: on no interface here
    assert said["bound"] == [["127.0.0.1", port]]
    assert [(e["address"], e["error"]) for e in said["errors"]] == [("192.0.2.1", "EADDRNOTAVAIL")]
    assert connect_probe("127.0.0.1", port, "tok123", 3)["result"] == "ok"
    assert connect_probe("127.0.0.1", port, "again", 3)["result"] == "ok"  # answers every probe
    # a port another program listens on: EADDRINUSE, the listener's own and a second one alike
    again = listener([("127.0.0.1", port)])
    assert [e["error"] for e in again["errors"]] == ["EADDRINUSE"] and again["bound"] == []


def test_the_same_probe_runs_as_a_program_with_nothing_but_the_standard_library(listener, tmp_path):
    """What a launchd job runs (mlx_port_probe launchd_user): this very file, by an interpreter
    that has no Ansible and no collection (-I: isolated, -S: no site-packages)."""
    port = free_port()
    listener([("127.0.0.1", port)])
    targets = [
        {"host": "m1", "address": "127.0.0.1", "port": port, "role": "ring"},
        {"host": "m1", "address": "127.0.0.1", "port": free_port(), "role": "coordinator"},
    ]
    job = tmp_path / "targets.json"
    job.write_text(json.dumps({"token": "tok", "timeout": 3, "targets": targets}))
    results = tmp_path / "results.json"
    run = subprocess.run(
        [sys.executable, "-I", "-S", mlx_port_connect.__file__, str(job), str(results)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert run.returncode == 0 and run.stderr == "", run.stderr
    said = json.loads(results.read_text())
    assert [(r["host"], r["role"], r["port"], r["result"]) for r in said["results"]] == [
        ("m1", "ring", port, "ok"),
        ("m1", "coordinator", targets[1]["port"], "refused"),
    ]
    assert said["executable"] == os.path.realpath(sys.executable)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json", "targets.json"]  # no .tmp left
    bad = subprocess.run([sys.executable, "-I", "-S", mlx_port_connect.__file__], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("usage: ")


def test_the_listener_ends_by_itself_at_its_deadline(listener):
    port = free_port()
    listener([("127.0.0.1", port)], deadline=1)
    import time

    time.sleep(2.5)
    assert connect_probe("127.0.0.1", port, "tok", 2)["result"] == "refused"


def serve_once(behaviour):
    """A server on loopback that accepts one connection and then resets it / stays silent /
    answers something else."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def run():
        conn, _ = srv.accept()
        if behaviour == "reset":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            conn.close()
        elif behaviour == "silent":
            conn.recv(100)
            threading.Event().wait(3)
            conn.close()
        else:
            conn.recv(100)
            conn.sendall(b"SSH-2.0-OpenSSH_9.8\r\n")
            conn.close()
        srv.close()

    threading.Thread(target=run, daemon=True).start()
    return srv.getsockname()[1]


@pytest.mark.parametrize("behaviour, result", [("reset", "reset"), ("silent", "no_answer"), ("other", "wrong_answer")])
def test_a_connection_accepted_but_not_answered_is_not_success(behaviour, result):
    assert connect_probe("127.0.0.1", serve_once(behaviour), "tok", 1)["result"] == result


@pytest.mark.parametrize(
    "exc, result, error",
    [
        (socket.timeout("timed out"), "timeout", "timeout"),
        (OSError(60 if sys.platform == "darwin" else 110, "Operation timed out"), "timeout", "ETIMEDOUT"),
        (OSError(65 if sys.platform == "darwin" else 113, "No route to host"), "unreachable", "EHOSTUNREACH"),
        (
            ConnectionRefusedError(61 if sys.platform == "darwin" else 111, "Connection refused"),
            "refused",
            "ECONNREFUSED",
        ),
    ],
)
def test_connect_failures_are_classified(exc, result, error):
    def connect(addr, timeout):
        raise exc

    out = connect_probe("10.208.0.1", 32323, "tok", 5, connect=connect)
    assert (out["result"], out["error"]) == (result, error)
    assert out["address"] == "10.208.0.1" and out["port"] == 32323


@pytest.mark.parametrize(
    "hostfile",
    [
        pytest.param(ring_hostfile([["10.208.0.1"], ["10.208.0.6", "10.208.0.10"], ["10.208.0.13"]]), id="ring"),
        pytest.param(
            {
                "backend": "jaccl",
                "envs": [],
                "hosts": [
                    {"ssh": "m1", "ips": ["192.168.1.10"], "rdma": [None, "rdma_en2"]},
                    {"ssh": "m2", "ips": ["192.168.1.11"], "rdma": ["rdma_en2", None]},
                ],
            },
            id="jaccl",
        ),
    ],
)
@pytest.mark.parametrize("port", [STARTING_PORT, 42323])
def test_the_ports_are_those_mlx_launch_gives_the_ranks(hostfile, port, monkeypatch, tmp_path):
    """Differential: what mlx.launch's own launch_ring / launch_jaccl hand the ranks
    (MLX_HOSTFILE's addresses, MLX_JACCL_COORDINATOR) are exactly the probed endpoints."""
    from argparse import Namespace

    from mlx._distributed_utils import launch as mlx_launch
    from mlx._distributed_utils.common import Hostfile

    path = tmp_path / "hostfile.json"
    path.write_text(json.dumps(hostfile))
    hf = Hostfile.from_file(path)
    args = Namespace(
        starting_port=port,
        connections_per_ip=1,
        env=[],
        verbose=False,
        cwd=None,
        python="/usr/bin/python3",
        backend=hf.backend,
    )
    captured = []
    monkeypatch.setattr(mlx_launch, "_launch_with_io", lambda cls, arguments, verbose: captured.extend(arguments))
    parser = Namespace(error=lambda msg: pytest.fail(msg))
    run = mlx_launch.launch_ring if hf.backend == "ring" else mlx_launch.launch_jaccl
    run(parser, hf.hosts, args, ["script.py"])
    (_rank, _host, _python, _cwd, files, env, _cmd), _kw = captured[0]
    eps = [f"{e['address']}:{e['port']}" for e in endpoints(hostfile, port)]
    if hf.backend == "ring":
        assert eps == [a for node in json.loads(files["MLX_HOSTFILE"]) for a in node]
    else:
        assert eps == [e.partition("=")[2] for e in env if e.startswith("MLX_JACCL_COORDINATOR=")]


def test_starting_port_is_mlx_launchs_default():
    import inspect
    import re

    from mlx._distributed_utils import launch as mlx_launch

    src = inspect.getsource(mlx_launch)
    m = re.search(r'"--starting-port",.*?default=(\d+)', src, re.S)
    assert m and int(m.group(1)) == STARTING_PORT
