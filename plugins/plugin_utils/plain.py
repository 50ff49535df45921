# -*- coding: utf-8 -*-
"""Ansible's values -> plain Python, at the edge between a plugin and the pure functions.

Templated values reach filters and action plugins as Ansible's own types (tagged strings,
lazy containers); the planner and the preflight rules take plain dict/list/str/int/float.
"""

from __future__ import annotations

from collections.abc import Mapping


def plain(value):
    """Ansible's tagged/lazy containers and strings -> plain dict/list/str (recursively)."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    return value
