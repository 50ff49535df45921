# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
"""Action plugin mlx_ssh_targets: how the controller reaches each Mac over ssh OUTSIDE Ansible.

mlx.launch and rsync run their own `ssh`; they know nothing of the inventory. This plugin asks
Ansible's own configuration (the ssh connection plugin's options: inventory variables and their
aliases, ansible.cfg, environment) what Ansible itself would connect with, for each host, and
returns it as an ssh destination plus an option list. With `probe`, it also runs `ssh <Mac> true`
that way for each host and says why ssh failed, and the fix (module_utils/mlx_ssh.py
`explain_ssh_failure`): discovery's words for a Mac that did not answer. The documentation is
library/mlx_ssh_targets.py (a stub, as ansible-core does for its action-only plugins).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import connection_loader

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_ssh import explain_ssh_failure

# Options that belong to Ansible's own connection reuse, not to another program's ssh.
_ANSIBLE_ONLY = ("controlmaster", "controlpersist", "controlpath")
# Defaults of ours, after everything the inventory says (ssh keeps the first value it gets):
# never a prompt, a bounded connect, a silent Mac given up after 30 s.
DEFAULT_OPTIONS = ("-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3")
CONNECTIONS = ("ssh", "ansible.builtin.ssh", "paramiko", "paramiko_ssh", "ansible.builtin.paramiko_ssh")
# A probe's bound: ConnectTimeout (10 s) and a login's own time, with room; never a hang.
PROBE_TIMEOUT = 30


class TargetError(ValueError):
    """A host whose connection settings cannot be turned into an ssh command."""


def _split(text):
    return shlex.split(text) if isinstance(text, str) and text.strip() else []


def _without_ansible_only(words):
    """ssh_args minus Ansible's connection-reuse options (-o ControlMaster=auto ...)."""
    out, i = [], 0
    while i < len(words):
        w = words[i]
        if w == "-o" and i + 1 < len(words):
            opt, i = words[i + 1], i + 2
        elif w.startswith("-o") and len(w) > 2:
            opt, i = w[2:], i + 1
        else:
            out.append(w)
            i += 1
            continue
        if opt.replace("=", " ").split(None, 1)[0].lower() not in _ANSIBLE_ONLY:
            out += ["-o", opt]
    return out


def ssh_target(name, options):
    """The ssh destination and options for one host, from the resolved options of Ansible's
    ssh connection plugin (host, remote_user, port, private_key_file, ssh_args,
    ssh_common_args, ssh_extra_args, ssh_executable, connection, private_key).
    Order as Ansible's own command line, BatchMode first: ssh takes the first value of each
    option, so what the inventory says wins over our defaults."""
    connection = options.get("connection") or "ssh"
    if connection not in CONNECTIONS:
        raise TargetError(
            f"{name}: ansible_connection is {connection!r}; mlx.launch and rsync reach the "
            f"Macs over ssh. Use the ssh connection for the cluster's Macs."
        )
    key_file = options.get("private_key_file")
    if options.get("private_key") and not key_file:
        raise TargetError(
            f"{name}: the key is given as text (ansible_private_key); mlx.launch and rsync "
            f"need it in a file: set ansible_ssh_private_key_file."
        )
    host = options.get("host") or name
    argv = ["-o", "BatchMode=yes"] + _without_ansible_only(_split(options.get("ssh_args")))
    port = options.get("port")
    if port not in (None, ""):
        argv += ["-o", f"Port={int(port)}"]
    if key_file:
        path = os.path.expanduser(str(key_file))
        # quoted only when it must be (ssh reads -o values as a config line; rsync's -e cannot
        # carry quotes at all, and says so)
        argv += ["-o", f'IdentityFile="{path}"' if any(c.isspace() for c in path) else f"IdentityFile={path}"]
    user = options.get("remote_user")
    if user:
        argv += ["-o", f"User={user}"]
    argv += _split(options.get("ssh_common_args")) + _split(options.get("ssh_extra_args")) + list(DEFAULT_OPTIONS)
    return {
        "name": name,
        "host": str(host),
        "user": str(user) if user else None,
        "port": int(port) if port not in (None, "") else None,
        "ssh": options.get("ssh_executable") or "ssh",
        "options": argv,
    }


def probe(target, run=subprocess.run, timeout=PROBE_TIMEOUT):
    """`ssh <target> true` as the target says: {"ok": bool, "why": the cause and its fix, or None}."""
    argv = [target["ssh"], *target["options"], target["host"], "true"]
    try:
        done = run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        stderr, rc = f"ssh timed out after {timeout} s", 255
    except OSError as exc:  # no ssh program
        stderr, rc = f"{target['ssh']}: {exc.strerror or exc}", 255
    else:
        if done.returncode == 0:
            return {"ok": True, "why": None}
        stderr, rc = done.stderr, done.returncode
    name, host = target["name"], target["host"]
    why = explain_ssh_failure(stderr, rc, "this controller", name, host, target.get("user"))
    return {"ok": False, "why": why or f"ssh from this controller to {name} ({host}) failed: {stderr.strip() or rc}."}


OPTION_NAMES = (
    "host",
    "remote_user",
    "port",
    "private_key_file",
    "private_key",
    "ssh_args",
    "ssh_common_args",
    "ssh_extra_args",
    "ssh_executable",
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("hosts", "probe"))
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        hosts = self._task.args.get("hosts")
        if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
            raise AnsibleActionFail("mlx_ssh_targets: hosts must be a list of inventory names")
        hostvars = task_vars.get("hostvars", {})
        connection_loader.get("ssh", class_only=True)  # its options must be known to the config
        targets, problems = {}, []
        for name in hosts:
            if name not in hostvars:
                problems.append(f"{name}: not in the inventory")
                continue
            hv = hostvars[name]
            variables = {}
            for var in C.config.get_plugin_vars("connection", "ssh"):
                if var in hv:
                    variables[var] = self._templar.template(hv[var])
            options = {
                o: C.config.get_config_value(o, plugin_type="connection", plugin_name="ssh", variables=variables)
                for o in OPTION_NAMES
            }
            options["connection"] = self._templar.template(hv.get("ansible_connection", "ssh"))
            try:
                targets[name] = ssh_target(name, options)
            except TargetError as exc:
                problems.append(str(exc))
        if problems:
            raise AnsibleActionFail("mlx_ssh_targets: " + "; ".join(problems))
        result.update(changed=False, targets=targets)
        if self._task.args.get("probe") and targets:
            # all at once: a silent Mac costs its connect timeout once, not once per Mac
            with ThreadPoolExecutor(max_workers=min(len(targets), 16)) as pool:
                answers = dict(zip(targets, pool.map(probe, targets.values())))
            result["probes"] = answers
        return result
