"""A simulated Mac's Bonjour announcement of Remote Login: `_ssh._tcp` and `_sftp-ssh._tcp`.

Started by the Mac's PID 1 (hostinit.py) with the harness's Python, after sshd, as

    <python> announce.py <state> <host>

and ended with the Mac. As launchd does for sshd's socket on a Mac (ssh.plist: Sockets >
Listeners > Bonjour: ssh, sftp-ssh), it registers both services while Remote Login is on,
here while the Mac's sshd runs (its pid file names a live process: `stop_sshd` turns Remote
Login off, `start_sshd` on again), and withdraws them (mDNS goodbyes) when it stops. The
instance name is the Mac's Computer Name and the host `<LocalHostName>.local.` (both the host's
name, as `scutil` answers: shims/macos.py), port 22, with the Mac's en0 address only: zeroconf
listens and answers on en0 alone, never on the Thunderbolt ports or bridge0. While the
services are registered, `<state>/hosts/<host>/announcing` exists (SimCluster.announcing);
while they are being registered, `registering` (stop_sshd waits for both to go).

zeroconf is the harness's (the simulation's own tool); nothing of the product runs here.
"""

import asyncio
import json
import os
import sys

from zeroconf import IPVersion, ServiceInfo
from zeroconf.asyncio import AsyncZeroconf

SERVICE_TYPES = ("_ssh._tcp.local.", "_sftp-ssh._tcp.local.")
POLL_SECONDS = 0.25


def sshd_running(pidfile):
    """Whether the pid file names a live process (in this Mac's PID namespace)."""
    try:
        with open(pidfile) as f:
            pid = int(f.read().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return False
    return True


def services(host, address):
    return [
        ServiceInfo(t, f"{host}.{t}", port=22, server=f"{host}.local.", parsed_addresses=[address], properties={})
        for t in SERVICE_TYPES
    ]


def mark(path, on, address=""):
    if on:
        with open(path, "w") as f:
            f.write(f"{address}\n")
    elif os.path.exists(path):
        os.unlink(path)


async def follow_sshd(state, host):
    hostdir = os.path.join(state, "hosts", host)
    with open(os.path.join(state, "cluster.json")) as f:
        address = json.load(f)["hosts"][host]["mgmt_address"]
    pidfile = os.path.join(hostdir, "sshd.pid")
    registering, announcing = os.path.join(hostdir, "registering"), os.path.join(hostdir, "announcing")
    aiozc = AsyncZeroconf(interfaces=[address], ip_version=IPVersion.V4Only)
    infos = services(host, address)
    announced = False
    while True:
        on = sshd_running(pidfile)
        if on and not announced:
            # both services at once: probing, then the announcement (about two seconds); sshd
            # may stop meanwhile
            mark(registering, True, address)
            broadcasts = await asyncio.gather(*(aiozc.async_register_service(info) for info in infos))
            await asyncio.gather(*broadcasts)
            announced = True
            on = sshd_running(pidfile)
            mark(announcing, on, address)
            mark(registering, False)
        if announced and not on:
            await aiozc.async_unregister_all_services()
            announced = False
            mark(announcing, False)
        await asyncio.sleep(POLL_SECONDS)


def main():
    asyncio.run(follow_sshd(os.path.abspath(sys.argv[1]), sys.argv[2]))


if __name__ == "__main__":
    main()
