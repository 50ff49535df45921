"""A launch that recovers instead of hanging (issue #14 item 4).

The ranks' side (roles/mlx_cluster/files/mlx_cluster_startup.py, loaded as a Mac runs it): only
the failures of mx.distributed.init that are races are retried, a bounded number of times,
spaced; an RDMA failure ends init at once naming this rank's devices and the fix. The
controller's side (module_utils/mlx_launch.py): a rank that exited with RDMA_EXIT names the Macs
and the cables to replug. MLX's texts come from its source (mlx/distributed, 0.31-0.32).
"""

from __future__ import annotations

import errno
import json

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_launch import RDMA_EXIT, rank_cables, rdma_failure
from tests.programs import load_program

startup = load_program("mlx_cluster", "mlx_cluster_startup.py")
daemon = load_program("mlx_server", "mlx_server_daemon.py")

REFUSED = errno.ECONNREFUSED  # the errno MLX prints is this OS's (61 on macOS, 111 on Linux)


@pytest.mark.parametrize(
    "text, kind",
    [
        pytest.param(f"[ring] Couldn't connect (error: {REFUSED})", "race", id="ring-peer-not-listening"),
        pytest.param(f"[jaccl] Couldn't connect (error: {REFUSED})", "race", id="coordinator-not-listening"),
        pytest.param(f"[ring] Couldn't bind socket (error: {errno.EADDRINUSE})", "race", id="port-still-held"),
        pytest.param("Cannot initialize jaccl distributed backend.", "rdma", id="mlx-without-jaccl"),
        pytest.param("[jaccl] Could not open device rdma_en2", "rdma", id="open-device"),
        pytest.param("[jaccl] Could not find device rdma_en3 (0 available)", "rdma", id="no-device"),
        pytest.param("[jaccl] Couldn't allocate protection domain", "rdma", id="pd"),
        pytest.param("[jaccl] Couldn't create completion queue", "rdma", id="cq"),
        pytest.param("[jaccl] Couldn't create queue pair", "rdma", id="qp-0.31"),
        pytest.param("[jaccl] Creating the queue pair failed with 'Resource busy (16)'.", "rdma", id="qp-0.32"),
        pytest.param("[jaccl] Changing queue pair to INIT failed with errno 22", "rdma", id="qp-init"),
        pytest.param("[jaccl] Changing queue pair to RTR failed with errno 110", "rdma", id="qp-rtr"),
        pytest.param("[jaccl] Changing queue pair to RTS failed with errno 22", "rdma", id="qp-rts"),
        pytest.param(
            "[jaccl] No IPv4-mapped GID for this device. Thunderbolt RDMA ports only publish one "
            "once the interface has an IPv4 address",
            "rdma",
            id="gid",
        ),
        pytest.param("[jaccl] Register memory region failed", "rdma", id="mr"),
        pytest.param("[jaccl] Recv failed with error code 12", "rdma", id="post-recv"),
        pytest.param(f"[ring] Couldn't connect (error: {errno.ETIMEDOUT})", "network", id="timed-out"),
        pytest.param(f"[jaccl] Couldn't connect (error: {errno.EHOSTUNREACH})", "network", id="unreachable"),
        pytest.param(f"[ring] Couldn't bind socket (error: {errno.EADDRNOTAVAIL})", "network", id="not-my-address"),
        pytest.param("[jaccl] Recv failed with errno=0", "peer", id="side-channel-peer-hung-up"),
        pytest.param("[jaccl] The devices do not form a valid mesh.", "config", id="bad-device-file"),
        pytest.param(
            "[ring] You need to provide via environment variables both a rank (MLX_RANK) and a "
            'hostfile (MLX_HOSTFILE) but provided MLX_RANK="" and MLX_HOSTFILE=""',
            "config",
            id="no-env",
        ),
    ],
)
def test_init_failures_are_classified_by_mlxs_own_texts(text, kind):
    assert startup.init_failure_kind(RuntimeError(text)) == kind


