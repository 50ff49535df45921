"""Distributed start-up shared by the programs mlx-cluster deploys to the Macs.

The benchmark (roles/benchmark), the collective check (roles/net_check) and the server
(roles/mlx_server) each run one rank per Mac under an MLX launcher; each role deploys this
file beside its program, which imports it by name (`import mlx_cluster_startup`: a script's
own directory is first on sys.path). This is its only copy: the roles' files/ directories
link here. Standard library only at import time; mlx is imported when a group is made, so
the server's supervisor (no mlx needed) can import LAUNCHER_ENV too.

- LAUNCHER_ENV: the variables the MLX launchers set (ring, jaccl, nccl, mpirun).
- init_distributed(): the global group of exactly the expected size, retried with backoff
  until a deadline (ranks start out of order), with a watchdog process that ends a rank
  stuck in init (a ring rank blocks in accept() holding the GIL); InitError says which rank,
  which host and what to check.
- backend_name(): the backend that ran, for the results.
- stall_verdict(): the server's rule for a serving loop that stopped making progress, which
  the server's /health reports and its supervisor acts on (module_utils/mlx_server.py, the
  status view, runs on the Macs from Ansible's side and keeps its own copy;
  tests/unit/server/test_server_health.py holds the two to one table).
"""

import os
import socket
import subprocess
import sys
import time

# Variables the MLX launchers set (ring, jaccl, nccl, mpirun): without any of them nothing
# will ever join this process, so waiting for peers is pointless; and a program started by a
# supervisor must not inherit them from the shell that started it.
LAUNCHER_ENV = ("MLX_RANK", "MLX_HOSTFILE", "MLX_IBV_DEVICES", "MLX_JACCL_COORDINATOR",
                "MLX_JACCL_RING", "MLX_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")

# Runs beside init: an accepting ring rank blocks in accept() holding the GIL, so no Python
# timer in this process can fire. Ends quietly when its stdin closes (init returned, or this
# process died); at the deadline it logs and sends SIGTERM.
_WATCHDOG = (
    "import os, select, signal, sys\n"
    "if not select.select([sys.stdin], [], [], float(sys.argv[2]))[0]:\n"
    "    sys.stderr.write(sys.argv[3] + '\\n'); sys.stderr.flush()\n"
    "    os.kill(int(sys.argv[1]), signal.SIGTERM)\n"
)


class InitError(Exception):
    """Distributed init failed or gave the wrong world size; the message says where and why."""


def _stderr(msg):
    print(msg, file=sys.stderr, flush=True)


def init_distributed(backend, expect_world, timeout, log=_stderr):
    """The global group of exactly `expect_world` ranks, or InitError naming rank and host.
    `log` takes one line (the program's own logger, with its rank prefix)."""
    import mlx.core as mx

    rank = os.environ.get("MLX_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "?"))
    who = f"rank {rank} on {socket.gethostname()}"
    if expect_world <= 1:
        group = mx.distributed.init(backend=backend)
    elif not any(v in os.environ for v in LAUNCHER_ENV):
        raise InitError(
            f"{who}: --expect-world {expect_world} but no distributed launcher started this "
            f"process (none of {', '.join(LAUNCHER_ENV)} is set); refusing to run as a "
            "single rank: start it on every host with mlx.launch")
    else:
        msg = (f"{who}: distributed init (backend {backend}) did not complete in {timeout:g}s; "
               "a peer is not running or not reachable: check every host started and the "
               "addresses in the hostfile")
        watchdog = subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(os.getpid()),
                                     str(timeout + 1), msg], stdin=subprocess.PIPE,
                                    stdout=subprocess.DEVNULL)
        try:
            group = _init_with_backoff(mx, backend, time.monotonic() + timeout, who, log)
        finally:
            watchdog.stdin.close()
            watchdog.wait()
    if group.size() != expect_world:
        raise InitError(
            f"{who}: distributed init (backend {backend}) gave {group.size()} rank(s), "
            f"expected {expect_world}; refusing to run as a silent fallback: check the "
            "hostfile and the launcher")
    return group


def _init_with_backoff(mx, backend, deadline, who, log):
    delay = 0.5
    while True:
        try:
            return mx.distributed.init(strict=True, backend=backend)
        except RuntimeError as err:
            left = deadline - time.monotonic()
            if left <= 0:
                raise InitError(f"{who}: distributed init (backend {backend}) failed until "
                                f"the deadline: {err}") from err
            log(f"distributed init failed ({err}); retrying in {min(delay, left):.1f}s")
            time.sleep(min(delay, left))
            delay = min(delay * 2, 8.0)


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
        return (f"generation stalled: no token for {idle:.0f}s (bound {bound:g}s) with a request in "
                f"flight ({progress.get('tokens', 0)} token(s) so far)")
    return f"serving loop stalled: no turn for {idle:.0f}s (bound {bound:g}s) while idle"
