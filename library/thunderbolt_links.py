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
  - Never disables a bridge that carries interfaces other than Thunderbolt ports.
version_added: "0.1.0"
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
    description: Name of the Thunderbolt Bridge network service.
    type: str
    default: Thunderbolt Bridge
  host_routes:
    description: Add a host route to each peer over its cable, as MLX's own setup does.
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
  description: The commands run (or, in check mode, that would run), with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{"argv": ["ifconfig", "bridge0", "deletem", "en2"], "why": "take en2 out of bridge0"}]
links:
  description: The links as applied.
  returned: always
  type: list
  elements: dict
  sample: [{"iface": "en2", "address": "10.208.3.1", "prefix": 30, "peer_address": "10.208.3.2"}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.mlx_netcfg import LinkPlanError, parse_getinfo, parse_route_get, plan_links
from ansible.module_utils.mlx_tb import ParseError, parse_hardware_ports, parse_ifconfig, parse_service_order

C_LOCALE = {"LC_ALL": "C", "LANG": "C"}


def run(module, argv, check_rc=True):
    argv = [module.get_bin_path(argv[0], required=True)] + list(argv[1:])
    rc, out, err = module.run_command(argv, environ_update=C_LOCALE)
    if check_rc and rc != 0:
        module.fail_json(msg=f"{' '.join(argv[:3])} failed: {(err or out).strip()}", rc=rc, cmd=argv, stderr=err)
    return rc, out, err


def read_state(module, links):
    hwports = parse_hardware_ports(run(module, ["networksetup", "-listallhardwareports"])[1])
    services = parse_service_order(run(module, ["networksetup", "-listnetworkserviceorder"])[1])
    interfaces = parse_ifconfig(run(module, ["ifconfig"])[1])
    wanted = {link["iface"] for link in links}
    info = {}
    for svc in services:
        if svc.get("device") in wanted and svc.get("name"):
            info[svc["name"]] = parse_getinfo(run(module, ["networksetup", "-getinfo", svc["name"]])[1])
    routes = {}
    if module.params["host_routes"]:
        for link in links:
            rc, out, _ = run(module, ["route", "-n", "get", link["peer_address"]], check_rc=False)
            routes[link["peer_address"]] = parse_route_get(out if rc == 0 else "")
    return hwports, services, interfaces, info, routes


def main():
    module = AnsibleModule(
        argument_spec=dict(
            links=dict(type="list", elements="dict", required=True, options=dict(
                iface=dict(type="str", required=True),
                address=dict(type="str", required=True),
                prefix=dict(type="int", default=30),
                peer_address=dict(type="str", required=True),
                # carried along from the plan, for messages only
                netmask=dict(type="str"), cable=dict(type="str"),
                peer_host=dict(type="str"), peer_iface=dict(type="str"),
            )),
            protected_ifaces=dict(type="list", elements="str", default=[]),
            bridge=dict(type="str", default="bridge0"),
            bridge_service=dict(type="str", default="Thunderbolt Bridge"),
            host_routes=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        state = read_state(module, p["links"])
        actions, warnings, before, after = plan_links(
            p["links"], *state, protected=p["protected_ifaces"], bridge=p["bridge"],
            bridge_service=p["bridge_service"], host_routes=p["host_routes"])
    except (LinkPlanError, ParseError) as exc:
        module.fail_json(msg=str(exc), links=p["links"])
    for w in warnings:
        module.warn(w)
    if not module.check_mode:
        for action in actions:
            run(module, action["argv"])
    module.exit_json(changed=bool(actions), actions=actions, links=p["links"],
                     diff={"before": before, "after": after})


if __name__ == "__main__":
    main()
