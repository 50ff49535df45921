"""Distributed start-up shared by the programs mlx-cluster deploys to the Macs.

The benchmark (roles/benchmark), the collective check (roles/net_check) and the server
(roles/mlx_server) each run one rank per Mac under an MLX launcher; each role deploys this
file beside its program, which imports it by name (`import mlx_cluster_startup`: a script's
own directory is first on sys.path). This is its only copy: the roles' files/ directories
link here. Standard library only at import time; mlx is imported when a group is made, so
the server's supervisor (no mlx needed) can import LAUNCHER_ENV too.

- LAUNCHER_ENV: the variables the MLX launchers set (ring, jaccl, nccl, mpirun).
- init_distributed(): the global group of exactly the expected size, with a watchdog process
  that ends a rank stuck in init (a ring rank blocks in accept() holding the GIL). Only the
  failures that are races (a peer not listening yet, a port its previous run still holds) are
  retried, a bounded number of times, spaced; every other failure ends init at once
  (`init_failure_kind`): a failed RDMA link is never retried (repeated attempts can wedge it
  further). InitError says which rank, which host, what failed and the fix; for RDMA
  (`InitError.kind == "rdma"`, exit code EXIT_RDMA) it names this rank's RDMA devices and
  the peers they lead to, from the MLX_IBV_DEVICES file the launcher wrote.
- backend_name(): the backend that ran, for the results.
- stall_verdict(): the server's rule for a serving loop that stopped making progress, which
  the server's /health reports and its supervisor acts on (module_utils/mlx_server.py, the
  status view, runs on the Macs from Ansible's side and keeps its own copy;
  tests/unit/server/test_server_health.py holds the two to one table).
"""

import errno
import json
import os
import re
import socket
import subprocess
import sys
import time

# Variables the MLX launchers set (ring, jaccl, nccl, mpirun): without any of them nothing
# will ever join this process, so waiting for peers is pointless; and a program started by a
# supervisor must not inherit them from the shell that started it.
LAUNCHER_ENV = (
    "MLX_RANK",
    "MLX_HOSTFILE",
    "MLX_IBV_DEVICES",
    "MLX_JACCL_COORDINATOR",
    "MLX_JACCL_RING",
    "MLX_WORLD_SIZE",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
)

# Runs beside init: an accepting ring rank blocks in accept() holding the GIL, so no Python
# timer in this process can fire. Ends quietly when its stdin closes (init returned, or this
# process died); at the deadline it logs and sends SIGTERM.
_WATCHDOG = (
    "import os, select, signal, sys\n"
    "if not select.select([sys.stdin], [], [], float(sys.argv[2]))[0]:\n"
    "    sys.stderr.write(sys.argv[3] + '\\n'); sys.stderr.flush()\n"
    "    os.kill(int(sys.argv[1]), signal.SIGTERM)\n"
)


# The programs' exit code when RDMA could not be brought up: no retry helps, the TCP ring over
# the same cables may (mlx_launch's fallback_hostfile). Its copy on the controller's side is
# plugins/module_utils/mlx_launch.py RDMA_EXIT (tests/unit/module_utils/test_init_recovery.py
# holds the two equal).
EXIT_RDMA = 8

# A race (a peer not listening yet) is retried at most RACE_ATTEMPTS times in all, spaced
# RACE_FIRST_DELAY s doubling up to RACE_MAX_DELAY s (0.5+1+2+4+8 = 15.5 s of waiting, on top of
# MLX's own connect retries inside each attempt: the ring's 5 over 31 s, JACCL's side channel 4
# over 15 s), and never past the init deadline.
RACE_ATTEMPTS = 6
RACE_FIRST_DELAY = 0.5
RACE_MAX_DELAY = 8.0

# MLX's messages when RDMA cannot be brought up (mlx/distributed/jaccl/lib/jaccl/rdma.cpp,
# rdma.h and no_jaccl.cpp, MLX 0.31-0.32; read from the source, not seen on a Mac).
RDMA_TEXTS = (
    "Cannot initialize jaccl distributed backend",  # this mlx was built without JACCL
    "[jaccl] Could not open device",  # ibv_open_device failed
    "[jaccl] Could not find device",  # no such device (RDMA off: 0 available)
    "[jaccl] Couldn't allocate protection domain",
    "[jaccl] Couldn't create completion queue",
    "[jaccl] Couldn't create queue pair",  # 0.31
    "[jaccl] Creating the queue pair failed",  # 0.32
    "[jaccl] No IPv4-mapped GID",  # the port has no IPv4 address (yet)
    "[jaccl] Changing queue pair to",  # INIT, RTR or RTS refused
    "[jaccl] Register memory region failed",
    "[jaccl] Send failed with error code",  # ibv_post_send
    "[jaccl] Recv failed with error code",  # ibv_post_recv
)
# MLX's TCP messages (mlx/distributed/utils.cpp, jaccl/lib/jaccl/tcp.cpp): the ring's sockets
# and JACCL's side channel to the coordinator (rank 0).
_SOCKET = re.compile(
    r"\[(ring|jaccl)\] (Couldn't connect|Couldn't bind socket|Couldn't listen|"
    r"Accept failed) \(error: (\d+)\)"
)
_PEER_LOST = re.compile(r"\[(ring|jaccl)\] (Send|Recv) failed with errno=(\d+)")
_DEVICE = re.compile(r"device (rdma_\S+)")


