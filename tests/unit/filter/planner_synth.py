"""Synthetic wirings for the planner tests (and bench/planner.py).

One wiring description gives:
- the `mlx_thunderbolt` facts of every host (what our planner reads), and
- the `system_profiler SPThunderboltDataType -json` and `networksetup -listallhardwareports`
  output of every host, fed to MLX's own `extract_connectivity` through a fake `run`, so
  the differential tests compare against MLX's real parsing, not a re-implementation.

A cable is `cable("m1", "en2", "m2", "en3", speed=80, via=(), seen_by="both")`;
`seen_by="a"` or `"b"` makes it one-sided (only that end sees the peer, through `via`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections import Counter
from types import SimpleNamespace
from unittest import mock

from hypothesis import strategies as st


def tb_uuid(host, iface):
    """A stable, uppercase, UUID-shaped Thunderbolt domain id for host:iface."""
    h = hashlib.sha1(("%s/%s" % (host, iface)).encode()).hexdigest().upper()
    return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:32])


def cable(h1, i1, h2, i2, speed=80, via=(), seen_by="both", speed_b=None):
    return {
        "a": (h1, i1),
        "b": (h2, i2),
        "speed": speed,
        "speed_b": speed if speed_b is None else speed_b,
        "via": list(via),
        "seen_by": seen_by,
    }


def _iface_key(iface):
    m = re.match(r"^(\D*)(\d+)$", iface or "")
    return (m.group(1), int(m.group(2))) if m else (iface or "", 0)


def port(iface, receptacle, uuid, peer=None, speed=None, status=None):
    return {
        "receptacle": receptacle,
        "bus": "Thunderbolt/USB4 Bus %d" % (receptacle - 1),
        "domain_uuid": uuid,
        "hardware_port": "Thunderbolt %d" % receptacle,
        "iface": iface,
        "status": status or ("connected" if peer or speed else "empty"),
        "speed_gbps": speed,
        "capability_gbps": None if speed else 120,
        "link_class": None if not speed else ("TB5" if speed > 40 else "TB4" if speed == 40 else "TB3"),
        "peer": peer,
        "devices": [],
    }


def make_facts(hosts, cables=(), empty_ports=None, model="Mac Studio"):
    """{host: mlx_thunderbolt facts} for the given cables (and extra empty ports per host)."""
    ends = {h: {} for h in hosts}
    for c in cables:
        (ha, ia), (hb, ib) = c["a"], c["b"]
        ends.setdefault(ha, {})[ia] = (c, "a")
        ends.setdefault(hb, {})[ib] = (c, "b")
    for h, ifaces in (empty_ports or {}).items():
        for iface in ifaces:
            ends.setdefault(h, {}).setdefault(iface, None)
    facts = {}
    for h in hosts:
        ports = []
        for r, iface in enumerate(sorted(ends.get(h, {}), key=_iface_key), start=1):
            entry = ends[h][iface]
            if entry is None:
                ports.append(port(iface, r, tb_uuid(h, iface)))
                continue
            c, side = entry
            other = "b" if side == "a" else "a"
            oh, oi = c[other]
            speed = c["speed"] if side == "a" else c["speed_b"]
            sees = c["seen_by"] in ("both", side)
            peer = None
            if sees:
                via = c["via"] if side == "a" else list(reversed(c["via"]))
                peer = {"domain_uuid": tb_uuid(oh, oi), "name": model, "model_id": "Mac16,9", "via": list(via)}
            ports.append(port(iface, r, tb_uuid(h, iface), peer=peer, speed=speed, status="connected"))
        facts[h] = {
            "mac": {"model": model, "model_id": "Mac16,9", "name": model},
            "ports": ports,
            "hardware_ports": {p["hardware_port"]: p["iface"] for p in ports},
            "bridge": {"exists": True, "members": [], "service": "Thunderbolt Bridge", "service_enabled": False},
            "warnings": [],
        }
    return facts


def find_port(facts, host, iface):
    for p in facts[host]["ports"]:
        if p["iface"] == iface:
            return p
    raise KeyError("%s:%s" % (host, iface))


# ---------------------------------------------------------------------------------------------
# MLX side: the same facts as system_profiler / networksetup output, parsed by MLX itself
# ---------------------------------------------------------------------------------------------


def system_profiler_json(tb):
    buses = []
    for p in tb["ports"]:
        bus = {
            "_name": "thunderbolt_bus_%d" % (p["receptacle"] - 1),
            "device_name_key": tb["mac"]["name"],
            "domain_uuid_key": p["domain_uuid"],
            "receptacle_1_tag": {
                "receptacle_id_key": str(p["receptacle"]),
                "receptacle_status_key": "receptacle_connected" if p["peer"] else "receptacle_no_devices",
            },
        }
        peer = p["peer"]
        if peer:
            item = {
                "_name": peer["name"],
                "device_name_key": peer["name"],
                "domain_uuid_key": peer["domain_uuid"],
                "vendor_name_key": "Apple Inc.",
            }
            for hub in reversed(peer.get("via") or []):
                item = {"_name": hub, "vendor_name_key": "Hub Vendor", "_items": [item]}
            bus["_items"] = [item]
        buses.append(bus)
    return {"SPThunderboltDataType": buses}


def networksetup_text(tb):
    lines = ["", "Hardware Port: Ethernet", "Device: en0", "Ethernet Address: 00:00:00:00:00:00", ""]
    for p in tb["ports"]:
        if p["iface"]:
            lines += [
                "Hardware Port: %s" % p["hardware_port"],
                "Device: %s" % p["iface"],
                "Ethernet Address: 36:00:00:00:00:0%d" % p["receptacle"],
                "",
            ]
    lines += ["Hardware Port: Thunderbolt Bridge", "Device: bridge0", "Ethernet Address: N/A", ""]
    return "\n".join(lines) + "\n"


def mlx_config():
    from mlx._distributed_utils import config

    return config


def mlx_connectivity(facts_by_host, hosts):
    """Run MLX's extract_connectivity on our facts turned into command output."""
    config = mlx_config()
    sp = {h: json.dumps(system_profiler_json(facts_by_host[h])) for h in hosts}
    ns = {h: networksetup_text(facts_by_host[h]) for h in hosts}

    def fake_run(argv, capture_output=False, text=False, **kwargs):
        host, command = argv[1], argv[2]
        out = sp[host] if command == "system_profiler" else ns[host]
        return SimpleNamespace(stdout=out if text else out.encode(), returncode=0, stderr=b"")

    with mock.patch.object(config, "run", fake_run):
        return config.extract_connectivity([SimpleNamespace(ssh_hostname=h) for h in hosts], False)


