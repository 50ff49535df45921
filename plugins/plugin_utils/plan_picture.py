# -*- coding: utf-8 -*-
"""The cables (with the topology and the IP plan) -> a Graphviz DOT picture of the wiring
(``dot()``, mlx.cluster.mlx_dot). Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_cables import validated_cables
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import PlanError


def _dot_string(text):
    """A DOT quoted string that shows ``text`` literally as a label (\\n = new line)."""
    text = str(text).replace("\\", "\\\\").replace('"', '\\"')
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\\n")
    text = "".join(ch if ch >= " " else " " for ch in text)
    return '"%s"' % text


def _cable_attrs(c, entry, no_rdma):
    """One cable's DOT attributes: its label (ports, speed, the plan's addresses, "no RDMA"),
    orange and thick for TB4 and slower, dashed when seen from one side."""
    label = [
        "%s/%s" % (c["a"]["iface"], c["b"]["iface"]),
        "%s Gb/s" % c.get("speed_gbps") if c.get("speed_gbps") else "speed unknown",
    ]
    if isinstance(entry, Mapping):
        try:
            a_addr, b_addr = entry["a"]["address"], entry["b"]["address"]
            label.append("%s/.%s" % (a_addr, str(b_addr).rsplit(".", 1)[-1]))
        except (KeyError, TypeError):
            pass
    if no_rdma:
        label.append("no RDMA")
    attrs = ["label=%s" % _dot_string("\n".join(label))]
    if c.get("link_class") in ("TB4", "TB3"):
        attrs.extend(["color=orange", "penwidth=3"])
    if c.get("sighting") == "one-sided":
        attrs.append("style=dashed")
    return attrs


def dot(links, topology=None, plan=None):
    """Graphviz DOT text: hosts as nodes, one edge per cable.

    Edge labels read ``en2/en3``, the speed (``80 Gb/s``) and, with a plan, the addresses
    (``10.208.x.1/.2``). TB4 and slower cables are orange and thick, one-sided cables dashed,
    cables that cannot carry RDMA (the topology's ``no_rdma``) say "no RDMA"; when no
    backend fits the topology, the host pairs a full mesh lacks are red dotted edges
    labelled "missing". Hosts without cables are drawn too, and Macs outside the inventory as
    grey dashed boxes. Node ids are generated (n0, n1, ...); host names only appear in quoted,
    escaped labels, so any name is safe.
    """
    cables = validated_cables(links)
    hosts = []
    if topology is not None:
        if not isinstance(topology, Mapping):
            raise PlanError("topology must be the result of mlx_topology")
        hosts.extend(h for h in topology.get("hosts") or [] if isinstance(h, str))
    if plan is not None and not isinstance(plan, Mapping):
        raise PlanError("plan must be the result of mlx_ip_plan")
    extra = sorted({c[s]["host"] for c in cables for s in ("a", "b")} - set(hosts))
    hosts.extend(extra)
    ids = {h: "n%d" % i for i, h in enumerate(hosts)}

    lines = [
        "graph mlx_cluster {",
        "  graph [overlap=false, splines=true];",
        "  node [shape=box, style=rounded];",
        "  edge [fontsize=10];",
    ]
    if topology is not None:
        summary = "backend: %s" % (topology.get("backend") or "none fits")
        if topology.get("backend") == "jaccl-ring" and topology.get("rdma_ring"):
            summary += "\nRDMA ring: %s cable(s) per hop" % topology.get("rdma_ring_width")
        elif topology.get("ring"):
            summary += "\nring: %s cable(s) per hop" % topology.get("ring_width")
        lines.append("  label=%s;" % _dot_string(summary))
    for h in hosts:
        lines.append("  %s [label=%s];" % (ids[h], _dot_string(h)))
    plan_cables = (plan or {}).get("cables") or {}
    no_rdma = {e.get("cable") for e in (topology or {}).get("no_rdma") or [] if isinstance(e, Mapping)}
    for c in cables:
        attrs = _cable_attrs(c, plan_cables.get(c["id"]), c["id"] in no_rdma)
        lines.append("  %s -- %s [%s];" % (ids[c["a"]["host"]], ids[c["b"]["host"]], ", ".join(attrs)))
    for i, e in enumerate((links.get("external") or []) if isinstance(links, Mapping) else []):
        if not isinstance(e, Mapping) or e.get("host") not in ids:
            continue
        node = "x%d" % i
        lines.append(
            "  %s [label=%s, style=dashed, color=grey];"
            % (node, _dot_string("%s\n(not in inventory)" % (e.get("peer_name") or "unknown Mac")))
        )
        lines.append(
            "  %s -- %s [label=%s, style=dashed, color=grey];"
            % (ids[e["host"]], node, _dot_string(e.get("iface") or "?"))
        )
    if topology is not None and not topology.get("backend"):
        for pair in topology.get("missing") or []:
            if len(pair) == 2 and pair[0] in ids and pair[1] in ids:
                lines.append(
                    '  %s -- %s [label="missing", color=red, fontcolor=red, '
                    "style=dotted];" % (ids[pair[0]], ids[pair[1]])
                )
    lines.append("}")
    return "\n".join(lines) + "\n"
