# -*- coding: utf-8 -*-
"""A capture of what the toolkit reads on each Mac, for its owner to send to the maintainers.

Real Macs are what the simulation cannot show: a capture holds, for every Mac, the raw output,
exit code and time of every macOS command the toolkit parses, and the files it reads, so the
maintainers can replay them through the parsers and rebuild the cluster as a simulation
(`python -m tests.simcluster from-capture FILE`).

- What is run: discovery's own sequence (mlx_collect.collect_cluster, through a runner that
  records each command: the commands discovery parses, in the order and with the conditions
  it runs them), then every command of CAPTURE_ARGVS it did not reach (a failure part-way
  stops discovery, not the capture), then `networksetup -getinfo` of each network service.
  Every command is read-only and bounded in time (mlx_run). Files: FILES, as text.
- What leaves the Mac identifies nobody: redact() replaces, in every output, argv word and
  file, MAC addresses (and what is made from them: the RDMA devices' GUIDs and GIDs, IPv6
  link-local addresses), UUIDs, hardware ids (system_profiler's switch_uid_key), serial
  numbers, host names and user names with placeholders of
  the same shape (a MAC stays a MAC, a UUID a UUID), the same value always the same
  placeholder within one capture, so what ties the Macs together (a Thunderbolt domain UUID
  seen from both ends of a cable) still does. What was redacted is counted, not listed.

Pure, except `record()`'s runner wrapper, which only calls what it is given.
"""

from __future__ import annotations

