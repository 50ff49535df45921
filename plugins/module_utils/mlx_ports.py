# -*- coding: utf-8 -*-
"""The TCP ports MLX's ranks listen on, a short-lived listener for them, a bounded connect, and
what the macOS application firewall (ALF) says: the pure half of mlx.cluster.mlx_port_probe.

Which ports (MLX's sources, mlx 0.32):
- ring: `mlx.launch` gives rank r the addresses ``ips`` of its hostfile entry, each with a
  port counted from ``--starting-port`` (default 32323), one more per rank and address, in
  rank order (launch.py launch_ring). Rank r listens on each of its own ``address:port``
  (ring.cpp accept_connections, bound to that address) and rank r-1 connects to them
  (ring.cpp: every rank connects to ``nodes[rank + 1]``). The toolkit's hostfile gives each
  rank its addresses on the cables to its left neighbour (plan_hostfile.hostfile), so each of those
  connections crosses one cable.
- jaccl / jaccl-ring: rank 0 listens on ``MLX_JACCL_COORDINATOR`` = its hostfile ``ips[0]`` and
  the starting port (launch.py launch_jaccl; jaccl rdma.cpp TCPAllGather: rank 0 listens,
  every other rank connects, 4 attempts).

`endpoints(hostfile, port)` lists them; `LISTENER` is the program the ranks' own interpreter runs
as the listener (the ALF judges per application, so only that interpreter's listener says what
the ranks will meet); the connecting side is module_utils/mlx_port_connect.py (run in-process
over ssh, or by the ranks' interpreter as a launchd job); `parse_alf()` reads
``socketfilterfw``'s answers.
"""

from __future__ import annotations

import os

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_launch import BACKENDS, STARTING_PORT

ALF_DIR = "/usr/libexec/ApplicationFirewall"
SOCKETFILTERFW = ALF_DIR + "/socketfilterfw"
# One socketfilterfw run answers several getters, one line each (public captures, e.g.
# `--getglobalstate --getblockall --getallowsigned --getstealthmode`).
ALF_GETTERS = ("--getglobalstate", "--getblockall", "--getstealthmode", "--getallowsigned")


def endpoints(hostfile, starting_port=STARTING_PORT):
    """-> [{host, rank, address, port, role, peers: [host]}]: every address:port a rank of this
    hostfile listens on, with the hosts whose ranks connect to it. Raises ValueError on a
    hostfile that names no backend the toolkit launches."""
    if not isinstance(hostfile, dict) or not isinstance(hostfile.get("hosts"), list):
        raise ValueError("expected an MLX hostfile ({backend, hosts: [{ssh, ips, rdma}]})")
    backend = hostfile.get("backend")
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: the port check knows {', '.join(BACKENDS)}")
    port = int(starting_port)
    if not 0 < port < 65536:
        raise ValueError(f"port {port} is not a TCP port")
    hosts = hostfile["hosts"]
    names = []
    for i, h in enumerate(hosts):
        if not isinstance(h, dict) or not isinstance(h.get("ssh"), str) or not isinstance(h.get("ips") or [], list):
            raise ValueError(f"hostfile entry {i} has no 'ssh' name or its 'ips' is not a list")
        names.append(h["ssh"])
    n = len(hosts)
    if n < 2:
        return []  # one rank: mlx.launch starts no ring and no coordinator
    out = []
    if backend == "ring":
        for rank, h in enumerate(hosts):
            for address in h.get("ips") or []:
                out.append(
                    {
                        "host": names[rank],
                        "rank": rank,
                        "address": str(address),
                        "port": port,
                        "role": "ring",
                        "peers": [names[rank - 1]],
                    }
                )
                port += 1
        return out
    ips = hosts[0].get("ips") or []
    if not ips:
        raise ValueError(f"{backend} needs rank 0's coordinator address ('ips') in the hostfile")
    return [
        {"host": names[0], "rank": 0, "address": str(ips[0]), "port": port, "role": "coordinator", "peers": names[1:]}
    ]


