# -*- coding: utf-8 -*-
"""ssh outside Ansible: the controller's wrapper for mlx.launch, and what an ssh failure means.

The toolkit starts programs that run their own `ssh` (mlx.launch on the controller, rsync on
the controller or on rank 0). They must reach each Mac exactly as Ansible does; the action
plugin mlx_ssh_targets resolves that per host ({"name", "host", "ssh", "options"}).

- `wrapper_files(targets, python)`: the files of a private `ssh` for mlx.launch, which calls
  `ssh <host>` with the hostfile's names: the wrapper turns an inventory name into Ansible's
  destination and options, and leaves any other destination alone.
- `explain_ssh_failure(...)`: one sentence naming the cause and its fix, from ssh's stderr.
"""

from __future__ import annotations

import json
import re

# ssh(1) options that take an argument (OpenSSH 9/10; `ssh -h` lists them).
SSH_OPTIONS_WITH_ARG = "BbcDEeFIiJLlmOoPpQRSWw"

# The wrapper runs as its own program (mlx.launch starts it through /bin/bash), so it holds
# all it needs; the tests write it out and run it against a stand-in ssh.
WRAPPER = """#!{python}
# ssh for mlx.launch, written by the mlx_launch module for one run: an inventory name becomes
# the destination and options Ansible uses for that Mac (see targets.json beside this file).
import json, os, sys
WITH_ARG = {with_arg!r}


def destination_index(args):
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return i + 1
        if not a.startswith("-") or a == "-":
            return i
        j = 1
        while j < len(a):
            if a[j] in WITH_ARG:
                if j == len(a) - 1:
                    i += 1
                break
            j += 1
        i += 1
    return i


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "targets.json")) as f:
        cfg = json.load(f)
    args = sys.argv[1:]
    i = destination_index(args)
    target = cfg["targets"].get(args[i]) if i < len(args) else None
    if target is None:
        argv = [cfg["ssh"]] + args
    else:
        argv = [target["ssh"]] + target["options"] + args[:i] + [target["host"]] + args[i + 1:]
    os.execv(argv[0], argv)


main()
"""


def wrapper_files(targets, python, ssh):
    """{"ssh": script text, "targets.json": text} for a private directory put first on PATH.
    Every ssh program (`ssh`, and each target's) must be an absolute path: on that PATH, the
    name `ssh` is the wrapper itself."""
    clean = {}
    for name, t in (targets or {}).items():
        if not isinstance(t, dict) or not t.get("host") or not isinstance(t.get("options"), list):
            raise ValueError(f"ssh target of {name} is malformed (needs host and options): {t!r}")
        if not str(t.get("ssh") or ssh).startswith("/"):
            raise ValueError(f"ssh program of {name} must be an absolute path, got {t.get('ssh') or ssh!r}")
        clean[str(name)] = {
            "host": str(t["host"]),
            "ssh": str(t.get("ssh") or ssh),
            "options": [str(o) for o in t["options"]],
        }
    return {
        "ssh": WRAPPER.format(python=python, with_arg=SSH_OPTIONS_WITH_ARG),
        "targets.json": json.dumps({"ssh": ssh, "targets": clean}, indent=1) + "\n",
    }


def _first_line(text, rc):
    """ssh's first line that says something: its `@@@` banner frames stripped, "Permanently
    added" notes skipped."""
    for line in (text or "").splitlines():
        line = line.strip().strip("@").strip()
        if line and not line.startswith("Warning: Permanently added"):
            return line.rstrip(".")
    return f"exit code {rc}"


# ssh's own command for removing a changed host key: `ssh-keygen -f "<known_hosts>" -R "<host>"`
_REMOVE = re.compile(r"^\s*(ssh-keygen\s+(?:-f\s+\S+\s+)?-R\s+\S+)\s*$", re.MULTILINE)


def explain_ssh_failure(stderr, rc, source, name, host, user=None, trust="yours"):
    """Why `ssh` from `source` to the Mac `name` (reached at `host` as `user`) failed, and the
    fix; None when stderr shows no ssh-level failure (the remote command failed instead).

    trust: "yours" when the keys are the user's own (controller to Mac: README step 1),
    "toolkit" when the toolkit made them (Mac to Mac: the cluster key and known_hosts)."""
    low = (stderr or "").lower()
    first = _first_line(stderr, rc)
    login = f"{user}@{host}" if user else host
    head = f"ssh from {source} to {name} ({login}) failed: {first}{'' if first.endswith(('!', '?')) else '.'}"
    if "could not resolve hostname" in low or "name or service not known" in low or "nodename nor servname" in low:
        if host.lower().rstrip(".").endswith(".local"):
            return (
                f"{head} Bonjour did not find {host} from {source}. Fix: check that {name} is on and on the "
                "same network, and its name (System Settings > General > Sharing > Local hostname); or set "
                f"ansible_host of {name} in the inventory to its address."
            )
        return (
            f"{head} The name {host} does not resolve on {source}. Fix: set ansible_host of {name} "
            "in the inventory to the Mac's address (or a name that resolves there, e.g. its .local name)."
        )
    changed = "remote host identification has changed" in low
    if changed and trust != "toolkit":
        remove = _REMOVE.search(stderr or "")
        return (
            f"{head} {name}'s host key changed since this controller accepted it. If {name} was reinstalled "
            f"or replaced, check the new fingerprint on the Mac, remove the old key with "
            f"`{remove.group(1) if remove else 'ssh-keygen -R ' + host}` and accept the new one once with "
            f"`ssh {login} true`; otherwise find out why its key changed (host-key checking stays on)."
        )
    if (
        any(s in low for s in ("host key verification failed", "no matching host key", "host key is known for"))
        or changed
    ):
        if trust == "toolkit":
            return (
                f"{head} {name}'s host key is not the one the toolkit recorded on {source}. Fix: run the "
                "stage again (it records every peer's host key, read from the Mac itself); if the Mac was "
                "reinstalled, that is expected, otherwise find out why its key changed."
            )
        return (
            f"{head} {name}'s host key is not in {source}'s known_hosts, or it changed. Fix: check the "
            f"fingerprint on the Mac and accept it once with `ssh {login} true` (host-key checking stays on)."
        )
    if "permission denied" in low or "too many authentication failures" in low:
        if trust == "toolkit":
            return (
                f"{head} {name} refused the cluster key of {source}. Fix: run the stage again (it puts the "
                f"key into ~/.ssh/authorized_keys of {user or 'the login user'} on {name})."
            )
        return (
            f"{head} {name} refused the key. Fix: put your public key into ~/.ssh/authorized_keys of "
            f"{user or 'the login user'} on {name} (`ssh-copy-id {login}`), or set ansible_user and "
            f"ansible_ssh_private_key_file of {name} to the login that works."
        )
    if "connection refused" in low:
        return (
            f"{head} Nothing listens for ssh on {name}. Fix: turn Remote Login on (System Settings > "
            "General > Sharing > Remote Login)."
        )
    if any(
        s in low
        for s in (
            "timed out",
            "no route to host",
            "network is unreachable",
            "host is down",
            "connection closed",
            "connection reset",
            "broken pipe",
            "timeout, server",
        )
    ):
        return (
            f"{head} {name} does not answer at {host}. Fix: check that it is powered on, awake and on "
            f"the network, and that {host} is its address."
        )
    if rc == 255:
        return f"{head} Fix: try `ssh {login} true` from {source} and follow what it says."
    return None
