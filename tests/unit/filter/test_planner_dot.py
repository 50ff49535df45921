"""mlx_planner.dot: the wiring as Graphviz DOT, safe for any host name."""

from __future__ import annotations

import html
import shutil
import subprocess

import pytest

from ansible_collections.mlx.cluster.plugins.plugin_utils import (
    plan_addresses,
    plan_cables,
    plan_picture,
    plan_topology,
)
from tests.unit.filter.planner_synth import cable, make_facts, ring_cables

needs_graphviz = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' not installed")


def test_edges_labels_and_styles():
    hosts = ["a", "b", "c", "lonely"]
    links = plan_cables.links(
        make_facts(
            hosts,
            [
                cable("a", "en2", "b", "en3"),
                cable("b", "en4", "c", "en4", speed=40),
                cable("a", "en5", "c", "en6", via=["Dock"], seen_by="a"),
            ],
        )
    )
    topo = plan_topology.topology(links, hosts)
    plan = plan_addresses.ip_plan(links)
    text = plan_picture.dot(links, topo, plan)
    entry = plan["cables"]["a:en2~b:en3"]
    last = entry["b"]["address"].rsplit(".", 1)[1]
    assert '  n0 -- n1 [label="en2/en3\\n80 Gb/s\\n%s/.%s"];' % (entry["a"]["address"], last) in text
    assert 'n1 -- n2 [label="en4/en4\\n40 Gb/s\\n' in text
    tb4 = next(line for line in text.splitlines() if "en4/en4" in line)
    assert "color=orange" in tb4 and "penwidth=3" in tb4
    one_sided = next(line for line in text.splitlines() if "en5/en6" in line)
    assert "style=dashed" in one_sided
    assert '  n3 [label="lonely"];' in text  # a host without cables is still drawn
    # no backend fits: the pairs a mesh lacks are red dotted "missing" edges
    assert topo["backend"] is None
    missing = [line for line in text.splitlines() if 'label="missing"' in line]
    assert len(missing) == len(topo["missing"]) == 3
    assert all("color=red" in line and "style=dotted" in line for line in missing)


def test_no_missing_edges_when_a_ring_is_used():
    hosts, cables = ring_cables(5)
    links = plan_cables.links(make_facts(hosts, cables))
    text = plan_picture.dot(links, plan_topology.topology(links, hosts))
    assert "missing" not in text and text.count(" -- ") == 5


def test_links_only():
    links = plan_cables.links(make_facts(["a", "b"], [cable("a", "en2", "b", "en2", speed=None)]))
    text = plan_picture.dot(links)
    assert text.startswith("graph mlx_cluster {") and text.endswith("}\n")
    assert 'label="en2/en2\\nspeed unknown"' in text


def test_external_peer_is_drawn():
    facts = make_facts(["a", "b"], [cable("a", "en2", "b", "en2")])
    ext = make_facts(["a", "z"], [cable("a", "en3", "z", "en2")])["a"]["ports"][0]
    facts["a"]["ports"].append(ext)
    text = plan_picture.dot(plan_cables.links(facts))
    assert "(not in inventory)" in text


NASTY = [
    'a "quoted" host',
    "back\\slash\\",
    "semi;colon {brace}",
    "-- n1 [color=red]",
    "new\nline",
    "tab\there",
    "ünïcode",
]


def _nasty_links():
    names = NASTY
    cables = [cable(names[i], "en2", names[(i + 1) % len(names)], "en3") for i in range(len(names))]
    return names, plan_cables.links(make_facts(names, cables))


def test_names_are_escaped():
    names, links = _nasty_links()
    text = plan_picture.dot(links, plan_topology.topology(links, names))
    assert '[label="a \\"quoted\\" host"]' in text
    assert '[label="back\\\\slash\\\\"]' in text
    assert '[label="new\\nline"]' in text
    assert "\t" not in text


@needs_graphviz
def test_graphviz_parses_and_renders_the_names():
    names, links = _nasty_links()
    text = plan_picture.dot(links, plan_topology.topology(links, names), plan_addresses.ip_plan(links))
    svg = subprocess.run(["dot", "-Tsvg"], input=text, capture_output=True, text=True, check=True).stdout
    assert svg.count('class="node"') == len(names)
    assert svg.count('class="edge"') == len(names)
    rendered = html.unescape(svg)
    for name in ['a "quoted" host', "back\\slash\\", "semi;colon {brace}", "-- n1 [color=red]", "ünïcode"]:
        assert ">%s<" % name in rendered
