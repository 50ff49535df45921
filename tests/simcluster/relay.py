"""ssh ProxyCommand of the simulated cluster: relay stdin/stdout to HOST:PORT.

Run by ssh as `ip netns exec <prefix>-ctl python relay.py <state> %h %p`, i.e. from the
controller namespace, the only place the management network is reachable from. The state
directory is an argument only so the harness can recognise (and end) its relays.
"""

import os
import select
import socket
import sys


def main():
    if len(sys.argv) != 4:
        print("usage: relay.py STATE HOST PORT", file=sys.stderr)
        return 64
    _, _state, host, port = sys.argv
    try:
        sock = socket.create_connection((host, int(port)), timeout=10)
    except OSError as exc:
        # in ssh's own words for a direct connection (ssh.c ssh_connect_direct: "ssh: connect to
        # host %s port %s: %s", strerror), which is what a controller on the Macs' LAN prints
        reason = os.strerror(exc.errno) if exc.errno else "Operation timed out"
        print(f"ssh: connect to host {host} port {port}: {reason}", file=sys.stderr)
        return 255
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    inputs = [0, sock.fileno()]
    while inputs:
        readable, _, _ = select.select(inputs, [], [])
        for fd in readable:
            if fd == 0:
                data = os.read(0, 65536)
                if data:
                    sock.sendall(data)
                else:
                    inputs.remove(0)
                    try:
                        sock.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
            else:
                try:
                    data = sock.recv(65536)
                except ConnectionResetError:
                    data = b""
                if not data:
                    return 0
                view = memoryview(data)
                while view:
                    n = os.write(1, view)
                    view = view[n:]
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BrokenPipeError, KeyboardInterrupt):
        sys.exit(0)
