"""Simulated Mac cluster: network namespaces as Macs, veths as Thunderbolt cables, real sshd,
shims answering macOS commands. See cluster.py (SimCluster) and docs/design.md."""

from .cluster import SimCluster, SimError, cleanup, unavailable_reason
from .spec import ClusterSpec, SpecError, load_spec, parse_spec

__all__ = [
    "SimCluster",
    "SimError",
    "cleanup",
    "unavailable_reason",
    "ClusterSpec",
    "SpecError",
    "load_spec",
    "parse_spec",
]
