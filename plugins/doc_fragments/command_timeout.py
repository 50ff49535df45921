# -*- coding: utf-8 -*-
"""The option every module that runs commands on a Mac shares: the time bound of each command
(plugins/module_utils/mlx_run.py; its argument_spec entry is mlx_run.COMMAND_TIMEOUT_SPEC)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  command_timeout:
    description:
      - Seconds each command the module runs on the Mac may take. One that has not answered by
        then is stopped (its whole process group killed) and named with the command and a fix;
        unless the module's notes say otherwise, the module then fails.
      - Set for the whole run with the variable C(mlx_cluster_command_timeout).
    type: int
    default: 30
"""
