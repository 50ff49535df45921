#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
module: mlx_files
short_description: Write a few small text files, given inline, in one module run
description:
  - Writes each file of I(files) whose content or mode differs from what is there, atomically
    (a temporary file in the same directory, then a rename), and creates missing parent
    directories with I(directory_mode). C(changed) is measured per file.
  - Meant for generated files of a few kilobytes (the hostfile, the plan, the topology). It
    does in one run what M(ansible.builtin.copy) with C(content) does in three per file
    (C(stat), a file transfer, then C(copy)), which counts when the playbook is re-run after
    every re-cabling. Owner and group are left as they are (those of the connecting user).
  - For the controller's own files (a task delegated to localhost, without become) its action plugin does
    the same work in ansible-playbook's own process, without starting a module.
version_added: "0.2.0"
extends_documentation_fragment:
  - mlx.cluster.files
options:
  files:
    description: The files to write.
    type: list
    elements: dict
    required: true
  directory_mode:
    description: Permissions of the parent directories this module creates (existing ones are not changed).
    type: str
    default: "0700"
attributes:
  check_mode:
    support: full
    description: Reports what would be written; writes nothing.
  diff_mode:
    support: full
    description: One before/after per file that differs.
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: Write the hostfile at the same path on every Mac
  mlx_files:
    files:
      - path: /Users/admin/mlx-cluster/hostfile.json
        content: "{{ mlx_cluster_plan.hostfile | to_nice_json(indent=2) }}\n"
"""

RETURN = r"""
files:
  description: One entry per file, in the order given.
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/Users/admin/mlx-cluster/hostfile.json", "changed": true, "created": true, "mode": "0600"}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import ARGUMENT_SPEC, FilesError, write_files


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = write_files(
            module.params["files"], module.params["directory_mode"], check_mode=module.check_mode, diff=module._diff
        )
    except FilesError as exc:
        module.fail_json(msg=exc.msg, **({"path": exc.path} if exc.path else {}))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
