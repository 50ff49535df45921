#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
# Documentation of the action plugin plugins/action/mlx_ssh_targets.py (runs on the controller).

from __future__ import annotations

DOCUMENTATION = r"""
module: mlx_ssh_targets
short_description: How to reach each Mac with ssh outside Ansible (mlx.launch, rsync)
description:
  - Resolves, for every host given, what Ansible's own ssh connection would use (C(ansible_host),
    C(ansible_user), C(ansible_port), C(ansible_ssh_private_key_file), C(ansible_ssh_common_args),
    C(ansible_ssh_extra_args), C(ssh_args) and C(ssh_executable), with their aliases, ansible.cfg and
    environment), and returns it as an ssh destination and an option list.
  - Programs the toolkit starts on the controller (C(mlx.launch), C(rsync)) then reach each Mac
    exactly as Ansible does. C(BatchMode=yes) comes first (nothing may prompt); a connect timeout
    and keepalives come last, as defaults the inventory may override. Ansible's connection-reuse
    options (C(ControlMaster), C(ControlPersist), C(ControlPath)) are left out. Host-key checking is
    never turned off.
  - Runs on the controller only (action plugin); contacts no host, unless C(probe) is set.
version_added: "0.1.0"
extends_documentation_fragment:
  - mlx.cluster.attributes
options:
  hosts:
    description: Inventory names of the Macs.
    type: list
    elements: str
    required: true
  probe:
    description:
      - Also run C(ssh <Mac> true) with those options for each host (bounded to 30 s) and return
        whether it worked and, when not, why, in one sentence with the fix (the name does not
        resolve, the host key is unknown or changed, the key is refused, Remote Login is off, the
        Mac does not answer). Discovery asks it about the Macs that did not answer.
    type: bool
    default: false
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: Ask ssh why a Mac did not answer
  mlx_ssh_targets:
    hosts: [studio-2]
    probe: true
  register: answers
  run_once: true

- name: How the controller reaches each Mac outside Ansible
  mlx_ssh_targets:
    hosts: "{{ ansible_play_hosts }}"
  register: ssh_targets
  run_once: true
"""

RETURN = r"""
probes:
  description: With C(probe), per inventory name, whether C(ssh <Mac> true) worked and why not.
  returned: when probe is set
  type: dict
  sample:
    studio-2:
      ok: false
      why: >-
        ssh from this controller to studio-2 (admin@192.168.1.22) failed: Connection refused. Nothing
        listens for ssh on studio-2. Fix: turn Remote Login on (System Settings > General > Sharing >
        Remote Login).
targets:
  description: Per inventory name, the ssh destination and the options to put before it.
  returned: success
  type: dict
  sample:
    studio-1:
      name: studio-1
      host: 192.168.1.21
      user: admin
      port: null
      ssh: ssh
      options: [-o, BatchMode=yes, -o, User=admin, -o, ConnectTimeout=10, -o, ServerAliveInterval=10,
                -o, ServerAliveCountMax=3]
"""
