#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
module: thunderbolt_links
short_description: Apply planned point-to-point addresses to a Mac's Thunderbolt ports
description:
  - Converges one Mac on its planned Thunderbolt links in one run. For each link it takes
    the port out of the Thunderbolt Bridge, makes sure a network service exists for the
    port, persists the /30 address with C(networksetup -setmanual) (it survives a reboot),
    sets it at runtime with C(ifconfig) and adds a host route to the peer.
  - Reads the current state first and only runs what differs; C(changed) is measured.
  - Refuses (fails) a plan that would touch the management interface or any interface
    that is not a Thunderbolt hardware port.
  - Never disables a bridge that carries interfaces other than Thunderbolt ports; refuses to
    change a bridge that carries the management interface.
  - macOS rebuilds the Thunderbolt Bridge at every boot from its definition in the network
    preferences (C(VirtualNetworkInterfaces/Bridge/bridge0/Interfaces)), with its members and
    up, whether or not its service is enabled. The planned ports are removed from that
    definition with an C(scutil --prefs) session (locked, committed and applied through
    SCPreferences, as networksetup does; networksetup has no bridge verbs), read back from the
    file afterwards. A definition that also lists non-Thunderbolt interfaces is left alone,
    with a warning.
  - The state is read with the read-only commands a few at a time, side by side; the
    changes run one after the other, in order.
version_added: "0.1.0"
notes:
  - "A C(ping) may take at least I(verify_timeout) + 10 seconds, whatever I(command_timeout) says."
extends_documentation_fragment:
  - mlx.cluster.command_timeout
  - mlx.cluster.files
options:
  links:
    description: The links of this host, as produced by the C(mlx_ip_plan) filter.
    type: list
    elements: dict
    required: true
    suboptions:
      iface:
        description: Interface of the Thunderbolt port (C(en2)).
        type: str
        required: true
      address:
        description: This end's address.
        type: str
        required: true
      prefix:
        description: Prefix length of the link network.
        type: int
        default: 30
      peer_address:
        description: The other end's address (gets a host route over I(iface)).
        type: str
        required: true
      netmask:
        description: Netmask of I(prefix) (informational; I(prefix) is what is applied).
        type: str
      cable:
        description: Id of the cable (informational).
        type: str
      peer_host:
        description: Inventory name of the peer (informational).
        type: str
      peer_iface:
        description: Interface of the peer (informational).
        type: str
  protected_ifaces:
    description: Interfaces that must never be changed (the management interface).
    type: list
    elements: str
    default: []
  bridge:
    description: The Thunderbolt Bridge interface.
    type: str
    default: bridge0
  bridge_service:
    description:
      - >-
        Name of the Thunderbolt Bridge network service. Empty, the default, finds it by its
        device (O(bridge)), whatever its name; macOS names it in the language the Mac was set up
        in ("Thunderbolt Bridge", "Thunderbolt-Brücke", "Pont Thunderbolt", ...).
    type: str
    default: ""
  host_routes:
    description: Add a host route to each peer over its cable, as MLX's own setup does.
    type: bool
    default: true
  state:
    description:
      - The Mac's hardware ports, network services and interfaces as M(mlx_cluster_facts) read
        them earlier in this run (C(thunderbolt.hardware_ports), C(services), C(interfaces) of
        its fact). Given (every part not null), they are not read again, three commands fewer
        per Mac and run. The persistent addresses (from
        C(/Library/Preferences/SystemConfiguration/preferences.plist), C(networksetup -getinfo)
        for a service the file does not answer for) and the host routes (C(netstat -rn -f inet))
        are always read here.
    type: dict
    suboptions:
      hardware_ports:
        description: Hardware port name to device (C(networksetup -listallhardwareports)).
        type: dict
      services:
        description: Network services in order (C(networksetup -listnetworkserviceorder)).
        type: list
        elements: dict
      interfaces:
        description: Interfaces with their IPv4 addresses, bridge members and status (C(ifconfig)).
        type: dict
  pool:
    description:
      - The cluster's address pool (the plan's C(ip_plan.pool)). A Thunderbolt port outside
        the plan, without a cable now, that still holds a /30 from it is the old end of an
        unplugged or moved cable, so its address is removed and its service set back to DHCP
        (the macOS default). Without it such ports are left alone. Ports with a cable and
        protected interfaces are never touched.
    type: str
  verify:
    description:
      - After applying, ping every cable from this end's address, as M(thunderbolt_ping) with
        C(first_end_only) does (one ping per cable, from the end its id starts with), and fail
        naming every cable that did not answer.
      - Meant for a task that runs on every Mac of the plan at the same time (forks at least
        the number of Macs). A cable whose other end is still being applied gets up to
        I(verify_wait) seconds, a port without a cable (no carrier) gets none. Nothing is sent
        in check mode.
    type: bool
    default: false
  verify_count:
    description: Echo requests per cable and attempt at most (C(ping -o) stops at the first answer).
    type: int
    default: 2
  verify_timeout:
    description: Seconds one attempt waits for an answer (macOS C(ping -t)).
    type: int
    default: 3
  verify_wait:
    description:
      - Seconds a cable with carrier may stay silent while its other end is being applied.
      - The wait ends early when the port loses its carrier meanwhile (the Mac at the other
        end went off, or the cable was pulled).
    type: int
    default: 60
  files:
    description:
      - Small files to write in the same run, after the links are applied and before they are
        verified (the MLX hostfile, when this run also runs the hostfile stage), so one SSH round
        trip and one module run per Mac fewer than a separate M(mlx_files) task. Written as
        M(mlx_files) writes them (only what differs, atomically, missing parent directories
        made); under sudo they are given to the user who ran sudo (C(SUDO_UID), C(SUDO_GID)),
        not left to root.
    type: list
    elements: dict
    default: []
  fail_on_no_answer:
    description:
      - With I(verify), fail when a cable did not answer. With C(false) the silent cables are
        returned in RV(no_answer) and the task succeeds, so the play can leave out cables to a
        Mac that dropped out of the run meanwhile (its own failure names it).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: Apply this Mac's planned Thunderbolt links
  thunderbolt_links:
    links: "{{ mlx_cluster_plan.ip_plan.hosts[inventory_hostname] }}"
    protected_ifaces: ["{{ mlx_cluster.mgmt.iface }}"]
  become: true
