# -*- coding: utf-8 -*-
"""Filters over plugins/module_utils/mlx_checks.py (preflight checks)."""

from __future__ import annotations

import importlib.util
import os
import sys

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: mlx_preflight
short_description: Check every host's facts, the cables and the topology; list the problems
description:
  - Pure function over the C(mlx_cluster) facts of every host. Returns a list of problems,
    each naming host, port and fix. Render them with C(mlx_preflight_report).
"""


def _load(name):
    key = f"_mlx_cluster_{name}"
    if key not in sys.modules:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils", f"{name}.py")
        spec = importlib.util.spec_from_file_location(key, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[key] = mod
        spec.loader.exec_module(mod)
    return sys.modules[key]


def mlx_preflight(facts_by_host, links=None, topology=None, settings=None):
    if not isinstance(facts_by_host, dict):
        raise AnsibleFilterError("mlx_preflight: expects a dict of host -> mlx_cluster facts")
    try:
        return _load("mlx_checks").preflight(facts_by_host, links, topology, settings)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise AnsibleFilterError(f"mlx_preflight: malformed facts ({exc})") from exc


def mlx_preflight_report(problems):
    if not isinstance(problems, list):
        raise AnsibleFilterError("mlx_preflight_report: expects the list from mlx_preflight")
    return _load("mlx_checks").report(problems)


def mlx_coordinator(host_vars):
    """The address a host is reached on for coordination: the inventory override, else
    the address of the interface Ansible connects over (from mlx_cluster facts)."""
    try:
        override = host_vars.get("mlx_cluster_coordinator_address") or ""
        return override or ((host_vars.get("mlx_cluster") or {}).get("mgmt") or {}).get("address")
    except AttributeError as exc:
        raise AnsibleFilterError("mlx_coordinator: expects hostvars[host]") from exc


def mlx_plan_artifact(plan):
    """The plan as written to plan.json: only what follows from the wiring and settings.

    Drops the per-run `kept` markers of the IP plan (true once addresses exist), so an
    unchanged cluster writes an unchanged file and a second run reports no change.
    """
    if not isinstance(plan, dict):
        raise AnsibleFilterError("mlx_plan_artifact: expects the mlx_cluster_plan dict")

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "kept"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return strip(plan)


class FilterModule:
    def filters(self):
        return {
            "mlx_preflight": mlx_preflight,
            "mlx_preflight_report": mlx_preflight_report,
            "mlx_coordinator": mlx_coordinator,
            "mlx_plan_artifact": mlx_plan_artifact,
        }
