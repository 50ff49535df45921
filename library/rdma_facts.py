#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rdma_facts
short_description: Gather the state of RDMA over Thunderbolt on a Mac
description:
  - Runs C(ibv_devices), C(ibv_devinfo -v) and, when present, C(rdma_ctl status), and returns one
    fact, C(mlx_rdma), as described in docs/design.md.
  - Each problem found names its cause and its fix (RDMA disabled, no devices, a port down on a
    cabled interface, no IPv4-mapped GID for JACCL).
  - A missing C(ibv_devices) means RDMA is unavailable on this Mac; it is reported as a problem,
    not as a failure.
  - Read-only; runs the same in check mode.
version_added: "0.1.0"
author: mlx-cluster contributors
extends_documentation_fragment:
  - mlx.cluster.command_timeout
options:
  cabled_ifaces:
    description:
      - Interfaces that have a Thunderbolt cable to another Mac. Their RDMA device should be
        C(PORT_ACTIVE); one that is not is reported as C(port_down).
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
    support: full
    description: Returns C(ansible_facts.mlx_rdma).
notes:
  - "A command that outlives I(command_timeout) does not fail the module: RDMA is then unusable on this Mac and
    C(problems) names the command and the fix."
  - macOS 26.2 or later on Thunderbolt 5 hardware. RDMA is enabled from Recovery with
    C(rdma_ctl enable).
seealso:
  - module: thunderbolt_facts
  - module: mlx_cluster_facts
"""

EXAMPLES = r"""
- name: Read the RDMA state, knowing which interfaces are cabled
  rdma_facts:
    cabled_ifaces: "{{ ansible_facts.mlx_thunderbolt.ports | selectattr('peer') | map(attribute='iface') | list }}"

- name: Stop on a Mac whose RDMA is not usable
  ansible.builtin.assert:
    that: ansible_facts.mlx_rdma.usable
    fail_msg: "{{ ansible_facts.mlx_rdma.problems | map(attribute='fix') | list }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    mlx_rdma:
      description: RDMA switch, devices and problems.
      returned: always
      type: dict
      contains:
        rdma_ctl:
          description: C(enabled) or C(disabled) from C(rdma_ctl status); null when rdma_ctl is not present.
          returned: always
          type: str
          sample: enabled
        devices:
          description: One entry per RDMA device, sorted by name.
          returned: always
          type: list
          elements: dict
          sample:
            - name: rdma_en2
              iface: en2
              port_state: PORT_ACTIVE
              active_mtu: 4096
              ipv4_gid: true
              gids: ["fe80::b4e1:2cff:fe7a:9d02", "::ffff:10.208.0.1"]
        usable:
          description: True when RDMA is not disabled and at least one device exists.
          returned: always
          type: bool
          sample: true
        problems:
          description:
            - What stands in the way, each with a C(fix). Per-interface problems may be
              listed while C(usable) is true.
            - Code C(no_answer) (with C(command)) is an RDMA probe that did not answer within
              I(command_timeout). RDMA is then unusable and that is the only problem listed.
          returned: always
          type: list
          elements: dict
          sample:
            - code: no_ipv4_gid
              iface: en3
              msg: "rdma_en3 has no IPv4-mapped GID (JACCL needs one): the interface has no IPv4 address yet"
              fix: "run the network stage (it gives each cabled Thunderbolt interface its link address)"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_collect import collect_rdma, module_runner
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import COMMAND_TIMEOUT_SPEC, Runner


def main():
    module = AnsibleModule(
        argument_spec=dict(cabled_ifaces=dict(type="list", elements="str", default=[]), **COMMAND_TIMEOUT_SPEC),
        supports_check_mode=True,
    )
    record = {}
    try:
        facts, warnings = collect_rdma(
            module_runner(module, Runner(module.params["command_timeout"]), record), module.params["cabled_ifaces"]
        )
    except ParseError as exc:
        module.fail_json(msg=f"cannot read `{exc.command}`: {exc.message}", **record.get(exc.command, {}))
    for warning in warnings:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={"mlx_rdma": facts})


if __name__ == "__main__":
    main()
