# -*- coding: utf-8 -*-
"""What every step of the planner shares: PlanError (a problem that stops the plan, its message
saying the fix) and the small helpers of its messages. Pure, no Ansible import.

The planner's steps, one module each (plugins/plugin_utils/):
plan_cables (links: every cable, both sightings checked), plan_topology (mesh, best ring,
backend), plan_addresses (one /30 per cable, stable across runs), plan_hostfile (what
``mlx.launch --hostfile`` reads), plan_picture (the wiring as Graphviz DOT) and planner (the plan
step that runs them all for mlx.cluster.mlx_cluster_plan).
"""

from __future__ import annotations


class PlanError(Exception):
    """A wiring, inventory or argument problem that stops the plan; ``message`` says the fix."""

    def __init__(self, message):
        super().__init__(message)
        self.message = message


def end_name(host, iface):
    return "%s:%s" % (host, iface)


def cable_name(a, b):
    """How every message, the report and the metrics name a cable: its two ends (dicts with
    ``host`` and ``iface``), ``m1:en2 <-> m2:en3``."""
    return "%s <-> %s" % (end_name(a["host"], a.get("iface")), end_name(b["host"], b.get("iface")))


def join_limited(items, limit=8):
    items = list(items)
    if len(items) <= limit:
        return ", ".join(items)
    return "%s and %d more" % (", ".join(items[:limit]), len(items) - limit)


def plural(count, word, plural=None):
    return "%d %s" % (count, word if count == 1 else (plural or word + "s"))
