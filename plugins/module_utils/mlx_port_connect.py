# -*- coding: utf-8 -*-
"""The port probe's connecting side, once: a bounded connect that expects the probe's listener
(module_utils/mlx_ports.py LISTENER) to answer its token.

The same code runs two ways:
- in the module's own process (mlx.cluster.mlx_port_probe `state: connect`, over ssh):
  `connect_probe()` / `probe_all()`;
- as a program the ranks' interpreter runs as a launchd job, the way the server's ranks run
  (`launchd_user`): the module writes this file's own source beside the job's plist and the job
  runs ``python <this file> TARGETS.json RESULTS.json``: only the standard library, Python 3.9's
  syntax, no import of the collection.

So a connect that macOS refuses to a launchd-started interpreter (Local Network privacy) but
not to a process started over ssh is seen with the very code that sees the other failures.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor

# What the connecting side sends and what the listener answers: a connection that the Mac's
# kernel accepts but the firewall then resets (what the ALF does to an application it blocks,
# when not in stealth mode) never gets the answer, so "connected" alone is not success.
HELLO = b"mlx-port-probe "
ANSWER = b"mlx-port-probe-ok "

# errno names on both systems: macOS ETIMEDOUT 60, EHOSTUNREACH 65, ECONNREFUSED 61 (Linux 110,
# 113, 111): the names are what messages show.
UNREACHABLE = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.ENETDOWN, errno.EADDRNOTAVAIL}


def connect_probe(address, port, token, timeout, connect=socket.create_connection):
    """One bounded connect to address:port, HELLO token sent, ANSWER token awaited. ->
    {address, port, result, errno, error, seconds}; result: ok | timeout | refused | unreachable
    | reset (accepted, then reset before the listener answered) | no_answer (accepted, silent)
    | wrong_answer (something else answered)."""
    start = time.monotonic()
    out = {"address": address, "port": int(port), "result": "ok", "errno": None, "error": None}

    def done(result, exc=None):
        out["result"] = result
        if exc is not None and getattr(exc, "errno", None):
            out["errno"] = exc.errno
            out["error"] = errno.errorcode.get(exc.errno, str(exc.errno))
        elif exc is not None:
            out["error"] = "timeout" if isinstance(exc, socket.timeout) else type(exc).__name__
        out["seconds"] = round(time.monotonic() - start, 3)
        return out

    try:
        sock = connect((address, int(port)), timeout=timeout)
    except socket.timeout as exc:
        return done("timeout", exc)
    except ConnectionRefusedError as exc:
        return done("refused", exc)
    except OSError as exc:
        if exc.errno == errno.ETIMEDOUT:
            return done("timeout", exc)
        if exc.errno in UNREACHABLE:
            return done("unreachable", exc)
        if exc.errno in (errno.ECONNRESET, errno.ECONNABORTED):
            return done("reset", exc)
        return done("error", exc)
    try:
        sock.settimeout(max(timeout - (time.monotonic() - start), 1.0))
        sock.sendall(HELLO + token.encode())
        data = b""
        while len(data) < len(ANSWER) + len(token):
            chunk = sock.recv(256)
            if not chunk:
                break
            data += chunk
    except socket.timeout as exc:
        return done("no_answer", exc)
    except (ConnectionResetError, BrokenPipeError) as exc:
        return done("reset", exc)
    except OSError as exc:
        return done("reset" if exc.errno in (errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED) else "error", exc)
    finally:
        sock.close()
    if data == ANSWER + token.encode():
        return done("ok")
    if not data:
        return done("reset")  # closed without a byte: the listener never saw it
    return done("wrong_answer")


def probe_all(targets, token, timeout):
    """connect_probe() to every target ({host, address, port, role}) at once; -> one result per
    target, in order, with its host and role."""

    def probe(target):
        out = {"host": target.get("host"), "role": target.get("role")}
        out.update(connect_probe(str(target["address"]), int(target["port"]), token, timeout))
        return out

    with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        return list(pool.map(probe, targets))


def main(argv):
    """``python mlx_port_connect.py TARGETS.json RESULTS.json``: TARGETS.json holds {token,
    timeout, targets}; RESULTS.json is written once every connect has ended (a temporary file
    beside it, renamed into place: whoever waits for it never reads half of it), as {results,
    executable, pid}. Exit 0 once written, 2 on a bad command line."""
    if len(argv) != 2:
        sys.stderr.write("usage: mlx_port_connect.py TARGETS.json RESULTS.json\n")
        return 2
    with open(argv[0]) as f:
        job = json.load(f)
    results = probe_all(job["targets"], job["token"], job["timeout"])
    said = {"results": results, "executable": os.path.realpath(sys.executable), "pid": os.getpid()}
    tmp = argv[1] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(said, f)
    os.replace(tmp, argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