"""

RETURN = r"""
actions:
  description:
    - The commands run (or, in check mode, that would run), with the reason. Runtime address
      changes come after every C(networksetup) change and carry C(runtime).
  returned: always
  type: list
  elements: dict
  sample: [{"argv": ["ifconfig", "bridge0", "deletem", "en2"], "why": "take en2 out of bridge0"},
           {"argv": ["scutil", "--prefs"], "stdin": "lock\\nget /VirtualNetworkInterfaces/Bridge/bridge0\\n...",
            "why": "remove en2 from the definition of bridge0 in the network preferences",
            "persistent": {"bridge": "bridge0", "members": ["en3"], "removed": ["en2"]}}]
applied_by_networksetup:
  description:
    - Runtime address changes not run because C(networksetup) had already made them (macOS
      applies the manual address of an enabled service at once); read back with one C(ifconfig).
  returned: when some were skipped
  type: list
  elements: dict
  sample: [{"argv": ["ifconfig", "en2", "inet", "10.208.3.1", "netmask", "255.255.255.252"],
            "why": "set 10.208.3.1/30 on en2 now"}]
links:
  description: The links as applied.
  returned: always
  type: list
  elements: dict
  sample: [{"iface": "en2", "address": "10.208.3.1", "prefix": 30, "peer_address": "10.208.3.2"}]
verified:
  description: With I(verify), one entry per cable this Mac pinged.
  returned: when verify is set and not in check mode
  type: list
  elements: dict
  sample: [{"cable": "m1:en2~m2:en2", "iface": "en2", "address": "10.208.3.1",
            "peer_address": "10.208.3.2", "peer_host": "m2", "peer_iface": "en2", "ok": true,
            "attempts": 1, "carrier": true}]
files:
  description: With I(files), one entry per file, as M(mlx_files) returns them.
  returned: when files are given
  type: list
  elements: dict
  sample: [{"path": "/Users/admin/mlx-cluster/hostfile.json", "changed": true, "created": true, "mode": "0600"}]
