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
version_added: "0.2.0"
options:
  files:
    description: The files to write.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute path of the file.
        type: path
        required: true
      content:
        description: The whole content of the file (text, written as UTF-8).
        type: str
        required: true
      mode:
        description: Permissions of the file, as an octal string.
        type: str
        default: "0600"
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

import os
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_text


def octal(module, value, what):
    try:
        return int(str(value), 8)
    except ValueError:
        module.fail_json(msg=f"{what} must be an octal string like '0600' (got '{value}')")


def missing_parents(path):
    """Parent directories of `path` that do not exist yet, outermost first."""
    missing = []
    parent = os.path.dirname(path)
    while parent and not os.path.isdir(parent):
        missing.append(parent)
        up = os.path.dirname(parent)
        if up == parent:
            break
        parent = up
    return list(reversed(missing))


def current(path):
    """(content bytes or None, mode or None) of an existing regular file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None, None
    if not stat.S_ISREG(st.st_mode):
        return False, None
    with open(path, "rb") as f:
        return f.read(), stat.S_IMODE(st.st_mode)


def write(module, path, data, mode):
    fd, tmp = tempfile.mkstemp(prefix=".mlx_files.", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        module.fail_json(msg=f"cannot write {path}: {exc.strerror}. Check that the connecting user may write "
                             f"to {os.path.dirname(path)}.", path=path)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type="list", elements="dict", required=True, options=dict(
                path=dict(type="path", required=True),
                content=dict(type="str", required=True),
                mode=dict(type="str", default="0600"),
            )),
            directory_mode=dict(type="str", default="0700"),
        ),
        supports_check_mode=True,
    )
    dir_mode = octal(module, module.params["directory_mode"], "directory_mode")
    results, diffs, made = [], [], set()
    for spec in module.params["files"]:
        path = spec["path"]
        if not os.path.isabs(path):
            module.fail_json(msg=f"path must be absolute (got '{path}')")
        mode = octal(module, spec["mode"], f"mode of {path}")
        data = to_bytes(spec["content"], errors="surrogate_or_strict")
        parents = [d for d in missing_parents(path) if d not in made]
        old, old_mode = current(path)
        if old is False:
            module.fail_json(msg=f"{path} exists and is not a regular file: move it away", path=path)
        res = {"path": path, "created": old is None, "mode": f"{mode:04o}",
               "changed": bool(parents) or old != data or old_mode != mode}
        if res["changed"] and module._diff:
            diffs.append({"before_header": path, "after_header": path,
                          "before": "" if old is None else to_text(old, errors="surrogate_or_replace"),
                          "after": spec["content"]})
        if res["changed"] and not module.check_mode:
            for d in parents:
                try:
                    os.mkdir(d, dir_mode)
                    os.chmod(d, dir_mode)  # mkdir's mode is masked by the umask
                except FileExistsError:
                    pass
                except OSError as exc:
                    module.fail_json(msg=f"cannot create the directory {d}: {exc.strerror}", path=path)
            if old != data:
                write(module, path, data, mode)
            elif old_mode != mode:
                os.chmod(path, mode)
        made.update(parents)
        results.append(res)
    changed = any(r["changed"] for r in results)
    out = {"changed": changed, "files": results}
    if diffs:
        out["diff"] = diffs
    module.exit_json(**out)


if __name__ == "__main__":
    main()