class InitError(Exception):
    """Distributed init failed or gave the wrong world size; the message says where and why.
    `kind`: "rdma" (RDMA could not be brought up), "race" (peers still not listening after the
    retries), "network", "peer", "config" or "init" (init_failure_kind)."""

    def __init__(self, message, kind="init"):
        super().__init__(message)
        self.kind = kind


def init_failure_kind(text):
    """What a failed mx.distributed.init says, by MLX's message: "race" (retry: a peer is not
    listening yet, or the port is still held by a run that is ending), "rdma", "network" (an
    address that is not reachable or not on this Mac), "peer" (a peer hung up during init) or
    "config" (anything else: the launcher's environment or hostfile)."""
    text = str(text)
    if any(t in text for t in RDMA_TEXTS):
        return "rdma"
    m = _SOCKET.search(text)
    if m:
        code = int(m.group(3))
        if m.group(2) == "Couldn't connect":
            return "race" if code == errno.ECONNREFUSED else "network"
        if m.group(2) == "Couldn't bind socket":
            return "race" if code == errno.EADDRINUSE else "network"
        return "network"
    if _PEER_LOST.search(text):
        return "peer"
    return "config"


def rdma_devices(rank, path):
    """[(device, peer rank)] of this rank's row of the MLX_IBV_DEVICES file; [] if unreadable."""
    try:
        with open(path) as f:
            row = json.load(f)[int(rank)]
    except (OSError, ValueError, TypeError, IndexError, KeyError):
        return []
    out = []
    for peer, names in enumerate(row if isinstance(row, list) else []):
        for name in [names] if isinstance(names, str) else names if isinstance(names, list) else []:
            if isinstance(name, str) and name:
                out.append((name, peer))
    return out


def _errno_name(text):
    m = _SOCKET.search(text) or _PEER_LOST.search(text)
    if not m:
        return ""
    code = int(m.group(3))
    return f" ({errno.errorcode.get(code, code)}: {os.strerror(code)})"


def failure_message(kind, who, backend, err, env=None):
    """The InitError text for a failure that is not retried: what failed and the fix."""
    env = os.environ if env is None else env
    text = str(err).strip().rstrip(".")
    head = f"{who}: distributed init (backend {backend}) failed: {text}{_errno_name(text)}"
    if kind == "rdma":
        if "Cannot initialize jaccl" in text:
            return (
                f"{who}: RDMA could not be brought up (backend {backend}): {text}. This Mac's mlx "
                "was built without JACCL (RDMA needs macOS 26.2+ and an mlx built for it). Not "
                "retried. Fix: update this Mac to macOS 26.2 or later and reinstall mlx (the env "
                "stage), or run on the ring backend (mlx_cluster_fallback_backend: ring)"
            )
        devices = rdma_devices(env.get("MLX_RANK", "?"), env.get("MLX_IBV_DEVICES", ""))
        named = _DEVICE.search(text)
        suspects = [d for d in devices if named and d[0] == named.group(1)] or devices
        listed = ", ".join(f"{d} (to rank {p})" for d, p in suspects) or "unknown (no MLX_IBV_DEVICES)"
        return (
            f"{who}: RDMA could not be brought up (backend {backend}): {text}. RDMA device(s) "
            f"concerned: {listed}. Not retried: a failed RDMA link is not a race, and repeated "
            "attempts can wedge it further. Fix: replug the Thunderbolt cable of each device "
            "named (both ends); if that does not help, reboot this Mac; check `rdma_ctl status` "
            "(enabled) and `ibv_devinfo` (PORT_ACTIVE) on it"
        )
    if kind == "network":
        return (
            f"{head}. Not retried: the address is not reachable from this Mac, or not one of its "
            "own. Fix: check the cable and its addresses (run the network stage), and that no "
            "firewall, VPN or Local Network privacy setting blocks the port"
        )
    if kind == "peer":
        return f"{head}. A peer ended during init: its own error (in its rank's output) says why"
    if kind == "race":
        return (
            f"{head}. Still not listening after {RACE_ATTEMPTS} attempts: a peer is not running "
            "or not reachable; check every host started and the addresses in the hostfile"
        )
    return f"{head}. Fix: check the hostfile and the launcher (mlx.launch --hostfile)"


