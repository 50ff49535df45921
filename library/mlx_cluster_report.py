#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
# Documentation of the action plugin plugins/action/mlx_cluster_report.py (runs on the controller).

from __future__ import annotations

DOCUMENTATION = r"""
module: mlx_cluster_report
short_description: Write the cluster report, one self-contained HTML page
description:
  - Writes C(report.html) in I(artifacts_dir) with the topology drawn from the plan (each Mac, each
    cable with its ports, addresses, speed and link class; TB4/TB3 cables, cables slow in the
    collective check and missing cables highlighted, with a legend), the preflight findings with
    their fixes, the collective check (all_sum sweep and each cable alone), every benchmark run
    as a table and charts across runs, and the versions per Mac (macOS and build, Python, mlx,
    mlx-lm; a Mac that differs from the others is marked).
  - Writes the same numbers for Prometheus, C(metrics.prom) beside the report, in node_exporter's
    textfile format (prometheus_client's exposition; plugins/plugin_utils/metrics.py lists the
    metrics), and with I(metrics_textfile_dir) where a node_exporter reads textfiles.
  - Reads what the stages saved in I(artifacts_dir) (C(plan.json), C(preflight.json),
    C(versions.json), C(net_check/results.json), C(bench/*.json)), each section with the time its
    file was last written; this run's plan and facts come from the arguments. A section whose
    stage has not run yet says so and how to run it.
  - The page loads nothing from anywhere (no script, stylesheet, font or image), so it can be opened
    offline or mailed. It holds no clock reading, so the file is rewritten only when something it
    shows changed, and C(changed) says whether it was.
  - Keeps I(artifacts_dir) private on every run. The directory and those below it are set to 0700,
    every file in them loses group and other access (a directory that existed before the toolkit,
    or a file copied in, included); links are neither followed nor changed. C(modes) lists what
    was set; in check mode nothing is changed, and with C(--diff) the modes are shown before and
    after.
  - Runs on the controller only (action plugin) and contacts no host. Use it with C(run_once).
version_added: "0.3.0"
extends_documentation_fragment:
  - mlx.cluster.attributes
attributes:
  check_mode:
    support: full
    description: Writes nothing and changes no mode; C(changed) and C(modes) say what would be done.
  diff_mode:
    support: partial
    description: The modes I(artifacts_dir) would be given, before and after; not the page.
options:
  artifacts_dir:
    description: The artifacts directory (C(mlx_cluster_artifacts_dir)); created when missing.
    type: path
    required: true
  plan:
    description: This run's plan (the fact C(mlx_cluster_plan)); without it, C(plan.json) of an earlier run.
    type: dict
  metrics_textfile_dir:
    description:
      - Also write the metrics (C(metrics.prom)'s text) as C(mlx_cluster.prom) in this directory, atomically and
        0644, for a node_exporter on the controller started with C(--collector.textfile.directory) set to it.
      - Empty or unset, only C(metrics.prom) in I(artifacts_dir).
    type: path
  facts:
    description: >-
      This run's discovery facts, C(mlx_cluster) per inventory name (macOS version and build, model, memory, RDMA).
    type: dict
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: Write the cluster report
  mlx.cluster.mlx_cluster_report:
    artifacts_dir: "{{ mlx_cluster_artifacts_dir }}"
    plan: "{{ mlx_cluster_plan }}"
    facts: "{{ dict(mlx_cluster_plan.hosts | zip(mlx_cluster_plan.hosts | map('extract', hostvars, 'mlx_cluster'))) }}"
  register: report_written
  run_once: true
"""

RETURN = r"""
path:
  description: The report's path (in check mode, where it would be written).
  returned: success
  type: str
  sample: /home/me/mlx-cluster/inventory/mac_cluster/artifacts/report.html
metrics:
  description: >-
    The metrics file beside the report, C(metrics.prom) (node_exporter's textfile format, written with the
    report, 0600): cables, preflight, benchmark and versions; plugins/plugin_utils/metrics.py lists them.
    Null, with a warning naming the fix, when the controller's Python lacks prometheus-client.
  returned: success
  type: str
  sample: /home/me/mlx-cluster/inventory/mac_cluster/artifacts/metrics.prom
modes:
  description: What in I(artifacts_dir) was made private (in check mode, what would be), with its mode before.
  returned: success
  type: list
  elements: dict
  sample: [{"path": "/home/me/mlx-cluster/inventory/mac_cluster/artifacts", "mode": "0755", "set": "0700"}]
"""
