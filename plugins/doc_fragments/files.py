# -*- coding: utf-8 -*-
"""What a file to write is, for every module that writes small files on a Mac or the controller
(mlx_files, thunderbolt_links): the suboptions of their `files` option (their argument_spec
entry is module_utils/mlx_files.py ARGUMENT_SPEC["files"]). Each module keeps its own
description and whether `files` is required."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  files:
    type: list
    elements: dict
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
"""
