# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
"""Callback plugin mlx.cluster.preload: the collection's action and filter plugins imported
once, in ansible-playbook's own process, before the first task; then what the process holds is
frozen for the garbage collector, so the forked workers do not collect it again."""

from __future__ import annotations

DOCUMENTATION = r"""
name: preload
type: aggregate
short_description: Import the collection's action and filter plugins once, before the first task
description:
  - Ansible runs every task on every host in a worker process forked from C(ansible-playbook).
    A plugin the main process has not imported is imported again in each worker that uses it,
    and Ansible's collection loader compiles a collection's Python from its source at every
    import (it keeps no bytecode). This callback imports the action and filter plugins of
    C(mlx.cluster), with the shared code they import, in the main process when the playbook
    starts, so that every worker inherits them compiled.
  - Then it moves every object the process holds at that point (the parsed playbook, its roles,
    the imported plugins and modules) out of reach of Python's cyclic garbage collector
    (Python's C(gc.freeze), what its documentation advises before forking workers). Those objects
    live until the run ends anyway; neither ansible-playbook nor any worker forked from it
    traverses them again in a collection. Objects made later are collected as usual.
  - It changes no result and prints nothing. A plugin that fails to import here is left for its
    first use to report, with Ansible's own message (shown here at C(-vvv) only).
  - On the simulated cluster, in a configure run of four Macs, the import halves the CPU that the
    workers spend compiling Python (0.6 s to 0.3 s); on eight Macs the freeze takes a tenth off
    the controller's CPU (docs/benchmarks.md).
version_added: 0.3.0
requirements:
  - enabled in ansible.cfg, C(callbacks_enabled = mlx.cluster.preload) (this project's ansible.cfg
    does it)
"""

import gc
import importlib
import pkgutil

from ansible.plugins.callback import CallbackBase

PACKAGES = ("ansible_collections.mlx.cluster.plugins.action", "ansible_collections.mlx.cluster.plugins.filter")


def preload(packages=PACKAGES):
    """Import every module of `packages`. Returns (imported module names, [(name, error)] of
    those that failed to import); never raises for a plugin that fails."""
    imported, failed = [], []
    for package_name in packages:
        try:
            package = importlib.import_module(package_name)
        except Exception as exc:  # pylint: disable=broad-except  # its own use reports it
            failed.append((package_name, exc))
            continue
        for info in pkgutil.iter_modules(package.__path__):
            name = f"{package_name}.{info.name}"
            try:
                importlib.import_module(name)
            except Exception as exc:  # pylint: disable=broad-except  # its own use reports it
                failed.append((name, exc))
            else:
                imported.append(name)
    return imported, failed


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "mlx.cluster.preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        _, failed = preload()
        for name, exc in failed:
            self._display.vvv(
                f"mlx.cluster.preload: {name} not imported ahead ({type(exc).__name__}: {exc}); "
                "its first use reports it"
            )
        # after the imports: the playbook is parsed and the plugins loaded, all of it kept to the end
        gc.freeze()
