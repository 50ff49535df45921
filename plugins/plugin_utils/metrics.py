# -*- coding: utf-8 -*-
"""The cluster's numbers for Prometheus, from what the runs left in the artifacts directory (the
report's own data, report.collect): the text format node_exporter's textfile collector reads,
``artifacts/metrics.prom``, written by the action mlx.cluster.mlx_cluster_report on every run.

Built with prometheus_client's registry and exposition, not written by hand. No clock is read:
the same artifacts give the same text, so the file changes only when a number does
(node_exporter itself reports the file's time, ``node_textfile_mtime_seconds``).

Every name is below ``mlx_cluster_`` (NAMES lists them, for the dashboard's test):
- the plan: ``mlx_cluster_macs``, ``mlx_cluster_cables``, ``mlx_cluster_plan_info`` (backend,
  full mesh or not);
- the preflight: ``mlx_cluster_preflight_problems`` by check and severity (every check the
  last preflight ran, 0 when it found nothing);
- the collective check (net_check): ``mlx_cluster_cable_bandwidth_gbps`` and
  ``mlx_cluster_cable_slow`` per cable (the report's slow-cable rule), the all_sum sweep's
  ``mlx_cluster_allsum_bus_bandwidth_gbps`` per message size;
- the benchmark, the latest run of each backend, mode and world size:
  ``mlx_cluster_benchmark_generation_tokens_per_second``, ``..._prompt_tokens_per_second``,
  ``..._peak_memory_bytes`` (the largest rank's);
- the model stage, its last run that copied anything (artifacts/model_sync.json):
  ``mlx_cluster_model_bytes``, ``mlx_cluster_model_sync_seconds`` (the stage's whole time) and
  ``mlx_cluster_model_sync_copied_bytes`` per Mac (and how: over a cable without ssh, or rsync),
  ``mlx_cluster_model_sync_cable_bytes`` per Mac and cable (the copies without ssh);
- the Macs: ``mlx_cluster_mac_info`` (macOS and build, model, Python, mlx, mlx-lm per Mac).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, Info, generate_latest

from ansible_collections.mlx.cluster.plugins.plugin_utils import preflight as preflight_rules
from ansible_collections.mlx.cluster.plugins.plugin_utils.preflight import is_number

GIB = 2**30
NAMES = (
    "mlx_cluster_macs",
    "mlx_cluster_cables",
    "mlx_cluster_plan_info",
    "mlx_cluster_preflight_problems",
    "mlx_cluster_cable_bandwidth_gbps",
    "mlx_cluster_cable_slow",
    "mlx_cluster_allsum_bus_bandwidth_gbps",
    "mlx_cluster_benchmark_generation_tokens_per_second",
    "mlx_cluster_benchmark_prompt_tokens_per_second",
    "mlx_cluster_benchmark_peak_memory_bytes",
    "mlx_cluster_model_bytes",
    "mlx_cluster_model_sync_seconds",
    "mlx_cluster_model_sync_copied_bytes",
    "mlx_cluster_model_sync_cable_bytes",
    "mlx_cluster_mac_info",
)


def _plan(reg, plan):
    hosts = plan.get("hosts") or []
    cables = ((plan.get("links") or {}).get("cables")) or []
    topo = plan.get("topology") or {}
    Gauge("mlx_cluster_macs", "Macs in the cluster's plan.", registry=reg).set(len(hosts))
    Gauge("mlx_cluster_cables", "Thunderbolt cables in the cluster's plan.", registry=reg).set(len(cables))
    Info("mlx_cluster_plan", "The plan's backend and whether the cables make a full mesh.", registry=reg).info(
        {"backend": str(topo.get("backend") or "none"), "mesh": "true" if topo.get("mesh") else "false"}
    )


def _preflight(reg, problems):
    g = Gauge(
        "mlx_cluster_preflight_problems",
        "Problems the last preflight found, by check and severity.",
        ["check", "severity"],
        registry=reg,
    )
    counts = {}
    for p in problems:
        if isinstance(p, dict):
            key = (str(p.get("check") or "unknown"), str(p.get("severity") or "unknown"))
            counts[key] = counts.get(key, 0) + 1
    for (check, severity), n in sorted(counts.items()):
        g.labels(check, severity).set(n)


def _net_check(reg, results):
    cables = [c for c in results.get("cables") or [] if isinstance(c, dict) and is_number(c.get("gbps"))]
    if cables:
        bw = Gauge(
            "mlx_cluster_cable_bandwidth_gbps",
            "Each cable's bandwidth alone in the last collective check, Gb/s.",
            ["cable"],
            registry=reg,
        )
        slow = Gauge(
            "mlx_cluster_cable_slow",
            "1 for a cable the last collective check found slow against the others' median, else 0.",
            ["cable"],
            registry=reg,
        )
        ratio = results.get("slow_ratio") if is_number(results.get("slow_ratio")) else preflight_rules.SLOW_RATIO
        slow_names = {c.get("name") or c.get("cable") for c in preflight_rules.slow_cables(cables, ratio)}
        for c in cables:
            name = str(c.get("name") or c.get("cable"))
            bw.labels(name).set(c["gbps"])
            slow.labels(name).set(1 if name in slow_names else 0)
    sweep = [r for r in (results.get("sweep") or {}).get("results") or [] if isinstance(r, dict)]
    sweep = [r for r in sweep if is_number(r.get("bytes")) and is_number(r.get("bus_bandwidth_gbps"))]
    if sweep:
        g = Gauge(
            "mlx_cluster_allsum_bus_bandwidth_gbps",
            "all_sum's bus bandwidth over the whole cluster in the last collective check, by message size, Gb/s.",
            ["bytes"],
            registry=reg,
        )
        for r in sweep:
            g.labels(str(int(r["bytes"]))).set(r["bus_bandwidth_gbps"])


def _bench(reg, runs):
    latest = {}
    for run in sorted(runs, key=lambda r: (r.get("_time") or 0, r.get("_run") or "")):
        key = (str(run.get("backend") or ""), str(run.get("mode") or ""), str(run.get("world_size") or ""))
        latest[key] = run
    if not latest:
        return
    labels = ["backend", "mode", "world_size"]
    gen = Gauge(
        "mlx_cluster_benchmark_generation_tokens_per_second",
        "Generation tokens/s of the latest benchmark run (median of its trials).",
        labels,
        registry=reg,
    )
    prompt = Gauge(
        "mlx_cluster_benchmark_prompt_tokens_per_second",
        "Prompt tokens/s of the latest benchmark run (median of its trials).",
        labels,
        registry=reg,
    )
    peak = Gauge(
        "mlx_cluster_benchmark_peak_memory_bytes",
        "The largest rank's peak memory in the latest benchmark run, bytes.",
        labels,
        registry=reg,
    )
    for key, run in sorted(latest.items()):
        if is_number(run.get("generation_tps")):
            gen.labels(*key).set(run["generation_tps"])
        if is_number(run.get("prompt_tps")):
            prompt.labels(*key).set(run["prompt_tps"])
        mem = run.get("peak_memory_gb")
        mem = [m for m in (mem if isinstance(mem, list) else [mem]) if is_number(m)]
        if mem:
            peak.labels(*key).set(round(max(mem) * GIB))


def _model_sync(reg, record):
    model = str(record.get("model") or "")
    if is_number(record.get("model_bytes")):
        Gauge("mlx_cluster_model_bytes", "The model's size on its source, bytes.", ["model"], registry=reg).labels(
            model
        ).set(record["model_bytes"])
    if is_number(record.get("seconds")):
        Gauge(
            "mlx_cluster_model_sync_seconds",
            "The models stage's whole time in its last run that copied anything, seconds.",
            ["model"],
            registry=reg,
        ).labels(model).set(record["seconds"])
    macs = record.get("macs") if isinstance(record.get("macs"), dict) else {}
    rows = [(h, m) for h, m in sorted(macs.items()) if isinstance(m, dict) and is_number(m.get("bytes"))]
    if rows:
        g = Gauge(
            "mlx_cluster_model_sync_copied_bytes",
            "Bytes each Mac got in that run, by how: thunderbolt (a cable without ssh) or rsync.",
            ["model", "host", "via"],
            registry=reg,
        )
        for host, m in rows:
            g.labels(model, str(host), str(m.get("via") or "")).set(m["bytes"])
    ways = [
        (host, w)
        for host, m in rows
        for w in (m.get("cables") if isinstance(m.get("cables"), list) else [])
        if isinstance(w, dict) and is_number(w.get("bytes"))
    ]
    if ways:
        g = Gauge(
            "mlx_cluster_model_sync_cable_bytes",
            "Bytes each cable carried to each Mac in that run (the copies without ssh; several cables "
            "between two Macs carry one copy together).",
            ["model", "host", "cable"],
            registry=reg,
        )
        for host, w in ways:
            g.labels(model, str(host), str(w.get("cable") or "")).set(w["bytes"])


def _macs(reg, macs, versions):
    hosts = sorted(set(macs) | set(versions))
    if not hosts:
        return
    info = Info("mlx_cluster_mac", "Each Mac's macOS, model and versions.", ["host"], registry=reg)
    for host in hosts:
        facts = macs.get(host) or {}
        os_ = facts.get("os") or {}
        hw = facts.get("hw") or {}
        v = versions.get(host) or {}
        info.labels(host).info(
            {
                "macos": str(os_.get("product_version") or ""),
                "macos_build": str(os_.get("build_version") or ""),
                "model": str(hw.get("model") or ""),
                "python": str(v.get("python") or ""),
                "mlx": str(v.get("mlx") or ""),
                "mlx_lm": str(v.get("mlx_lm") or ""),
            }
        )


def registry(data):
    """A CollectorRegistry with the metrics of `data` (report.collect's, with "macs": the
    discovery facts by host when known)."""
    reg = CollectorRegistry(auto_describe=True)
    if isinstance(data.get("plan"), dict):
        _plan(reg, data["plan"])
    if isinstance(data.get("preflight"), list):
        _preflight(reg, data["preflight"])
    if isinstance(data.get("net_check"), dict):
        _net_check(reg, data["net_check"])
    _bench(reg, [r for r in data.get("bench") or [] if isinstance(r, dict)])
    if isinstance(data.get("model_sync"), dict):
        _model_sync(reg, data["model_sync"])
    macs = data.get("macs") if isinstance(data.get("macs"), dict) else {}
    versions = data.get("versions") if isinstance(data.get("versions"), dict) else {}
    _macs(reg, macs, versions)
    return reg


def text(data):
    """The metrics of `data` in Prometheus's text format (bytes), as node_exporter's textfile
    collector reads it."""
    return generate_latest(registry(data))
