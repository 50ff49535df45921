#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
module: mlx_picture
short_description: Render the topology picture (a DOT file) as an SVG with Graphviz
description:
  - Runs Graphviz C(dot -Tsvg) on O(src) and writes O(dest) when the SVG differs from what is
    there (a temporary file beside it, then a rename, as M(mlx.cluster.mlx_files)), mode C(0600).
  - Without Graphviz on the machine (O(dot) not found), nothing is rendered and the result says
    so in C(msg), the DOT file then being the picture. That is not a failure.
  - For the controller's own files (a task delegated to localhost, without become) its action
    plugin does the same work in ansible-playbook's own process, without starting a module.
version_added: "0.3.0"
extends_documentation_fragment:
  - mlx.cluster.command_timeout
options:
  src:
    description: The DOT file.
    type: path
    required: true
  dest:
    description: The SVG file to write.
    type: path
    required: true
  dot:
    description: The Graphviz program, a path or a name looked up on PATH.
    type: str
    default: dot
attributes:
  check_mode:
    support: full
    description: Renders nothing; reports a change when Graphviz is there.
  diff_mode:
    support: none
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: Render the topology picture
  mlx.cluster.mlx_picture:
    src: "{{ mlx_cluster_artifacts_dir }}/topology.dot"
    dest: "{{ mlx_cluster_artifacts_dir }}/topology.svg"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
rendered:
  description: Whether Graphviz rendered the SVG (false without Graphviz, and in check mode).
  returned: always
  type: bool
  sample: true
dest:
  description: The SVG file.
  returned: always
  type: str
  sample: /home/me/mlx-cluster/artifacts/topology.svg
msg:
  description: Why nothing was rendered (no Graphviz, check mode).
  returned: when nothing was rendered
  type: str
  sample: "no Graphviz `dot` on this machine's PATH: the DOT file artifacts/topology.dot is the picture"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_picture import ARGUMENT_SPEC, PictureError, render
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import Runner


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        result = render(p["src"], p["dest"], p["dot"], Runner(p["command_timeout"]), check_mode=module.check_mode)
    except PictureError as exc:
        module.fail_json(msg=exc.msg)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