# ---------------------------------------------------------------------------------------------
# graphs
# ---------------------------------------------------------------------------------------------


def weights(hosts, cables):
    idx = {h: i for i, h in enumerate(hosts)}
    n = len(hosts)
    w = [[0] * n for _ in range(n)]
    for c in cables:
        i, j = idx[c["a"][0]], idx[c["b"][0]]
        w[i][j] += 1
        w[j][i] += 1
    return w


def brute_ring(w):
    """(best bottleneck width, lexicographically smallest canonical best cycle) by brute force."""
    n = len(w)
    best_w, best = 0, None
    for perm in itertools.permutations(range(1, n)):
        if n > 2 and perm[0] > perm[-1]:
            continue
        cyc = (0,) + perm
        width = min(w[cyc[i]][cyc[(i + 1) % n]] for i in range(n))
        if width > best_w or (width == best_w and width > 0 and cyc < best):
            best_w, best = width, cyc
    return best_w, (list(best) if best else None)


def brute_mesh(w):
    n = len(w)
    return all(w[i][j] for i in range(n) for j in range(n) if i != j)


def ring_cables(n, prefix="r", per_hop=1):
    hosts = ["%s%02d" % (prefix, i) for i in range(n)]
    cables = []
    for i in range(n):
        j = (i + 1) % n
        for k in range(per_hop):
            cables.append(cable(hosts[i], "en%d" % (2 + k), hosts[j], "en%d" % (2 + per_hop + k)))
    return hosts, cables


