#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
---
module: thunderbolt_facts
short_description: Gather the Thunderbolt ports, peers and bridge of a Mac
description:
  - Runs C(system_profiler SPThunderboltDataType -json), C(networksetup -listallhardwareports),
    C(networksetup -listnetworkserviceorder) and C(ifconfig bridge0), and returns one fact,
    C(mlx_thunderbolt), as described in docs/design.md.
  - A Mac behind a dock or hub is found at any depth of the device tree; the docks and hubs
    on the way are listed in C(peer.via).
  - Read-only; runs the same in check mode.
version_added: "0.1.0"
author: mlx-cluster contributors
extends_documentation_fragment:
  - mlx.cluster.command_timeout
attributes:
  check_mode:
    support: full
    description: Only reads state; check mode changes nothing.
  diff_mode:
    support: none
    description: Facts only.
  facts:
    support: full
    description: Returns C(ansible_facts.mlx_thunderbolt).
notes:
  - macOS only. A non-zero exit of C(ifconfig bridge0) saying the interface does not exist means
    there is no bridge, not a failure.
  - A receptacle without a C(Thunderbolt N) hardware port gets C(iface=null) and a warning;
    C(sudo networksetup -detectnewhardware) usually fixes it.
seealso:
  - module: rdma_facts
  - module: mlx_cluster_facts
"""

EXAMPLES = r"""
- name: Read the Thunderbolt wiring
  thunderbolt_facts:

- name: Show which Mac is behind each port
  ansible.builtin.debug:
    msg: "{{ item.iface }} -> {{ item.peer.name | default('nothing') }} ({{ item.speed_gbps }} Gb/s)"
  loop: "{{ ansible_facts.mlx_thunderbolt.ports }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    mlx_thunderbolt:
      description: Thunderbolt ports, peers, hardware ports and the Thunderbolt Bridge.
      returned: always
      type: dict
      contains:
        mac:
          description: This Mac's model as the Thunderbolt buses report it; C(model_id) is null here.
          returned: always
          type: dict
          sample: {"model": "Mac Studio", "model_id": null, "name": "Mac Studio"}
        ports:
          description:
            - One entry per Thunderbolt receptacle, sorted by receptacle number.
            - C(domain_uuid) is null (with a warning) when the output lacks C(domain_uuid_key)
              for the receptacle's bus; its cable is then matched from the other Mac's side.
          returned: always
          type: list
          elements: dict
          sample:
            - receptacle: 1
              bus: "Thunderbolt/USB4 Bus 0"
              domain_uuid: "3F2A6C1E-8B4D-4E7A-9C21-5D0B7E9A1C42"
              hardware_port: "Thunderbolt 1"
              iface: "en2"
              status: "connected"
              speed_gbps: 80
              capability_gbps: null
              link_class: "TB5"
              peer: {"domain_uuid": "B71C0E94-2D5F-4A83-8E6B-0C9F4A2D7E15", "name": "Mac Studio",
                     "model_id": "Mac16,9", "via": []}
              devices: [{"name": "Mac Studio", "vendor": "Apple Inc.", "depth": 1, "kind": "mac"}]
        hardware_ports:
          description: Hardware port name to device, from C(networksetup -listallhardwareports).
          returned: always
          type: dict
          sample: {"Ethernet": "en0", "Thunderbolt 1": "en2", "Thunderbolt Bridge": "bridge0"}
        bridge:
          description:
            - The Thunderbolt Bridge interface and its network service. C(members) are its members
              now (C(ifconfig bridge0)); C(persistent_members) those of its definition in
              C(/Library/Preferences/SystemConfiguration/preferences.plist), which macOS builds it
              from at every boot whether or not its service is enabled (null when the file cannot
              be read).
          returned: always
          type: dict
          sample: {"exists": true, "members": ["en2", "en3"], "service": "Thunderbolt Bridge",
                   "service_enabled": true, "persistent_members": ["en2", "en3"]}
        warnings:
          description: Partial data that was skipped or guessed (also shown as task warnings).
          returned: always
          type: list
          elements: str
          sample: []
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_collect import collect_thunderbolt, module_runner
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_netcfg import SC_PREFERENCES, read_preferences
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import COMMAND_TIMEOUT_SPEC, CommandTimeout, Runner


def main():
    module = AnsibleModule(argument_spec=dict(**COMMAND_TIMEOUT_SPEC), supports_check_mode=True)
    record = {}
    try:
        facts, warnings = collect_thunderbolt(
            module_runner(module, Runner(module.params["command_timeout"]), record),
            preferences=read_preferences(SC_PREFERENCES),
        )
    except ParseError as exc:
        module.fail_json(msg=f"cannot read `{exc.command}`: {exc.message}", **record.get(exc.command, {}))
    except CommandTimeout as exc:
        module.fail_json(msg=exc.msg, **exc.result())
    for warning in warnings:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={"mlx_thunderbolt": facts})


if __name__ == "__main__":
    main()