import re
import time

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_collect import (
    BRIDGE_ARGV,
    CLUSTER_ARGVS,
    ROUTE_ARGV,
    SERVICE_ORDER_ARGV,
    label,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_netcfg import (
    NETSTAT_ROUTES_ARGV,
    SC_PREFERENCES,
    getinfo_argv,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_ports import ALF_GETTERS
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rsync import LOG_FILE_PROBE
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import CommandTimeout
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_tb import parse_service_order
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_wired import LAUNCH_DAEMONS
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_wired import PLIST_PATH as WIRED_PLIST
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_wired import SERVICE as WIRED_SERVICE

FORMAT = 1
# whether the Command Line Tools are there (the simulation rebuilt from a capture needs it)
CLT_ARGV = ["xcode-select", "-p"]
# What the other stages read besides discovery's commands (the network stage's routes, the
# power stage's LaunchDaemon, the model stage's rsync and its --log-file probe); the port
# check's firewall tool is not on PATH: the module finds it (firewall_argv)
CAPTURE_ARGVS = tuple(CLUSTER_ARGVS) + (
    BRIDGE_ARGV,
    ROUTE_ARGV,
    NETSTAT_ROUTES_ARGV,
    ["launchctl", "print", WIRED_SERVICE],
    ["rsync", "--version"],
    ["rsync", *LOG_FILE_PROBE],
    CLT_ARGV,
)
FILES = (SC_PREFERENCES, WIRED_PLIST)
# the toolkit's LaunchDaemons (the wired limit's, the server's by default): read, and printed by launchctl
OUR_DAEMONS = f"{LAUNCH_DAEMONS}/org.mlx-cluster.*.plist"
# the most of one output kept (system_profiler's JSON of a Mac with a dock is tens of KB)
MAX_OUTPUT = 1 << 20


def _clip(text):
    text = text if isinstance(text, str) else (text or b"").decode("utf-8", "replace")
    return text if len(text) <= MAX_OUTPUT else text[:MAX_OUTPUT] + "\n[capture: cut at 1 MiB]\n"


def record(run, taken):
    """A `run(argv, required=True)` for mlx_collect's functions that appends each command's
    {argv, rc, stdout, stderr, seconds} (or {argv, error}) to `taken` and answers as `run`
    does (a missing tool: None, or ParseError when the caller requires it)."""

    def recorded(argv, required=True):
        t0 = time.monotonic()
        entry = {"argv": [str(a) for a in argv]}
        taken.append(entry)
        try:
            result = run(argv, required=False)
        except CommandTimeout as exc:
            entry["error"] = f"no answer within {exc.timeout}s"
            raise
        except ParseError as exc:
            entry["error"] = exc.message
            raise
        except OSError as exc:
            entry["error"] = f"could not be started: {exc}"
            raise ParseError(label(argv), f"could not be started: {exc}") from None
        finally:
            entry["seconds"] = round(time.monotonic() - t0, 3)
        if result is None:
            entry["error"] = "not installed"
            if required:
                raise ParseError(label(argv), "not installed")
            return None
        rc, out, err = result
        entry.update(rc=rc, stdout=_clip(out), stderr=_clip(err))
        return result

    return recorded


def firewall_argv(socketfilterfw):
    """The port check's read of the application firewall (`socketfilterfw`, found where the
    port probe finds it: mlx_ports.ALF_DIR, not on a Mac's PATH)."""
    return [socketfilterfw, *ALF_GETTERS]


def missing_argvs(taken, extra=()):
    """The commands of CAPTURE_ARGVS and `extra` not run yet, then `networksetup -getinfo` of
    each service the service order lists (once it is known)."""
    done = {label(e["argv"]) for e in taken}
    todo = [list(a) for a in tuple(CAPTURE_ARGVS) + tuple(extra) if label(a) not in done]
    order = next((e for e in taken if e["argv"] == SERVICE_ORDER_ARGV), None)
    if order and order.get("rc") == 0:
        try:
            services = parse_service_order(order.get("stdout") or "")
        except ParseError:
            services = []
        todo += [getinfo_argv(s["name"]) for s in services if s.get("name")]
    return [a for a in todo if label(a) not in done]


# ---- redaction ----

_MAC = re.compile(r"(?<![0-9A-Fa-f:])[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}(?![0-9A-Fa-f:])")
_UUID = re.compile(
    r"(?<![0-9A-Fa-f-])[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}(?![0-9A-Fa-f-])"
)
# a JSON or plist value under a key that names a serial number
_SERIAL = re.compile(
    r"""((?:"[^"\n]*serial[^"\n]*"\s*:\s*"|<key>[^<\n]*[Ss]erial[^<\n]*</key>\s*<string>))([^"<\n]+)""", re.I
)
# a hardware id in hex under a key that names one (system_profiler's switch_uid_key)
_HWID = re.compile(r"""("[^"\n]*uid[^"\n]*"\s*:\s*")(0x[0-9A-Fa-f]+)(")""")
# an EUI-64 made from a MAC address (the RDMA devices' node GUIDs and GIDs, IPv6 link-local
# addresses: xx:xx:xx:ff:fe:xx:xx:xx), as 16 hex digits or 4 colon groups (zero-padded or not)
_EUI64 = re.compile(r"(?<![0-9A-Fa-f])[0-9A-Fa-f]{6}[Ff]{3}[Ee][0-9A-Fa-f]{6}(?![0-9A-Fa-f])")
_EUI64_GROUPS = re.compile(
    r"(?<![0-9A-Fa-f])([0-9A-Fa-f]{1,4}):([0-9A-Fa-f]{0,2}[Ff]{2}):([Ff][Ee][0-9A-Fa-f]{2}):([0-9A-Fa-f]{1,4})(?![0-9A-Fa-f])"
)
# a home directory
_HOME = re.compile(r"(/Users/)([A-Za-z0-9._-]+)")


class Redactor:
    """Stable placeholders for one capture: the same value, the same placeholder."""

    KINDS = ("mac_addresses", "uuids", "hardware_ids", "serial_numbers", "host_names", "user_names")

    def __init__(self, hosts=(), users=(), aliases=()):
        """`hosts`: the inventory names (mac1, mac2, ... in their sorted order); `aliases`:
        other names of the Macs (what they call themselves), numbered after them."""
        self.maps = {kind: {} for kind in self.KINDS}
        named = [str(h) for h in sorted(set(hosts)) if str(h)]
        named += [str(a) for a in sorted(set(aliases) - set(hosts)) if str(a)]
        # names longest first, so "m1-studio" is replaced before "m1"
        self.hosts = sorted(named, key=lambda h: (-len(h), h))
        self.users = sorted({str(u) for u in users if str(u) and str(u) != "root"}, key=lambda u: (-len(u), u))
        for h in named:
            self._placeholder("host_names", h)
        for u in sorted(self.users):
            self._placeholder("user_names", u)

    def _placeholder(self, kind, value):
        table = self.maps[kind]
        key = value.lower() if kind in ("mac_addresses", "uuids", "hardware_ids") else value
        if key not in table:
            n = len(table) + 1
            table[key] = {
                "mac_addresses": lambda: f"02:00:00:00:{n >> 8:02x}:{n & 0xFF:02x}",
                "uuids": lambda: f"00000000-0000-4000-8000-{n:012x}",
                "hardware_ids": lambda: f"0x{n:016X}",
                "serial_numbers": lambda: f"SERIAL{n:04d}",
                "host_names": lambda: f"mac{n}",
                "user_names": lambda: f"user{n}",
            }[kind]()
        return table[key]

    def _eui64(self, octets):
        """The EUI-64 of the placeholder of the MAC address an EUI-64's 8 bytes were made from:
        with the universal/local bit flipped (IPv6, RFC 4291) or as it is (the RDMA devices'
        GUIDs), whichever MAC the capture has met already (else the flipped one)."""

        def mac(flip):
            return ":".join(f"{b:02x}" for b in [octets[0] ^ flip, *octets[1:3], *octets[5:8]])

        flip = 0x00 if mac(0x02) not in self.maps["mac_addresses"] and mac(0x00) in self.maps["mac_addresses"] else 0x02
        new = [int(x, 16) for x in self._placeholder("mac_addresses", mac(flip)).split(":")]
        return [new[0] ^ flip, new[1], new[2], 0xFF, 0xFE, new[3], new[4], new[5]]

    def _eui64_text(self, m):
        b = self._eui64(list(bytes.fromhex(m.group(0))))
        return "".join(f"{x:02x}" for x in b)

    def _eui64_groups(self, m):
        words = [int(g, 16) for g in m.groups()]
        b = self._eui64([x for w in words for x in (w >> 8, w & 0xFF)])
        padded = all(len(g) == 4 for g in m.groups())
        out = [(b[i] << 8) | b[i + 1] for i in range(0, 8, 2)]
        return ":".join((f"{w:04x}" if padded else f"{w:x}") for w in out)

    def host(self, name):
        return self._placeholder("host_names", str(name))

    def text(self, text):
        if not isinstance(text, str) or not text:
            return text
        text = _SERIAL.sub(lambda m: m.group(1) + self._placeholder("serial_numbers", m.group(2)), text)
        text = _UUID.sub(lambda m: self._placeholder("uuids", m.group(0)), text)
        text = _HWID.sub(lambda m: m.group(1) + self._placeholder("hardware_ids", m.group(2)) + m.group(3), text)
        text = _MAC.sub(lambda m: self._placeholder("mac_addresses", m.group(0)), text)
        text = _EUI64.sub(self._eui64_text, text)
        text = _EUI64_GROUPS.sub(self._eui64_groups, text)
        text = _HOME.sub(lambda m: m.group(1) + self._placeholder("user_names", m.group(2)), text)
        for name in self.hosts:
            text = re.sub(
                r"(?<![A-Za-z0-9_-])" + re.escape(name) + r"(?![A-Za-z0-9_-])",
                self._placeholder("host_names", name),
                text,
            )
        for name in self.users:
            text = re.sub(
                r"(?<![A-Za-z0-9_.-])" + re.escape(name) + r"(?![A-Za-z0-9_-])",
                self._placeholder("user_names", name),
                text,
            )
        return text

    def value(self, value):
        """Every string in a JSON-like value, keys included."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in value.items()}
        return value

    def counts(self):
        return {kind: len(table) for kind, table in self.maps.items()}


def host_names(capture):
    """The names a Mac goes by in its own outputs besides its inventory name: `kern.hostname`,
    the preferences' ComputerName and LocalHostName, as the capture shows them."""
    names = set()
    prefs = (capture.get("files") or {}).get(SC_PREFERENCES) or ""
    for key in ("ComputerName", "LocalHostName", "HostName"):
        names.update(re.findall(r"<key>%s</key>\s*<string>([^<]+)</string>" % key, prefs))
    return {n.strip() for n in names if n.strip()}


def redact(captures, users=()):
    """{inventory name: mlx_capture's result} -> ({placeholder: redacted capture}, {inventory
    name: placeholder}, counts): every string of every capture through one Redactor."""
    aliases = set()
    for c in captures.values():
        aliases |= host_names(c)
    redactor = Redactor(captures, users, aliases)
    names = {h: redactor.host(h) for h in sorted(captures)}
    out = {}
    for h in sorted(captures):
        c = captures[h] or {}
        out[names[h]] = {
            "commands": redactor.value(list(c.get("commands") or [])),
            "files": redactor.value(dict(c.get("files") or {})),
            "notes": redactor.value(list(c.get("notes") or [])),
        }
    return out, names, redactor.counts()