def test_any_becomes_the_backend_the_launcher_set_up():
    assert startup.launcher_backend("any", {"MLX_RANK": "0", "MLX_IBV_DEVICES": "/tmp/d"}) == "jaccl"
    assert startup.launcher_backend("any", {"MLX_RANK": "0", "MLX_HOSTFILE": "/tmp/h"}) == "ring"
    assert startup.launcher_backend("any", {}) == "any"
    assert startup.launcher_backend("ring", {"MLX_IBV_DEVICES": "/tmp/d"}) == "ring"


class FakeMx:
    """mx.distributed.init raising each of `errors` in turn (None: a group), clocked."""

    def __init__(self, errors, clock):
        self.errors, self.calls, self.clock = list(errors), [], clock
        self.distributed = self

    def init(self, strict, backend):
        self.calls.append((round(self.clock.now, 3), strict, backend))
        err = self.errors.pop(0) if self.errors else None
        if err:
            raise RuntimeError(err)
        return "group"


class Clock:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def _init(errors, deadline=600.0):
    clock, lines = Clock(), []
    mx = FakeMx(errors, clock)
    try:
        group = startup._init_with_backoff(
            mx, "jaccl", deadline, "rank 1 on studio-2", lines.append, sleep=clock.sleep, clock=clock
        )
        return group, None, mx, clock, lines
    except startup.InitError as err:
        return None, err, mx, clock, lines


def test_a_peer_that_starts_late_is_waited_for_spaced_and_then_joined():
    refused = f"[ring] Couldn't connect (error: {REFUSED})"
    group, err, mx, clock, lines = _init([refused, refused, refused, None])
    assert group == "group" and err is None
    assert clock.sleeps == [0.5, 1.0, 2.0]
    assert len(mx.calls) == 4 and all(c[1:] == (True, "jaccl") for c in mx.calls)
    assert "attempt 2 of 6" in lines[0] and "not listening yet" in lines[0]


def test_a_race_is_retried_a_bounded_number_of_times():
    refused = f"[jaccl] Couldn't connect (error: {REFUSED})"
    group, err, mx, clock, _lines = _init([refused] * 50)
    assert group is None and err.kind == "race"
    assert len(mx.calls) == startup.RACE_ATTEMPTS == 6
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert "rank 1 on studio-2" in str(err) and "ECONNREFUSED" in str(err)
    assert "check every host started" in str(err)


def test_a_race_never_waits_past_the_deadline():
    refused = f"[ring] Couldn't connect (error: {REFUSED})"
    group, err, mx, clock, _lines = _init([refused] * 50, deadline=2.0)
    assert err.kind == "race" and "deadline" in str(err)
    assert clock.now <= 2.0 and clock.sleeps == [0.5, 1.0, 0.5]


@pytest.mark.parametrize(
    "text",
    [
        "[jaccl] Changing queue pair to RTR failed with errno 110",
        "[jaccl] Could not open device rdma_en3",
        "Cannot initialize jaccl distributed backend.",
    ],
)
def test_an_rdma_failure_is_never_retried(text, tmp_path, monkeypatch):
    devices = tmp_path / "devices.json"
    devices.write_text(
        json.dumps([[None, "rdma_en2", "rdma_en3"], ["rdma_en2", None, "rdma_en4"], ["rdma_en3", "rdma_en4", None]])
    )
    monkeypatch.setenv("MLX_RANK", "0")
    monkeypatch.setenv("MLX_IBV_DEVICES", str(devices))
    group, err, mx, clock, _lines = _init([text] * 5)
    assert group is None and len(mx.calls) == 1 and clock.sleeps == []
    assert err.kind == "rdma"
    msg = str(err)
    assert msg.startswith("rank 1 on studio-2: RDMA could not be brought up (backend jaccl)") and text in msg
    assert "Not retried" in msg
    if "without JACCL" in msg:
        assert "macOS 26.2" in msg
    elif "rdma_en3" in text:  # MLX named the device: only that one
        assert "rdma_en3 (to rank 2)" in msg and "rdma_en2" not in msg.split(text)[1]
    else:
        assert "rdma_en2 (to rank 1), rdma_en3 (to rank 2)" in msg
    if "without JACCL" not in msg:
        assert "replug" in msg and "reboot this Mac" in msg and "rdma_ctl status" in msg