def merged_endpoints(hostfiles, starting_port=STARTING_PORT):
    """endpoints() of several hostfiles that may be launched in one run (the plan's, then the
    ring it falls back to when RDMA cannot come up), each address:port of a host once: a second
    hostfile that listens where the first does adds its connecting hosts to that endpoint."""
    out, seen = [], {}
    for hostfile in hostfiles:
        for e in endpoints(hostfile, starting_port):
            key = (e["host"], e["address"], e["port"])
            if key in seen:
                seen[key]["peers"] += [p for p in e["peers"] if p not in seen[key]["peers"]]
                continue
            seen[key] = dict(e, peers=list(e["peers"]))
            out.append(seen[key])
    return out


def listens(endpoint_list, host):
    """The [address, port] pairs `host` listens on."""
    return [[e["address"], e["port"]] for e in endpoint_list if e["host"] == host]


def targets(endpoint_list, host):
    """The endpoints `host` connects to: [{host, address, port, role}]."""
    return [
        {"host": e["host"], "address": e["address"], "port": e["port"], "role": e["role"]}
        for e in endpoint_list
        if host in e["peers"]
    ]


# ---------------------------------------------------------------------------------------------
# the listener (run by the ranks' interpreter, detached, bounded by its deadline)
# ---------------------------------------------------------------------------------------------

# argv: python - --run-id RUN_ID DEADLINE ADDRESS:PORT... (the program on its standard input)
# It binds every ADDRESS:PORT (SO_REUSEADDR only: a port another socket listens on, such as a
# rank left from an earlier run, which MLX's SO_REUSEPORT would silently share, fails with
# EADDRINUSE), prints one JSON line ({"executable", "bound", "errors"}) and closes its standard
# output, then answers HELLO <token> with ANSWER <token> (module_utils/mlx_port_connect.py's)
# until DEADLINE seconds have passed.
LISTENER = r"""
import errno, json, os, select, socket, sys, time
deadline = time.monotonic() + float(sys.argv[3])
socks, bound, errors = [], [], []
for item in sys.argv[4:]:
    address, _, port = item.rpartition(":")
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((address, int(port)))
        s.listen(16)
    except OSError as exc:
        s.close()
        errors.append({"address": address, "port": int(port), "errno": exc.errno,
                       "error": errno.errorcode.get(exc.errno, str(exc.errno)), "text": exc.strerror})
        continue
    socks.append(s)
    bound.append([address, int(port)])
sys.stdout.write(json.dumps({"executable": os.path.realpath(sys.executable), "pid": os.getpid(),
                             "bound": bound, "errors": errors}) + "\n")
sys.stdout.flush()
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 1)
while socks:
    left = deadline - time.monotonic()
    if left <= 0:
        break
    ready = select.select(socks, [], [], min(left, 1.0))[0]
    for s in ready:
        try:
            conn = s.accept()[0]
        except OSError:
            continue
        try:
            conn.settimeout(2)
            data = conn.recv(256)
            if data.startswith(b"mlx-port-probe "):
                conn.sendall(b"mlx-port-probe-ok " + data[len(b"mlx-port-probe "):])
        except OSError:
            pass
        finally:
            conn.close()
"""


def listener_argv(python, run_id, deadline, pairs):
    """The listener's argv; its program (LISTENER) goes to its standard input, so `ps` shows a
    short line in which cleanup (mlx_run_cleanup) finds `run_id`."""
    return [python, "-", "--run-id", run_id, str(deadline)] + [f"{a}:{p}" for a, p in pairs]


def app_bundle(executable):
    """The application the ALF sees for an interpreter: a framework build of Python (python.org,
    Homebrew) runs .../Python.framework/Versions/X.Y/Resources/Python.app, whatever bin/ link
    started it; anything else is itself."""
    path = str(executable or "")
    marker = "/Python.framework/Versions/"
    i = path.find(marker)
    if i < 0:
        return path
    rest = path[i + len(marker) :].split("/", 1)[0]
    return path[:i] + marker + rest + "/Resources/Python.app"