no_answer:
  description: With I(verify), the cables that did not answer, each described for a message.
  returned: when verify is set and not in check mode
  type: list
  elements: dict
  sample: [{"peer_host": "m2", "problem": "cable m1:en2~m2:en2: en2 10.208.3.1 -> m2:en2 10.208.3.2
            (en2 lost its carrier while waiting: m2 went off or the cable was pulled)"}]
"""

import os
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_collect import side_by_side
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import (
    ARGUMENT_SPEC as FILES_SPEC,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import (
    FilesError,
    sudo_owner,
    write_files,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_netcfg import (
    NETSTAT_ROUTES_ARGV,
    SC_PREFERENCES,
    LinkPlanError,
    bridges_from_preferences,
    getinfo_argv,
    no_answer_msg,
    parse_getinfo,
    parse_netstat_routes,
    parse_route_get,
    ping_argv,
    ping_result,
    pinged_from_the_other_end,
    plan_links,
    read_preferences,
    route_of,
    runtime_done,
    services_from_preferences,
    stale_ports,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import (
    COMMAND_TIMEOUT_SPEC,
    CommandTimeout,
    Runner,
    module_run,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_tb import (
    IFCONFIG_ARGV,
    parse_hardware_ports,
    parse_ifconfig,
    parse_service_order,
)

# Read-only commands run side by side at most.
READ_WORKERS = 4


def runner_of(module):
    return Runner(module.params["command_timeout"])


def run(module, argv, check_rc=True):
    argv = [module.get_bin_path(argv[0], required=True)] + list(argv[1:])
    rc, out, err = module_run(module, runner_of(module), argv)
    if check_rc and rc != 0:
        module.fail_json(msg=f"{' '.join(argv[:3])} failed: {(err or out).strip()}", rc=rc, cmd=argv, stderr=err)
    return rc, out, err


def run_all(module, argvs, check_rc=True, may_fail=()):
    """run() of every argv, a few side by side (read-only commands only); results in order.
    Paths are resolved and failures reported here, in the module's own thread (except for
    the argvs in `may_fail`: the caller reads their status). A command that does not answer
    fails the module, named, with its fix."""
    cmds = [[module.get_bin_path(a[0], required=True)] + list(a[1:]) for a in argvs]
    results = side_by_side(runner_of(module), cmds, READ_WORKERS)
    for res in results:
        if isinstance(res, CommandTimeout):
            module.fail_json(msg=res.msg, **res.result())
    # Every one of these commands prints something: nothing at all with status 0 is not an
    # answer (ansible-core's run_command lost such output under load). Run it again, alone
    # (so is one that could not be started: the failure is reported there).
    results = [
        module_run(module, runner_of(module), c) if r is None or (r[0] == 0 and not r[1] and not r[2]) else r
        for c, r in zip(cmds, results)
    ]
    for argv, cmd, (rc, out, err) in zip(argvs, cmds, results):
        if check_rc and rc != 0 and argv not in may_fail:
            module.fail_json(msg=f"{' '.join(cmd[:3])} failed: {(err or out).strip()}", rc=rc, cmd=cmd, stderr=err)
    return results


def persist_bridge(module, action):
    """Run the `scutil --prefs` session of a bridge_members_action() and read the file back:
    scutil exits 0 even when a command failed (it prints why), so the file says whether the
    members changed."""
    argv = [module.get_bin_path(action["argv"][0], required=True)] + list(action["argv"][1:])
    rc, out, err = module_run(module, runner_of(module), argv, data=action["stdin"])
    want = action["persistent"]
    bridges = bridges_from_preferences(read_preferences(SC_PREFERENCES) or b"")
    now = None if bridges is None else (bridges.get(want["bridge"]) or {}).get("members")
    if rc != 0 or (out or "").strip() or now != want["members"]:
        module.fail_json(
            msg=f"could not remove {', '.join(want['removed'])} from the definition of {want['bridge']} in "
            f"{SC_PREFERENCES} (scutil --prefs: {(out or err).strip() or 'no output'}; the file lists "
            f"{now if now is not None else 'nothing readable'}). Remove them by hand: System Settings > "
            f"Network > ... > Manage Virtual Interfaces > Thunderbolt Bridge",
            rc=rc,
            cmd=argv,
            stdout=out,
            stderr=err,
        )


def read_state(module, links):
    routes_wanted = [link["peer_address"] for link in links] if module.params["host_routes"] else []
    known = module.params["state"] or {}
    reuse = all(known.get(k) is not None for k in ("hardware_ports", "services", "interfaces"))
    lists = (
        []
        if reuse
        else [["networksetup", "-listallhardwareports"], ["networksetup", "-listnetworkserviceorder"], IFCONFIG_ARGV]
    )
    # the host routes: every one from one `netstat -rn -f inet` (read with the lists above)
    first = run_all(module, lists + ([NETSTAT_ROUTES_ARGV] if routes_wanted else []), may_fail=[NETSTAT_ROUTES_ARGV])
    table = None
    if routes_wanted:
        rc, out, _err = first.pop()
        try:
            table = parse_netstat_routes(out) if rc == 0 else None
        except ParseError:
            table = None
    if reuse:
        hwports, services, interfaces = known["hardware_ports"], known["services"], known["interfaces"]
    else:
        hwports = parse_hardware_ports(first[0][1])
        services = parse_service_order(first[1][1])
        interfaces = parse_ifconfig(first[2][1])
    stale = stale_ports(links, hwports, interfaces, module.params["pool"], protected=module.params["protected_ifaces"])
    wanted = {link["iface"] for link in links} | set(stale)
    listed = [svc for svc in services if svc.get("device") in wanted and svc.get("name")]
    names = [svc["name"] for svc in listed]
    # the services' settings from the network preferences file where it answers for them (a
    # re-run after one cable moved reads one file, not a getinfo per service), else networksetup
    prefs = read_preferences(SC_PREFERENCES)
    info = services_from_preferences(prefs, listed) if listed and prefs is not None else {}
    ask = [n for n in names if n not in info]
    info.update(
        {name: parse_getinfo(res[1]) for name, res in zip(ask, run_all(module, [getinfo_argv(n) for n in ask]))}
    )
    if table is not None:
        routes = {peer: route_of(table, peer) for peer in routes_wanted}
    else:  # a routing table that cannot be read: ask the kernel address by address
        # (`route -n get` exits 1 when there is no route: not a failure)
        route_out = run_all(module, [["route", "-n", "get", peer] for peer in routes_wanted], check_rc=False)
        routes = {peer: parse_route_get(out if rc == 0 else "") for peer, (rc, out, _) in zip(routes_wanted, route_out)}
    bridges = bridges_from_preferences(prefs) if prefs is not None else None
    persistent = None if bridges is None else bridges.get(module.params["bridge"], {})
    return hwports, services, interfaces, info, routes, stale, persistent


def verify(module, links, interfaces):
    """Ping the cables this end pings, side by side; [result] and [failed cable]. A silent
    cable with carrier is tried again until verify_wait: its other end may still be applying."""
    p = module.params
    ping = module.get_bin_path("ping", required=True)
    pinger = Runner(max(p["command_timeout"], p["verify_timeout"] + 10))
    start = time.monotonic()

    ifconfig = module.get_bin_path("ifconfig")

    def has_carrier(iface):
        """The port's carrier now (None when ifconfig cannot tell)."""
        if not ifconfig:
            return None
        try:
            rc, out, _ = runner_of(module).run([ifconfig, iface])
        except (CommandTimeout, OSError):
            return None
        try:
            return (parse_ifconfig(out).get(iface) or {}).get("status") != "inactive" if rc == 0 else None
        except ParseError:
            return None

    def probe(link):
        carrier = (interfaces.get(link["iface"]) or {}).get("status") != "inactive"
        deadline = start + (p["verify_wait"] if carrier else 0)
        attempts = 0
        while True:
            attempts += 1
            try:
                rc = pinger.run(ping_argv(ping, link, p["verify_count"], p["verify_timeout"]))[0]
            except OSError:  # could not start ping at all: that cable is not verified
                return False, attempts, carrier, False
            except CommandTimeout as exc:  # ping ends by itself (-t): one that does not is named
                module.warn(exc.msg)
                return False, attempts, carrier, False
            if rc == 0 or time.monotonic() + p["verify_timeout"] > deadline:
                return rc == 0, attempts, carrier, False
            if carrier and has_carrier(link["iface"]) is False:
                return False, attempts, False, True  # no use waiting: the other end is gone

    mine = [x for x in links if not pinged_from_the_other_end(x)]
    with ThreadPoolExecutor(max_workers=max(1, len(mine))) as pool:
        outcomes = list(pool.map(probe, mine))
    results = []
    for link, (ok, attempts, carrier, lost) in zip(mine, outcomes):
        results.append(ping_result(link, ok, attempts=attempts, carrier=carrier, lost=lost))
    return results


def write_some_files(module, files):
    """mlx_files' result for `files` ({} when none), written as the user who ran sudo."""
    if not files:
        return {}
    try:
        return write_files(
            files, check_mode=module.check_mode, diff=module._diff, owner=sudo_owner(os.environ, os.geteuid())
        )
    except FilesError as exc:
        module.fail_json(msg=exc.msg, **({"path": exc.path} if exc.path else {}))


def files_out(files):
    return {"files": files["files"]} if files else {}


def with_file_diffs(links_diff, files):
    """The links' before/after, alone, or first in a list with one entry per file written."""
    return [links_diff] + files["diff"] if files.get("diff") else links_diff


def module_args():
    """The options DOCUMENTATION describes, as AnsibleModule takes them."""
    return dict(
        links=dict(
            type="list",
            elements="dict",
            required=True,
            options=dict(
                iface=dict(type="str", required=True),
                address=dict(type="str", required=True),
                prefix=dict(type="int", default=30),
                peer_address=dict(type="str", required=True),
                # carried along from the plan, for messages only
                netmask=dict(type="str"),
                cable=dict(type="str"),
                peer_host=dict(type="str"),
                peer_iface=dict(type="str"),
            ),
        ),
        protected_ifaces=dict(type="list", elements="str", default=[]),
        pool=dict(type="str"),
        bridge=dict(type="str", default="bridge0"),
        bridge_service=dict(type="str", default=""),
        host_routes=dict(type="bool", default=True),
        state=dict(
            type="dict",
            options=dict(
                hardware_ports=dict(type="dict"),
                services=dict(type="list", elements="dict"),
                interfaces=dict(type="dict"),
            ),
        ),
        verify=dict(type="bool", default=False),
        verify_count=dict(type="int", default=2),
        verify_timeout=dict(type="int", default=3),
        verify_wait=dict(type="int", default=60),
        files=dict(FILES_SPEC["files"], required=False, default=[]),
        fail_on_no_answer=dict(type="bool", default=True),
        **COMMAND_TIMEOUT_SPEC,
    )


def plan(module):
    """(state, actions, before, after): what read_state read and what plan_links makes of it; its
    warnings given; fails when the links cannot be planned."""
    p = module.params
    try:
        state = read_state(module, p["links"])
        actions, warnings, before, after = plan_links(
            p["links"],
            *state[:5],
            protected=p["protected_ifaces"],
            bridge=p["bridge"],
            bridge_service=p["bridge_service"],
            host_routes=p["host_routes"],
            stale=state[5],
            persistent=state[6],
        )
    except (LinkPlanError, ParseError) as exc:
        module.fail_json(msg=str(exc), links=p["links"])
    if state[6] is None and p["links"]:
        warnings.append(
            f"cannot read the network preferences ({SC_PREFERENCES}): whether {p['bridge']} takes "
            f"the planned ports back at the next boot is not checked"
        )
    for w in warnings:
        module.warn(w)
    return state, actions, before, after


def apply_actions(module, actions):
    """(ran, already): the actions run in order, and the runtime ones networksetup had applied."""
    ran, already, now = [], [], None
    for action in actions:
        if action.get("runtime") and any(a["argv"][0] == "networksetup" for a in ran):
            # networksetup may have applied the address already: look once, skip what is done
            if now is None:
                now = parse_ifconfig(run(module, IFCONFIG_ARGV)[1])
            if runtime_done(action, now):
                already.append(action)
                continue
        if "stdin" in action:
            persist_bridge(module, action)
        else:
            run(module, action["argv"])
        ran.append(action)
    return ran, already


def links_out(module, planned, ran, before, after, files):
    """The result: changed (actions `planned` or files written), the actions that `ran`, the
    links, the diff and the files written."""
    return dict(
        changed=bool(planned) or files.get("changed", False),
        actions=ran,
        links=module.params["links"],
        diff=with_file_diffs({"before": before, "after": after}, files),
        **files_out(files),
    )


def verify_into(module, out, interfaces):
    """Adds `verified` and `no_answer` to `out`; fails with it when a cable does not answer and
    fail_on_no_answer says so."""
    p = module.params
    out["verified"] = verify(module, p["links"], interfaces)
    out["no_answer"] = [{"peer_host": r["peer_host"], "problem": r["problem"]} for r in out["verified"] if not r["ok"]]
    if out["no_answer"] and p["fail_on_no_answer"]:
        module.fail_json(msg=no_answer_msg(out["no_answer"]), **out)


def main():
    module = AnsibleModule(argument_spec=module_args(), supports_check_mode=True)
    p = module.params
    state, actions, before, after = plan(module)
    if module.check_mode:
        files = write_some_files(module, p["files"])
        module.exit_json(**links_out(module, actions, actions, before, after, files))
    ran, already = apply_actions(module, actions)
    files = write_some_files(module, p["files"])
    out = links_out(module, actions, ran, before, after, files)
    if already:
        out["applied_by_networksetup"] = already
    if p["verify"]:
        verify_into(module, out, state[2])
    module.exit_json(**out)


if __name__ == "__main__":
    main()
