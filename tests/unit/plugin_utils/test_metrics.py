"""plugins/plugin_utils/metrics.py: the demo's artifacts (tests/fixtures/report/mesh4) as the
Prometheus text node_exporter's textfile collector reads, read back with prometheus_client's
own parser and checked by promtool (Debian's prometheus package, installed by the set-up)."""

from __future__ import annotations

import shutil
import subprocess

from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.mlx.cluster.plugins.plugin_utils import metrics
from tests.unit.plugin_utils.report_data import NEW_RUN, fixture_data


def samples(text):
    out = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_the_demos_artifacts_as_metrics(tmp_path):
    data = fixture_data(tmp_path)
    got = samples(metrics.text(data))
    assert got[("mlx_cluster_macs", ())] == 4 and got[("mlx_cluster_cables", ())] == 6
    assert got[("mlx_cluster_plan_info", (("backend", "ring"), ("mesh", "true")))] == 1
    # each cable alone in the collective check, and the report's slow rule (0.2 of the median here)
    assert got[("mlx_cluster_cable_bandwidth_gbps", (("cable", "m1:en2 <-> m2:en2"),))] == 3.608
    assert got[("mlx_cluster_cable_slow", (("cable", "m1:en3 <-> m3:en2"),))] == 0
    assert got[("mlx_cluster_allsum_bus_bandwidth_gbps", (("bytes", "1048576"),))] == 0.648
    # the latest benchmark run per backend, mode and world size (the older run's numbers are not shown)
    (latest,) = [r for r in data["bench"] if r["_run"].startswith(NEW_RUN) and r["mode"] == "tensor"]
    key = (("backend", "ring"), ("mode", "tensor"), ("world_size", "4"))
    assert got[("mlx_cluster_benchmark_generation_tokens_per_second", key)] == latest["generation_tps"]
    assert got[("mlx_cluster_benchmark_prompt_tokens_per_second", key)] == latest["prompt_tps"]
    assert got[("mlx_cluster_benchmark_peak_memory_bytes", key)] == round(max(latest["peak_memory_gb"]) * 2**30)
    # the models stage's last run that copied: its time, the model's size, each Mac's bytes and how
    assert got[("mlx_cluster_model_sync_seconds", (("model", "Qwen3-0.6B-4bit"),))] == 16.4
    assert got[("mlx_cluster_model_bytes", (("model", "Qwen3-0.6B-4bit"),))] == 209715200
    copied = {
        dict(k[1])["host"]: (dict(k[1])["via"], v)
        for k, v in got.items()
        if k[0] == "mlx_cluster_model_sync_copied_bytes"
    }
    assert copied == {"m1": ("rsync", 0), **{h: ("thunderbolt", 209715200) for h in ("m2", "m3", "m4")}}
    # and what each cable carried, where a Mac's senders said (m2: two cables from m1)
    carried = {
        (dict(k[1])["host"], dict(k[1])["cable"]): v
        for k, v in got.items()
        if k[0] == "mlx_cluster_model_sync_cable_bytes"
    }
    assert carried == {("m2", "m1:en2 <-> m2:en2"): 120000000, ("m2", "m1:en5 <-> m2:en5"): 89715200}
    # every preflight finding counted under its check and severity
    counts = {k[1]: v for k, v in got.items() if k[0] == "mlx_cluster_preflight_problems"}
    assert sum(counts.values()) == len(data["preflight"])
    info = [dict(k[1]) for k in got if k[0] == "mlx_cluster_mac_info"]
    assert {i["host"] for i in info} == {"m1", "m2", "m3", "m4"}
    assert all(i["macos"] == "26.2" and i["mlx"] == "0.32.4" and i["model"] == "Mac16,9" for i in info), info
    # every name is one the module lists (the dashboard's test reads that list)
    assert {k[0].removesuffix("_info") for k in got} <= {n.removesuffix("_info") for n in metrics.NAMES}


def test_a_slow_cable_is_flagged_and_the_text_is_the_same_for_the_same_artifacts(tmp_path):
    data = fixture_data(tmp_path)
    data["net_check"]["cables"][1]["gbps"] = 0.1  # far below the others' median
    text = metrics.text(data)
    assert text == metrics.text(data)  # no clock: written again only when a number changes
    got = samples(text)
    assert got[("mlx_cluster_cable_slow", (("cable", "m1:en3 <-> m3:en2"),))] == 1
    assert got[("mlx_cluster_cable_slow", (("cable", "m1:en2 <-> m2:en2"),))] == 0


def test_no_artifacts_yet_gives_an_empty_but_valid_text():
    assert samples(metrics.text({"bench": [], "notes": []})) == {}


def test_promtool_accepts_the_text(tmp_path):
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: bash scripts/bootstrap.sh installs Debian's prometheus package"
    res = subprocess.run(
        [promtool, "check", "metrics"], input=metrics.text(fixture_data(tmp_path)), capture_output=True, timeout=60
    )
    assert res.returncode == 0, (res.stdout + res.stderr).decode()
