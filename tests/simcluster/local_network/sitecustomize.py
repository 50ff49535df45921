"""macOS Local Network privacy refusing a launchd-started process (tests only).

Apple's TN3179 says daemons started by launchd, and processes started over ssh, are exempt
from Local Network privacy. Reports from macOS 26 and 27 say otherwise for a launchd-started
interpreter without an app bundle: its connects to the local network fail with EHOSTUNREACH
(errno 65), while the same interpreter started over ssh connects. A simulated Mac with the live
setting `local_network_denied_to_daemons` (SimCluster.set_host) plays that: the simulated
launchd (shims/macos.py launchd_job) puts this directory on PYTHONPATH of the programs it
starts, so Python imports this module at start-up (site.py's `sitecustomize`), and from then
on every connect of the job's Python to an address that is not loopback fails at once with
OSError(EHOSTUNREACH), as the reports describe. ssh sessions, the harness and the product's
own files never see it; with the setting off (the default) launchd starts programs without it.

Only Python's socket module is refused: native code in the job (MLX's ring and JACCL backends,
C++) connects as before. tests/simcluster/README.md lists what stays unverified.
"""

import errno
import ipaddress
import os
import socket

_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex


def _refused(sock, address):
    """True for a TCP/UDP connect of this job to anything but loopback."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    host = address[0] if isinstance(address, tuple) else address
    if host == "localhost":
        return False
    try:
        ip = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return True  # a name: it leads off the Mac
    mapped = getattr(ip, "ipv4_mapped", None)
    return not (ip.is_loopback or (mapped is not None and mapped.is_loopback))


def connect(self, address):
    if _refused(self, address):
        raise OSError(errno.EHOSTUNREACH, os.strerror(errno.EHOSTUNREACH))
    return _connect(self, address)


def connect_ex(self, address):
    if _refused(self, address):
        return errno.EHOSTUNREACH
    return _connect_ex(self, address)


socket.socket.connect = connect
socket.socket.connect_ex = connect_ex
