#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
---
module: mlx_cluster_facts
short_description: Gather everything mlx-cluster needs to know about a Mac in one run
description:
  - Returns one dictionary, RV(mlx_cluster), as described in docs/design.md, with the Thunderbolt
    wiring (as M(thunderbolt_facts)), the RDMA state (as M(rdma_facts)), all interfaces
    (plain C(ifconfig)), the management interface, the macOS version, the hardware and the
    free disk space.
  - The management interface is the one holding the server address of the SSH session
    (C(SSH_CONNECTION)); without it, the interface of the default route (C(route -n get default)).
  - RDMA problems are checked against the Thunderbolt ports that have a Mac on the other end.
  - Read-only; runs the same in check mode.
  - RV(mlx_cluster) is a return value, not an Ansible fact (despite the module's name); the role
    registers it and keeps it with C(ansible.builtin.set_fact). Facts are copied for every task of
    every host, and ansible-core 2.20 deprecates reading them as top-level variables
    (C(INJECT_FACTS_AS_VARS)); a host variable is neither.
version_added: "0.1.0"
author: mlx-cluster contributors
extends_documentation_fragment:
  - mlx.cluster.command_timeout
options:
  disk_path:
    description:
      - Path whose file system's free space is reported in C(disk). Defaults to the remote user's home.
    type: path
  probe_links:
    description:
      - Also read what the network stage would read before changing anything, and test the
        links already there, returned in C(links_state) (the controller can then leave a Mac
        whose links match the plan and answer alone, without running M(thunderbolt_links)).
      - Runs C(networksetup -getinfo) for each service on a Thunderbolt port; when a
        Thunderbolt port holds a /30, one C(netstat -rn -f inet) (the host routes to the other
        ends) and, for each /30 whose first address is this end's, with carrier, one C(ping)
        over that port from that address (the other end's discovery does not ping it again).
        Nothing more on a Mac never set up.
    type: bool
    default: false
  probe_sudo:
    description:
      - Also run C(sudo -n /bin/sh -c true) (with C(-n) sudo never asks for a password, it fails at
        once instead) and return in C(sudo) whether sudo works without one for what Ansible's
        become runs (C(/bin/sh -c ...) as root). Runs beside the other commands.
    type: bool
    default: false
  read_power:
    description:
      - Read the stored power settings (C(pmset -g custom)), returned in C(power). Off for a run
        whose stages do not use them (the power stage does).
    type: bool
    default: true
  read_updates:
    description:
      - Read the automatic-update settings (C(defaults read /Library/Preferences/com.apple.SoftwareUpdate)),
        returned in C(updates). Off for a run whose stages do not use them (the preflight does).
    type: bool
    default: true
  cluster_dir:
    description:
      - The toolkit's directory on this Mac (mlx_cluster_remote_dir; C(~) is this user's home). Checked
        (never made) and returned in C(cluster_dir), for the preflight.
    type: path
  read_files:
    description:
      - Files (C(~) expanded) whose sha256 and mode are returned in C(files), so the
        controller can leave a generated file that is already right alone (the hostfile).
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    description: Only reads state; check mode changes nothing.
  diff_mode:
    support: none
    description: Facts only.
  facts:
    support: none
    description: Returns RV(mlx_cluster), not facts (see the description).
notes:
  - "A hung C(ibv_devices), C(ibv_devinfo) or C(rdma_ctl) (see I(command_timeout)) does not fail the module:
    RDMA is then unusable on this Mac and C(rdma.problems) names the command and the fix."
  - macOS only. Commands run, four at a time (they only read), C(sysctl -n hw.memsize hw.model hw.ncpu),
    C(sysctl -n iogpu.wired_limit_mb),
    C(system_profiler SPThunderboltDataType -json), C(networksetup -listallhardwareports),
    C(networksetup -listnetworkserviceorder), C(ibv_devices), C(ibv_devinfo -v), C(rdma_ctl status),
    C(ifconfig) (bridge0 included), C(route -n get default) (only when needed), C(sw_vers),
    C(pmset -g custom) (with I(read_power)), C(defaults read /Library/Preferences/com.apple.SoftwareUpdate)
    (with I(read_updates)) and C(sudo -n /bin/sh -c true) (with I(probe_sudo)).
  - "C(pmset) and C(defaults) never fail the module: a failure, a hang or output that cannot be read
    leaves C(power) null (with a warning), a key never written leaves its C(updates) entry null."
  - The network preferences file (C(/Library/Preferences/SystemConfiguration/preferences.plist),
    world-readable) is read for the Thunderbolt Bridge's definition; C(thunderbolt.bridge.persistent_members)
    are the ports macOS puts back into the bridge at the next boot (null when the file cannot be read).
  - "Fails, naming the fix, when it runs through sudo as another user than the one Ansible logs in as
    (become on for the whole run, C(-b) or C(ansible_become)): every path would then be that user's
    (root's C(/var/root))."
seealso:
  - module: thunderbolt_facts
  - module: rdma_facts
"""

EXAMPLES = r"""
- name: Discover each Mac
  mlx_cluster_facts:
  register: discovered

- name: Keep it as the host variable mlx_cluster
  ansible.builtin.set_fact:
    mlx_cluster: "{{ discovered.mlx_cluster }}"

- name: Check the free space where models are kept
  mlx_cluster_facts:
    disk_path: /opt/mlx-cluster/models
"""

RETURN = r"""
mlx_cluster:
  description:
    - Everything about this Mac in one dictionary (register it, then keep it as the host variable
      C(mlx_cluster)).
  returned: always
  type: dict
  contains:
    thunderbolt:
      description: The C(mlx_thunderbolt) fact (see M(thunderbolt_facts)), with C(mac.model_id) from C(hw.model).
      returned: always
      type: dict
      sample: {"mac": {"model": "Mac Studio", "model_id": "Mac16,9", "name": "Mac Studio"}, "ports": [],
               "hardware_ports": {}, "bridge": {"exists": false, "members": [], "service": null,
               "service_enabled": null, "persistent_members": []}, "warnings": []}
    rdma:
      description: The C(mlx_rdma) fact (see M(rdma_facts)).
      returned: always
      type: dict
      sample: {"rdma_ctl": "enabled", "devices": [], "usable": false, "problems": []}
    interfaces:
      description:
        - Every interface of C(ifconfig -v), with C(type) as it says (C(IP over Thunderbolt) for a
          Thunderbolt port, whatever the Mac's language names the port).
      returned: always
      type: dict
      sample: {"en0": {"ipv4": [{"address": "10.1.2.3", "prefix": 24}], "up": true, "mtu": 1500,
               "status": "active", "members": [], "type": "Ethernet"}}
    services:
      description:
        - Every network service in service order (C(networksetup -listnetworkserviceorder)); null
          when it could not be read. The network stage applies against it instead of reading it again.
      returned: always
      type: list
      elements: dict
      sample: [{"name": "Thunderbolt Bridge", "hardware_port": "Thunderbolt Bridge", "device": "bridge0",
                "enabled": true}]
    mgmt:
      description: The interface the SSH session arrived on and its address; nulls when unknown.
      returned: always
      type: dict
      sample: {"iface": "en0", "address": "10.1.2.3"}
    os:
      description: macOS version from C(sw_vers).
      returned: always
      type: dict
      sample: {"product_version": "26.2", "build_version": "25C56"}
    hw:
      description:
        - Memory in bytes, model identifier and CPU count from C(sysctl), and the GPU
          wired-memory limit in MB (C(iogpu.wired_limit_mb); 0 is macOS's own default,
          null when the Mac has no such setting).
      returned: always
      type: dict
      sample: {"memsize": 137438953472, "model": "Mac16,9", "ncpu": 16, "wired_limit_mb": 0}
    disk:
      description: Free bytes (for an unprivileged user) on the file system of C(path); null when it cannot be read.
      returned: always
      type: dict
      sample: {"path": "/Users/admin", "free_bytes": 812345671680}
    power:
      description:
        - The stored power settings per power source (C(pmset -g custom)), C(AC Power) always,
          C(Battery Power) on a laptop, C(UPS Power) with a UPS; numbers as ints. Null when
          they could not be read.
      returned: when read_power is set (the default)
      type: dict
      sample: {"AC Power": {"sleep": 1, "disksleep": 10, "displaysleep": 10, "autorestart": 0, "womp": 1}}
    updates:
      description:
        - The automatic-update settings (C(/Library/Preferences/com.apple.SoftwareUpdate)), each
          true, false or null (never written or unreadable, macOS then applies its default).
          C(automatic_check) is AutomaticCheckEnabled, C(automatic_download) AutomaticDownload,
          C(install_macos_updates) AutomaticallyInstallMacOSUpdates (installs and restarts by
          itself), C(critical_update_install) CriticalUpdateInstall.
      returned: when read_updates is set (the default)
      type: dict
      sample: {"automatic_check": true, "automatic_download": true, "install_macos_updates": false,
               "critical_update_install": true}
    home:
      description: >-
        The remote user's home directory (what C(~) means on this Mac); the plan resolves
        C(mlx_cluster_remote_dir) with it.
      returned: always
      type: str
      sample: /Users/admin
    cluster_dir:
      description:
        - With I(cluster_dir), the directory and why it cannot be trusted (C(problem), empty when it can),
          walking from C(/) down what exists of it; every part must be a directory of root's or of this
          user's, that no other user can write (a folder of root's that every user can write, and sticky,
          such as C(/Users/Shared), is fine above it), or a link of root's (C(/tmp), C(/var)). Another user
          who can change it could change what the toolkit runs from it, as this user and at boot.
      returned: when cluster_dir is set
      type: dict
      sample: {"path": "/Users/admin/mlx-cluster", "problem": ""}
    trust_keys:
      description:
        - How many cluster keys the marked block of this user's C(~/.ssh/authorized_keys) holds (what
          ssh_trust wrote; 0 without the file or the block), null when the file cannot be read. The
          models stage runs ssh_trust only where a copy needs a key or a key must be revoked.
      returned: always
      type: int
      sample: 0
    sudo:
      description:
        - With I(probe_sudo), the remote user, whether C(sudo -n /bin/sh -c true) ran (sudo needs no
          password) and, when it did not, what sudo said (its first line, or that it did not answer).
      returned: when probe_sudo is set
      type: dict
      sample: {"user": "admin", "passwordless": false, "message": "sudo: a password is required"}
    files:
      description: >-
        With I(read_files), each file's sha256 and mode, keyed by its expanded path; null when it is not there.
      returned: when read_files is set
      type: dict
      sample: {"/Users/admin/mlx-cluster/hostfile.json": {"sha256": "9f86d0...", "mode": "0600"}}
    pythons:
      description:
        - "The Pythons found for MLX's environment, without running any (versioned names only,
          so the minor version is known from the name), in the order the toolkit prefers
          them (C(found)): Homebrew's C(/opt/homebrew/bin/python3.N), python.org's
          C(/Library/Frameworks/Python.framework/Versions/3.N/bin/python3.N), then
          C(/usr/local/bin/python3.N)."
        - The interpreter this module ran with (C(module)), Ansible's, with its full version.
      returned: always
      type: dict
      sample: {"found": [{"path": "/opt/homebrew/bin/python3.13", "version": "3.13", "source": "homebrew"}],
               "module": {"path": "/usr/bin/python3", "version": "3.9.6"}}
    links_state:
      description:
        - With I(probe_links), the Thunderbolt services' settings (C(service_info)), the
          host routes to the other ends of the /30 addresses (C(routes), keyed by that
          address, from one C(netstat -rn -f inet)) and one ping per cable with carrier,
          from the end holding the /30's first address (C(pings), keyed by interface).
      returned: when probe_links is set
      type: dict
      sample: {"service_info": {"Thunderbolt 1": {"method": "manual", "address": "10.208.0.1",
               "subnet": "255.255.255.252", "router": null}}, "routes": {"10.208.0.2":
               {"destination": "10.208.0.2", "interface": "en2", "gateway": null,
               "flags": ["UP", "HOST", "DONE", "STATIC"]}}, "pings": {"en2": {"address":
               "10.208.0.1", "peer_address": "10.208.0.2", "ok": true}}}