# ---------------------------------------------------------------------------------------------
# socketfilterfw
# ---------------------------------------------------------------------------------------------


def parse_alf(text):
    """socketfilterfw's getter lines -> {enabled, state, block_all, stealth, allow_signed,
    allow_signed_downloaded} (None for what the text does not say).

    Texts (public captures, macOS 14 to 26): ``Firewall is enabled. (State = 1)`` /
    ``Firewall is disabled. (State = 0)`` (State 2: block all, older macOS);
    ``Firewall has block all state set to enabled.`` (older: ``Block all ENABLED!`` /
    ``Block all DISABLED!``); ``Firewall stealth mode is on`` / ``... off`` (older: ``Stealth
    mode enabled`` / ``disabled``); ``Automatically allow built-in signed software ENABLED.``,
    ``Automatically allow downloaded signed software DISABLED.`` (older: one line, ``Automatically
    allow signed software ENABLED.``)."""
    out = {
        "enabled": None,
        "state": None,
        "block_all": None,
        "stealth": None,
        "allow_signed": None,
        "allow_signed_downloaded": None,
    }
    for raw in (text or "").splitlines():
        line = raw.strip()
        low = line.lower()
        if (
            low.startswith("firewall is enabled")
            or low.startswith("firewall is disabled")
            or low.startswith("firewall is blocking")
        ):
            out["enabled"] = not low.startswith("firewall is disabled")
            if "state = " in low:
                digits = low.split("state = ", 1)[1].strip(" )")
                if digits.isdigit():
                    out["state"] = int(digits)
                    out["enabled"] = out["state"] > 0
                    if out["state"] == 2:
                        out["block_all"] = True
        elif low.startswith("firewall has block all state set to"):
            out["block_all"] = low.rstrip(".").endswith("enabled")
        elif low.startswith("block all "):
            out["block_all"] = "enabled" in low and "disabled" not in low
        elif low.startswith("firewall stealth mode is"):
            out["stealth"] = low.endswith(" on")
        elif low.startswith("stealth mode "):
            out["stealth"] = "enabled" in low and "disabled" not in low
        elif (
            low.startswith("automatically allow built-in signed software")
            or low.startswith("automatically allow signed built-in software")
            or low.startswith("automatically allow signed software")
        ):
            out["allow_signed"] = "enabled" in low
        elif low.startswith("automatically allow downloaded signed software"):
            out["allow_signed_downloaded"] = "enabled" in low
    return out


def parse_app_blocked(text):
    """``socketfilterfw --getappblocked <path>`` -> "blocked" | "permitted" | "not_listed" | None.

    Texts: ``Incoming connection to <path> is blocked`` / ``... is permitted`` (recent macOS);
    ``Application at path ( <path> ) is blocked from accepting incoming connections.`` / ``is not
    blocked ...`` (older); ``The application is not part of the firewall`` (never added)."""
    low = (text or "").lower()
    if "not part of the firewall" in low:
        return "not_listed"
    if "is not blocked" in low or "is permitted" in low:
        return "permitted"
    if "is blocked" in low:
        return "blocked"
    return None


def alf_summary(alf):
    """One line for a report: "on (block all, stealth, signed downloads allowed, interpreter
    blocked)", "off", "unknown"."""
    if not alf or alf.get("enabled") is None:
        return "unknown"
    if not alf["enabled"]:
        return "off"
    extra = [
        w
        for w, k in (
            ("block all", "block_all"),
            ("stealth", "stealth"),
            ("signed downloads allowed", "allow_signed_downloaded"),
        )
        if alf.get(k)
    ]
    app = alf.get("app")
    if app:
        extra.append("interpreter %s" % app.replace("_", " "))
    return "on" + (" (%s)" % ", ".join(extra) if extra else "")


def resolve(path):
    """The interpreter's real path (a venv's bin/python is a link to its base interpreter)."""
    return os.path.realpath(os.path.expanduser(str(path)))