def launcher_backend(requested, env=None):
    """The backend to init: "any" becomes the one the launcher set up (MLX_IBV_DEVICES: jaccl,
    MLX_HOSTFILE: ring), so MLX tries that one only (its "any" tries ring, then mpi, then jaccl,
    and swallows jaccl's error)."""
    env = os.environ if env is None else env
    if requested != "any":
        return requested
    if "MLX_IBV_DEVICES" in env:
        return "jaccl"
    if "MLX_HOSTFILE" in env and "MLX_RANK" in env:
        return "ring"
    return requested


def _stderr(msg):
    print(msg, file=sys.stderr, flush=True)


def init_distributed(backend, expect_world, timeout, log=_stderr):
    """The global group of exactly `expect_world` ranks, or InitError naming rank and host.
    `log` takes one line (the program's own logger, with its rank prefix)."""
    import mlx.core as mx

    rank = os.environ.get("MLX_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "?"))
    who = f"rank {rank} on {socket.gethostname()}"
    backend = launcher_backend(backend)
    if expect_world <= 1:
        group = mx.distributed.init(backend=backend)
    elif not any(v in os.environ for v in LAUNCHER_ENV):
        raise InitError(
            f"{who}: --expect-world {expect_world} but no distributed launcher started this "
            f"process (none of {', '.join(LAUNCHER_ENV)} is set); refusing to run as a "
            "single rank: start it on every host with mlx.launch"
        )
    else:
        msg = (
            f"{who}: distributed init (backend {backend}) did not complete in {timeout:g}s; "
            "a peer is not running or not reachable: check every host started and the "
            "addresses in the hostfile"
        )
        watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(timeout + 1), msg],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
        )
        try:
            group = _init_with_backoff(mx, backend, time.monotonic() + timeout, who, log)
        finally:
            watchdog.stdin.close()
            watchdog.wait()
    if group.size() != expect_world:
        raise InitError(
            f"{who}: distributed init (backend {backend}) gave {group.size()} rank(s), "
            f"expected {expect_world}; refusing to run as a silent fallback: check the "
            "hostfile and the launcher"
        )
    return group


def _init_with_backoff(mx, backend, deadline, who, log, sleep=time.sleep, clock=time.monotonic):
    """mx.distributed.init, retried only for races: at most RACE_ATTEMPTS attempts, spaced
    (doubling from RACE_FIRST_DELAY to RACE_MAX_DELAY s), never past `deadline`. Any other
    failure raises InitError at once, of the failure's kind."""
    attempt, delay = 1, RACE_FIRST_DELAY
    while True:
        try:
            return mx.distributed.init(strict=True, backend=backend)
        except RuntimeError as err:
            kind = init_failure_kind(err)
            left = deadline - clock()
            if kind != "race" or attempt >= RACE_ATTEMPTS:
                raise InitError(failure_message(kind, who, backend, err), kind) from err
            if left <= 0:
                raise InitError(
                    f"{who}: distributed init (backend {backend}) failed until the "
                    f"deadline ({attempt} attempt(s)): {err}{_errno_name(str(err))}: a "
                    "peer is not running or not reachable: check every host started and "
                    "the addresses in the hostfile",
                    kind,
                ) from err
            wait = min(delay, left)
            log(
                f"distributed init: a peer is not listening yet ({err}); attempt {attempt + 1} of "
                f"{RACE_ATTEMPTS} in {wait:.1f}s"
            )
            sleep(wait)
            attempt, delay = attempt + 1, min(delay * 2, RACE_MAX_DELAY)


def backend_name(requested, size):
    """What ran: init(backend="any") tries ring, then mpi, then jaccl, by the launcher's env."""
    if size == 1:
        return "none"
    if requested != "any":
        return requested
    env = os.environ
    if "MLX_HOSTFILE" in env and "MLX_RANK" in env:
        return "ring"
    if "OMPI_COMM_WORLD_SIZE" in env or "PMI_SIZE" in env:
        return "mpi"
    return "jaccl" if "MLX_IBV_DEVICES" in env else "any"


def stall_verdict(progress, now_mono):
    """Why a ready rank's serving loop counts as stalled ("" = it does not): no turn and no
    token for progress["stall_timeout"] seconds (0 = never)."""
    bound = float(progress.get("stall_timeout") or 0)
    mono = progress.get("progress_mono")
    if bound <= 0 or mono is None:
        return ""
    idle = now_mono - float(mono)
    if idle <= bound:
        return ""
    if progress.get("generating"):
        return (
            f"generation stalled: no token for {idle:.0f}s (bound {bound:g}s) with a request in "
            f"flight ({progress.get('tokens', 0)} token(s) so far)"
        )
    return f"serving loop stalled: no turn for {idle:.0f}s (bound {bound:g}s) while idle"