"""

import getpass
import hashlib
import os
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_collect import (
    IBV_DEVICES_ARGV,
    IBV_DEVINFO_ARGV,
    SUDO_PROBE_ARGV,
    cluster_argvs,
    collect_cluster,
    label,
    link_probe_argvs,
    link_probe_facts,
    module_runner,
    side_by_side,
    sudo_facts,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import untrusted
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_host import become_problem
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_netcfg import (
    SC_PREFERENCES,
    read_preferences,
    services_from_preferences_file,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_python import python_facts
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import COMMAND_TIMEOUT_SPEC, CommandTimeout, Runner
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_trust import block_keys

# Commands run side by side at most (system_profiler beside the quick ones).
PREFETCH_WORKERS = 4
# The link probes (one ping per addressed port among them) side by side at most.
PROBE_WORKERS = 8


def prefetch(module, runner, argvs, probe_sudo=False):
    """Run every command collect_cluster() will run (`argvs`, mlx_collect.cluster_argvs()), a
    few side by side (they only read), and return ({label: (cmd, (rc, out, err))}, sudo): sudo
    is the result of SUDO_PROBE_ARGV run beside them when `probe_sudo` (None when sudo is not
    on PATH or could not start), else None. system_profiler alone takes most of a second on a
    Mac; beside it the others cost no extra time. A tool that is missing, or whose run raised,
    is left out: runner() then runs it itself, failing as it should."""
    paths = {label(argv): module.get_bin_path(argv[0]) for argv in argvs}
    if paths[label(IBV_DEVICES_ARGV)] is None:  # collect_rdma asks for ibv_devinfo only after ibv_devices
        paths[label(IBV_DEVINFO_ARGV)] = None
    cmds = {label(argv): [paths[label(argv)]] + list(argv[1:]) for argv in argvs if paths[label(argv)]}
    sudo = module.get_bin_path(SUDO_PROBE_ARGV[0]) if probe_sudo else None
    extra = [[sudo] + SUDO_PROBE_ARGV[1:]] if sudo else []
    # one that could not start (None) is left to module_runner(), which runs it again and
    # reports it; one that did not answer (CommandTimeout) is kept: it is not waited for twice
    ran = side_by_side(runner, list(cmds.values()) + extra, PREFETCH_WORKERS)
    results = dict(zip(cmds, ran))
    # Each of these commands prints something. Nothing at all with status 0 is not an
    # answer (ansible-core's run_command lost such output under load): runner() runs it again.
    done = {
        key: (cmds[key], res)
        for key, res in results.items()
        if isinstance(res, CommandTimeout) or (res is not None and (res[0] != 0 or res[1] or res[2]))
    }
    return done, (ran[-1] if extra else None)


def disk_free(module, path):
    """{"path", "free_bytes"}: bytes an unprivileged user may still write under `path`."""
    try:
        st = os.statvfs(path)
    except OSError as exc:
        module.warn(f"cannot read the free space of {path}: {exc.strerror}")
        return {"path": path, "free_bytes": None}
    return {"path": path, "free_bytes": st.f_bavail * st.f_frsize}


def probe_links(module, runner, facts):
    """links_state: the probes of link_probe_argvs(), all side by side (they only read). The
    services' settings come from the network preferences file where it answers for them
    (no command), from `networksetup -getinfo` otherwise. A probe that did not answer is
    named in a warning and counted as failed (the network stage reads it again)."""
    known = services_from_preferences_file(SC_PREFERENCES, facts.get("services"))
    probes = link_probe_argvs(facts, known=known)
    cmds = [[module.get_bin_path(argv[0]) or argv[0]] + list(argv[1:]) for _, _, argv in probes]
    results = side_by_side(runner, cmds, PROBE_WORKERS)
    for res in results:
        if isinstance(res, CommandTimeout):
            module.warn(res.msg)
    # a probe that could not run, or did not answer, proves nothing: counted as failed
    results = [r if isinstance(r, tuple) else (127, "", "") for r in results]
    return link_probe_facts(probes, results, known=known)


def read_files(paths):
    """{expanded path: {"sha256", "mode"} or None}: files that may already be right."""
    out = {}
    for path in paths:
        path = os.path.expanduser(path)
        try:
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            out[path] = {"sha256": digest, "mode": "%04o" % stat.S_IMODE(os.stat(path).st_mode)}
        except OSError:
            out[path] = None
    return out


def trust_keys(path):
    """The cluster keys in the marked block of the authorized_keys file at path (0 without it),
    None when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return block_keys(fh.read())
    except FileNotFoundError:
        return 0
    except OSError:
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            disk_path=dict(type="path"),
            probe_links=dict(type="bool", default=False),
            probe_sudo=dict(type="bool", default=False),
            read_power=dict(type="bool", default=True),
            read_updates=dict(type="bool", default=True),
            read_files=dict(type="list", elements="str", default=[]),
            cluster_dir=dict(type="path"),
            **COMMAND_TIMEOUT_SPEC,
        ),
        supports_check_mode=True,
    )
    # sudo sets SUDO_USER to who ran it and USER to whom it runs as (its env_reset)
    user = os.environ.get("USER") or getpass.getuser()
    home = os.path.expanduser("~")
    refused = become_problem(os.environ.get("SUDO_USER"), user, home)
    if refused:
        module.fail_json(msg=refused)
    record = {}
    runner = Runner(module.params["command_timeout"])
    disk = disk_free(module, module.params["disk_path"] or home)
    reads = {"power": module.params["read_power"], "updates": module.params["read_updates"]}
    done, sudo = prefetch(module, runner, cluster_argvs(**reads), module.params["probe_sudo"])
    try:
        facts, warnings = collect_cluster(
            module_runner(module, runner, record, done),
            os.environ.get("SSH_CONNECTION"),
            disk,
            preferences=read_preferences(SC_PREFERENCES),
            **reads,
        )
    except ParseError as exc:
        module.fail_json(msg=f"cannot read `{exc.command}`: {exc.message}", **record.get(exc.command, {}))
    except CommandTimeout as exc:
        module.fail_json(msg=exc.msg, **exc.result())
    facts["home"] = home
    facts["pythons"] = python_facts()
    facts["trust_keys"] = trust_keys(os.path.expanduser("~/.ssh/authorized_keys"))
    if module.params["probe_links"]:
        facts["links_state"] = probe_links(module, runner, facts)
    if module.params["read_files"]:
        facts["files"] = read_files(module.params["read_files"])
    if module.params["cluster_dir"]:
        path = module.params["cluster_dir"]
        facts["cluster_dir"] = {"path": path, "problem": untrusted(path, os.getuid())}
    if module.params["probe_sudo"]:
        facts["sudo"] = sudo_facts(sudo, getpass.getuser())
    for warning in warnings:
        module.warn(warning)
    module.exit_json(changed=False, mlx_cluster=facts)


if __name__ == "__main__":
    main()