@pytest.mark.parametrize(
    "text, kind",
    [
        (f"[ring] Couldn't connect (error: {errno.EHOSTUNREACH})", "network"),
        ("[jaccl] Recv failed with errno=0", "peer"),
        ("[jaccl] The devices do not form a valid mesh.", "config"),
    ],
)
def test_other_failures_end_init_at_once_too(text, kind):
    group, err, mx, clock, _lines = _init([text] * 5)
    assert (err.kind, len(mx.calls), clock.sleeps) == (kind, 1, [])
    assert str(err).startswith("rank 1 on studio-2: distributed init (backend jaccl) failed: " + text)


def test_the_rdma_exit_code_is_one_fact_in_both_rooms():
    assert startup.EXIT_RDMA == RDMA_EXIT


def test_the_servers_supervisor_never_restarts_a_rank_whose_rdma_failed():
    action, why = daemon.decide(startup.EXIT_RDMA, 0, 3)
    assert action == "failed" and "RDMA" in why


# --- the controller's side -------------------------------------------------------------------

JACCL3 = {
    "backend": "jaccl",
    "envs": [],
    "hosts": [
        {"ssh": "m1", "ips": ["10.99.0.2"], "rdma": [None, "rdma_en2", "rdma_en3"]},
        {"ssh": "m2", "ips": ["10.99.0.3"], "rdma": ["rdma_en2", None, "rdma_en4"]},
        {"ssh": "m3", "ips": ["10.99.0.4"], "rdma": ["rdma_en5", "rdma_en3", None]},
    ],
}


def test_rank_cables_read_both_ends_from_the_hostfile():
    assert rank_cables(JACCL3, 2) == [
        {"device": "rdma_en5", "host": "m3", "port": "en5", "peer": "m1", "peer_port": "en3"},
        {"device": "rdma_en3", "host": "m3", "port": "en3", "peer": "m2", "peer_port": "en4"},
    ]


def test_an_rdma_failure_names_the_mac_and_its_cables_and_the_fix():
    failed = [
        {"rank": 1, "host": "m2", "code": RDMA_EXIT, "killed": False},
        {"rank": 0, "host": "m1", "code": None, "killed": True},
    ]
    got = rdma_failure(failed, JACCL3, "loading...\r\n")
    assert got["hosts"] == ["m2"]
    assert got["cables"] == ["m2:en2 <-> m1:en2", "m2:en4 <-> m3:en3"]
    assert "m2 (rank 1): cable(s) m2:en2 <-> m1:en2, m2:en4 <-> m3:en3" in got["msg"]
    for words in ("replug", "reboot", "rdma_ctl status", "Not retried"):
        assert words in got["msg"]


def test_the_device_mlx_named_narrows_the_cables():
    stdout = (
        "\x1b[31mrank 2 on studio-3: RDMA could not be brought up (backend jaccl): [jaccl] Could not "
        "open device rdma_en3. RDMA device(s) concerned: rdma_en3 (to rank 1). Not retried\r\n"
    )
    got = rdma_failure([{"rank": 2, "host": "m3", "code": RDMA_EXIT, "killed": False}], JACCL3, stdout)
    assert got["cables"] == ["m3:en3 <-> m2:en4"]
    assert got["ranks"][0]["reason"].startswith("rank 2 on studio-3: RDMA")


@pytest.mark.parametrize(
    "failed, hostfile",
    [
        pytest.param([{"rank": 1, "host": "m2", "code": 3, "killed": False}], JACCL3, id="another-failure"),
        pytest.param(
            [{"rank": 1, "host": "m2", "code": RDMA_EXIT, "killed": False}],
            {
                "backend": "ring",
                "hosts": [
                    {"ssh": "m1", "ips": ["10.208.0.1"], "rdma": []},
                    {"ssh": "m2", "ips": ["10.208.0.2"], "rdma": []},
                ],
            },
            id="ring-backend",
        ),
    ],
)
def test_other_failures_are_not_rdma_failures(failed, hostfile):
    assert rdma_failure(failed, hostfile) is None
