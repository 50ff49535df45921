#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
# Documentation of the action plugin plugins/action/mlx_cluster_plan.py (runs on the controller).

from __future__ import annotations

DOCUMENTATION = r"""
module: mlx_cluster_plan
short_description: Plan the cluster from every Mac's discovery facts (the one plan step)
description:
  - Reads the host variable C(mlx_cluster) of every host given (from M(mlx.cluster.mlx_cluster_facts)) and
    each host's coordinator address (C(mlx_cluster_coordinator_address), else the address Ansible
    connects over), and makes the cluster plan, RV(plan), that every later stage reads (as the host
    variable C(mlx_cluster_plan));
    cables, topology and MLX backend, one /30 per cable, the MLX hostfile, and the directory and
    hostfile path on the Macs.
  - The directory is one absolute path, the same on every Mac, because C(mlx.launch) runs the same
    interpreter, script and model paths on each. C(~) in I(remote_dir) is each Mac's home; Macs
    whose homes differ need an absolute I(remote_dir) (the plan fails naming the homes otherwise).
  - Runs on the controller only (action plugin) and contacts no host. Use it with C(run_once),
    register it, and keep RV(plan) with C(ansible.builtin.set_fact) (with C(run_once), set on every
    host of the play). A return value, not an Ansible fact; facts are copied for every task of every
    host, and ansible-core 2.20 deprecates reading them as top-level variables.
version_added: "0.1.0"
extends_documentation_fragment:
  - mlx.cluster.attributes
options:
  hosts:
    description: Inventory names of the Macs, in rank order.
    type: list
    elements: str
    required: true
  ssh:
    description: The C(targets) of M(mlx.cluster.mlx_ssh_targets), kept in the plan for the stages that run ssh.
    type: dict
    default: {}
  backend:
    description: MLX distributed backend; C(auto) picks the best that fits the wiring.
    type: str
    choices: [auto, jaccl, jaccl-ring, ring]
    default: auto
  rdma_wanted:
    description: Plan for RDMA (JACCL) where the hardware has it.
    type: bool
    default: true
  rdma_required:
    description: Fail instead of warn when RDMA is not usable on every host and cable.
    type: bool
    default: false
  rdma_through_docks:
    description: Let RDMA use a cable through a dock or hub.
    type: bool
    default: false
  ip_pool:
    description: IPv4 pool (CIDR) the per-cable /30 networks are taken from.
    type: str
    default: 10.208.0.0/16
  exclude_networks:
    description: CIDRs the plan must never use.
    type: list
    elements: str
    default: []
  envs:
    description: KEY=VALUE environment variables written into the hostfile.
    type: list
    elements: str
    default: []
  remote_dir:
    description: Directory on every Mac for the hostfile, scripts, environment and models; empty means C(~/mlx-cluster).
    type: str
    default: ""
  hostfile_name:
    description: File name of the hostfile, in I(remote_dir) on every Mac and in the artifacts directory.
    type: str
    default: hostfile.json
  fallback_backend:
    description:
      - What a launch runs on when the planned RDMA backend (C(jaccl), C(jaccl-ring)) cannot be
        brought up. C(ring), the plan holds a ring hostfile over the same Thunderbolt cables
        (C(fallback)); empty, such a launch fails naming the cables and Macs to replug or reboot.
    type: str
    choices: ["", ring]
    default: ""
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: Plan the cluster (once, on the controller)
  mlx.cluster.mlx_cluster_plan:
    hosts: "{{ ansible_play_hosts }}"
    ssh: "{{ ssh_targets.targets }}"
    backend: auto
    remote_dir: /opt/mlx-cluster
  run_once: true
  register: planned

- name: Keep the plan on every host
  ansible.builtin.set_fact:
    mlx_cluster_plan: "{{ planned.plan }}"
  run_once: true
"""

RETURN = r"""
plan:
  description:
    - C(hosts) (rank order), C(links), C(topology), C(ip_plan), C(coordinators), C(ssh),
      C(hostfile) (null when no backend fits the wiring), C(remote_dir), C(hostfile_name),
      C(hostfile_path) (absolute, the same on every Mac) and C(fallback) (null, or with
      I(fallback_backend) the keys C(backend) (ring), C(from), C(hostfile) and C(hostfile_name)).
  returned: success
  type: dict
  sample:
    hosts: [m1, m2]
    remote_dir: /Users/admin/mlx-cluster
    hostfile_name: hostfile.json
    hostfile_path: /Users/admin/mlx-cluster/hostfile.json
"""