def mesh_cables(n, prefix="m"):
    hosts = ["%s%02d" % (prefix, i) for i in range(n)]
    cables = []
    for i, j in itertools.combinations(range(n), 2):
        cables.append(cable(hosts[i], "en%d" % (2 + j), hosts[j], "en%d" % (2 + i)))
    return hosts, cables


def torus_cables(rows, cols, prefix="t"):
    hosts = ["%s%02d_%02d" % (prefix, r, c) for r in range(rows) for c in range(cols)]
    name = lambda r, c: hosts[(r % rows) * cols + (c % cols)]  # noqa: E731
    cables, seen = [], set()
    for r in range(rows):
        for c in range(cols):
            for dr, dc, mine, theirs in ((0, 1, "en2", "en3"), (1, 0, "en4", "en5")):
                a, b = name(r, c), name(r + dr, c + dc)
                key = frozenset(((a, mine), (b, theirs)))
                if a == b or key in seen:
                    continue
                seen.add(key)
                cables.append(cable(a, mine, b, theirs))
    return hosts, cables


# ---------------------------------------------------------------------------------------------
# hypothesis
# ---------------------------------------------------------------------------------------------

HOST_NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,5}", fullmatch=True)
SPEEDS = st.sampled_from([80, 80, 120, 40, 20, None])


@st.composite
def wirings(draw, min_hosts=2, max_hosts=10, max_cables=20, one_sided=False):
    """(hosts, cables): a random multigraph with random iface names, no self-loops.

    Half of the draws start from a random ring with 1-3 cables per hop (so rings of every
    width are common), the rest are plain random multigraphs (mostly without a ring).
    """
    n = draw(st.integers(min_hosts, max_hosts))
    hosts = draw(st.lists(HOST_NAMES, min_size=n, max_size=n, unique=True))
    pair = st.tuples(st.integers(0, n - 1), st.integers(1, n - 1)).map(lambda t: (t[0], (t[0] + t[1]) % n))
    pairs = []
    if draw(st.booleans()):
        order = draw(st.permutations(range(n)))
        for k in range(n if n > 2 else 1):
            pairs += [(order[k], order[(k + 1) % n])] * draw(st.integers(1, 3))
    pairs += draw(st.lists(pair, max_size=max(0, max_cables - len(pairs))))
    need = Counter()
    for i, j in pairs:
        need[i] += 1
        need[j] += 1
    ifaces = {}
    for i in range(n):
        nums = draw(st.lists(st.integers(1, 64), min_size=need[i], max_size=need[i], unique=True))
        ifaces[i] = ["en%d" % k for k in nums]
    cables = []
    for i, j in pairs:
        seen_by = draw(st.sampled_from(["both", "both", "a", "b"])) if one_sided else "both"
        cables.append(
            cable(
                hosts[i],
                ifaces[i].pop(),
                hosts[j],
                ifaces[j].pop(),
                speed=draw(SPEEDS),
                seen_by=seen_by,
                via=["Dock"] if seen_by != "both" else (),
            )
        )
    return hosts, cables


@st.composite
def multi_meshes(draw, min_hosts=2, max_hosts=6, max_per_pair=3):
    """(hosts, cables): a full mesh with 1..max_per_pair cables per pair (uneven on purpose),
    random host names in random order, random interface names (en10 sorts before en2)."""
    n = draw(st.integers(min_hosts, max_hosts))
    hosts = draw(st.lists(HOST_NAMES, min_size=n, max_size=n, unique=True))
    counts = {(i, j): draw(st.integers(1, max_per_pair)) for i, j in itertools.combinations(range(n), 2)}
    need = Counter()
    for (i, j), k in counts.items():
        need[i] += k
        need[j] += k
    ifaces = {
        i: ["en%d" % k for k in draw(st.lists(st.integers(1, 64), min_size=need[i], max_size=need[i], unique=True))]
        for i in range(n)
    }
    cables = []
    for (i, j), k in sorted(counts.items()):
        for _ in range(k):
            cables.append(cable(hosts[i], ifaces[i].pop(), hosts[j], ifaces[j].pop()))
    return hosts, cables
