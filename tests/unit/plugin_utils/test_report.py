"""The cluster report: artifacts -> one self-contained page (plugin_utils/report.py), and the
action that writes it only when it changed (plugins/action/mlx_cluster_report.py)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from unittest import mock

import pytest
import yaml

from ansible_collections.mlx.cluster.plugins.plugin_utils import (
    plan_addresses,
    plan_cables,
    plan_topology,
    preflight,
    report,
)
from tests.unit.filter.controller import controller_imports
from tests.unit.filter.planner_synth import make_facts, mesh_cables
from tests.unit.plugin_utils.report_data import FIXTURE, NEW_RUN, OLD_RUN, artifacts, fixture_data

ROOT = Path(__file__).resolve().parents[3]


def cable_lines(page):
    return re.findall(r'<line class="cable[^"]*" data-cable="([^"]+)"[^>]*stroke="(#[0-9a-f]+)"', page)


def test_the_demo_data_makes_a_whole_page(tmp_path):
    data = fixture_data(tmp_path)
    assert data["notes"] == [] and len(data["bench"]) == 4
    page = report.render(data)
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 4  # topology, per-cable, 2 run charts
    assert [c for c, _ in cable_lines(page)] == sorted(c["id"] for c in data["plan"]["links"]["cables"])
    for host in ("m1", "m2", "m3", "m4"):
        assert f'data-host="{host}"' in page
    for table in ("cables", "preflight", "sweep", "per-cable", "bench", "versions"):
        assert f'<table class="{table}">' in page, table
    # preflight.json of the demo's first run: the Thunderbolt Bridge holds the cabled ports
    assert page.count('<td class="warn">warning</td><td>thunderbolt_bridge</td>') == 4
    assert "10.208.94.41" in page and "80 Gb/s TB5" in page  # an address and a speed on the picture
    assert "0.32.4" in page and "26.2 (25C56)" in page  # mlx and macOS per Mac
    # the runs oldest first on the charts, newest first in the table
    chart = re.search(r'aria-label="Generation tokens/s per run[^"]*".*?</svg>', page, re.S).group(0)
    assert chart.index(OLD_RUN[:6]) < chart.index(NEW_RUN[:6])
    rows = re.findall(r"<tr><td>([0-9a-z]{8})</td>", page.split('<table class="bench">')[1])
    assert rows[:2] == [NEW_RUN, NEW_RUN] and rows[2:] == [OLD_RUN, OLD_RUN]


def test_benchmark_results_with_trials_show_median_spread_and_settings(tmp_path):
    """A result of the mlx_lm.benchmark-style script (trials, stats, versions; the role's cables,
    topology and macOS) beside one of the older script: both in the table and on the charts."""
    data = fixture_data(tmp_path)
    for run in data["bench"]:
        if run["_run"].startswith(NEW_RUN):
            gen = run["generation_tps"]
            run.update(
                num_trials=5,
                warmup=1,
                prompt_source="random",
                fast_synch=False,
                trials=[{"prompt_tps": 1.0, "generation_tps": gen, "total_time": 2.0}] * 5,
                stats={
                    "generation_tps": {"median": gen, "mean": gen, "min": gen * 0.5, "max": gen * 1.5, "stdev": 0.1},
                    "prompt_tps": {"median": 1.0, "mean": 1.0, "min": 1.0, "max": 1.0, "stdev": 0.0},
                },
                versions={"mlx": "0.32.4", "mlx_lm": "0.32.2", "python": "3.11.7"},
                topology="4 hosts, 6 cables; full mesh",
                cables=[{"id": "m1:en2~m2:en2"}],
                macos={"m1": "26.2"},
                macos_build={"m1": "25C56"},
            )
    page = report.render(data)
    table = page.split('<table class="bench">')[1].split("</table>")[0]
    headers = re.findall(r"<th>([^<]*)</th>", table)
    for header in ("trials", "gen tok/s min–max", "FAST_SYNCH", "mlx / mlx-lm", "prompt_source", "warmup"):
        assert header in headers, header
    for hidden in ("stats", "trials_", "versions", "cables", "macos", "topology"):
        assert hidden not in headers
    assert "0.32.4 / 0.32.2" in table and "median" not in table and "{" not in table
    newest = re.findall(r"<tr><td>%s</td>.*?</tr>" % NEW_RUN, table)[0]
    assert re.search(r"<td>5</td>", newest) and "–" in newest
    chart = re.search(r'aria-label="Generation tokens/s per run[^"]*".*?</svg>', page, re.S).group(0)
    assert chart.count('<line class="range"') == 2  # the new run's two modes; the old run has none


def test_a_run_that_fell_back_to_the_ring_says_so_with_the_reason(tmp_path):
    data = fixture_data(tmp_path)
    reason = "RDMA could not be brought up (backend jaccl) on m2 (rank 1): cable(s) m2:en2 <-> m1:en2."
    for run in data["bench"]:
        if run["_run"].startswith(NEW_RUN):
            run.update(backend="ring", fallback_from="jaccl", fallback_reason=reason)
    data["net_check"]["sweep"].update(backend="ring", fallback_from="jaccl", fallback_reason=reason)
    page = report.render(data)
    table = page.split('<table class="bench">')[1].split("</table>")[0]
    assert "fell back from" in re.findall(r"<th>([^<]*)</th>", table) and "fallback_reason" not in table
    assert "<td>jaccl</td>" in re.findall(r"<tr><td>%s</td>.*?</tr>" % NEW_RUN, table)[0]
    assert (
        "Run %s fell back from jaccl to the ring backend: %s"
        % (NEW_RUN, reason.replace("<", "&lt;").replace(">", "&gt;"))
    ) in page
    assert "Fell back from jaccl to the ring backend" in page.split('id="net_check"')[1]
    assert "fell back" not in report.render(fixture_data(tmp_path / "plain")).lower()


def test_the_page_loads_nothing_from_anywhere(tmp_path):
    page = report.render(fixture_data(tmp_path))
    for needle in ("<script", "<link", "<img", "<iframe", "src=", "href=", "url(", "@import"):
        assert needle not in page, needle
    # the only address in the page is the SVG namespace, which is a name, not a load
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) == {"http://www.w3.org/2000/svg"}


def test_same_data_same_page(tmp_path):
    data = fixture_data(tmp_path)
    assert report.render(copy.deepcopy(data)) == report.render(data)


EVIL = "<script>alert(\"x\")</script> & 'q'"


def test_every_text_from_the_data_is_escaped():
    plan = {
        "hosts": [EVIL, "m2"],
        "links": {
            "cables": [
                {
                    "id": "c1",
                    "a": {"host": EVIL, "iface": "en2" + EVIL},
                    "b": {"host": "m2", "iface": "en2"},
                    "speed_gbps": 80,
                    "link_class": "TB5",
                    "sighting": "both",
                    "via": [EVIL],
                }
            ]
        },
        "topology": {"hosts": [EVIL, "m2"], "backend": EVIL, "message": EVIL, "backend_fix": EVIL, "missing": []},
        "ip_plan": {"cables": {}},
    }
    page = report.render(
        {
            "plan": plan,
            "macs": {EVIL: {"os": {"product_version": EVIL}}},
            "preflight": [{"severity": "error", "check": EVIL, "host": EVIL, "port": EVIL, "msg": EVIL, "fix": EVIL}],
            "net_check": {
                "sweep": {"backend": EVIL, "world_size": 2, "results": [{"bytes": EVIL, "ok": True}]},
                "cables": [{"cable": "c1", "name": EVIL, "gbps": 1.0}],
            },
            "bench": [
                {
                    "_run": EVIL,
                    "_time": EVIL,
                    "backend": EVIL,
                    "world_size": 2,
                    "mode": EVIL,
                    "generation_tps": 1.0,
                    EVIL: EVIL,
                }
            ],
            "versions": {EVIL: {"mlx": EVIL}},
            "notes": [EVIL],
        }
    )
    assert "<script" not in page and "alert(&quot;x&quot;)" in page
    assert page.count("&lt;script&gt;") > 20


def test_no_artifacts_yet_every_section_says_what_to_run():
    page = report.render({})
    for text in (
        "No plan yet",
        "Preflight has not run yet",
        "--tags rdma_check",
        "The collective check has not run yet",
        "--tags net_check",
        "No benchmark yet",
        "No Mac known yet",
    ):
        assert text in page, text
    assert report.collect("/nonexistent/artifacts") == {"notes": [], "bench": []}


def test_a_plan_without_benchmark_or_collective_check(tmp_path):
    data = fixture_data(tmp_path)
    for key in ("bench", "net_check", "versions"):
        data.pop(key)
    page = report.render(data)
    assert "No benchmark yet" in page and "The collective check has not run yet" in page
    assert "the env stage, which has not run yet" in page
    assert len(cable_lines(page)) == 6 and not re.search(r"measured [0-9]", page)


def test_a_preflight_error_is_shown_with_its_fix(tmp_path):
    data = fixture_data(tmp_path)
    data["preflight"] = [
        {
            "severity": "warning",
            "check": "thunderbolt_bridge",
            "host": "m1",
            "port": None,
            "msg": "the Thunderbolt Bridge on m1 holds cabled ports en2",
            "fix": "the network stage takes them out",
        },
        {
            "severity": "error",
            "check": "rdma",
            "host": "m3",
            "port": None,
            "msg": "RDMA is disabled on m3 (rdma_ctl status: disabled)",
            "fix": "run `rdma_ctl enable` in Recovery",
        },
    ]
    page = report.render(data)
    assert '<div class="card bad"><div class="k">preflight</div><div class="v">1 error(s), 1 warning(s)' in page
    table = page.split('<table class="preflight">')[1].split("</table>")[0]
    assert table.index("RDMA is disabled on m3") < table.index("Thunderbolt Bridge on m1")  # errors first
    assert '<td class="bad">error</td><td>rdma</td><td>m3</td>' in table
    assert "run `rdma_ctl enable` in Recovery" in table


def test_slow_tb4_and_missing_cables_are_highlighted(tmp_path):
    data = fixture_data(tmp_path)
    plan = data["plan"]
    gone = "m1:en3~m3:en2"
    plan["links"]["cables"] = [c for c in plan["links"]["cables"] if c["id"] != gone]
    plan["topology"].update(mesh=False, missing=[["m1", "m3"]])
    tb4 = next(c for c in plan["links"]["cables"] if c["id"] == "m2:en4~m4:en3")
    tb4.update(speed_gbps=40, link_class="TB4")
    data["net_check"]["cables"] = [
        dict(c, gbps=0.05, runs=[0.04, 0.05]) if c["cable"] == "m3:en4~m4:en4" else c
        for c in data["net_check"]["cables"]
        if c["cable"] != gone
    ]
    page = report.render(data)
    colors = dict(cable_lines(page))
    assert colors["m3:en4~m4:en4"] == report.COLORS["slow"]
    assert colors["m2:en4~m4:en3"] == report.COLORS["tb4"]
    assert colors["m1:en2~m2:en2"] == report.COLORS["cable"]
    assert 'class="cable slow" data-cable="m3:en4~m4:en4"' in page
    assert '<line class="missing"' in page and "missing: m1 &lt;-&gt; m3" in page
    assert "Missing cables (host pairs without one): m1 &lt;-&gt; m3" in page
    rows = page.split('<table class="cables">')[1].split("</table>")[0]
    assert re.search(r"m3:en4</td>.*?<td class=\"bad\">slow in the collective check</td>", rows)
    # measured again before it was called slow: the table says its best of the two
    assert re.search(r"m3:en4</td>.*?<td class=\"bad\">0\.05 \(best of 2\) \(slow\)</td>", rows)
    assert re.search(r"m2:en4</td>.*?<td class=\"warn\">TB4</td>", rows)
    assert "1 slow cable(s)" in page
    # only the slow one, by the run's own ratio
    per_cable = page.split('<table class="per-cable">')[1].split("</table>")[0]
    assert per_cable.count("slow: below") == 1


def test_a_dense_mesh_labels_only_the_cables_with_a_finding():
    hosts, cables = mesh_cables(7)  # 21 cables
    cables[0].update(speed=40, speed_b=40)  # one TB4 among them
    links = plan_cables.links(make_facts(hosts, cables))
    plan = {
        "hosts": hosts,
        "links": links,
        "topology": plan_topology.topology(links, hosts, rdma=True),
        "ip_plan": plan_addresses.ip_plan(links),
    }
    svg = re.search(r'<svg[^>]*class="topology".*?</svg>', report.render({"plan": plan}), re.S).group(0)
    assert len(cable_lines(svg)) == 21
    assert "21 cables: only those with a finding are labelled" in svg
    assert re.findall(r">(\d+ Gb/s TB\d)<", svg) == ["40 Gb/s TB4"]
    assert "10.208." not in svg  # no address labels: they are in the table


def test_per_cable_results_without_ids_are_matched_by_name(tmp_path):
    """results.json of a run before the ids were saved: {name, gbps}, no slow_ratio (0.5)."""
    data = fixture_data(tmp_path)
    data["net_check"] = {
        "cables": [
            {"name": r["name"], "gbps": 0.1 if r["cable"] == "m1:en2~m2:en2" else 5.0}
            for r in data["net_check"]["cables"]
        ]
    }
    colors = dict(cable_lines(report.render(data)))
    assert colors["m1:en2~m2:en2"] == report.COLORS["slow"]
    assert sum(c == report.COLORS["slow"] for c in colors.values()) == 1


def test_versions_that_differ_are_marked(tmp_path):
    data = fixture_data(tmp_path)
    data["versions"]["m3"]["mlx"] = "0.30.0"
    data["macs"]["m2"]["os"]["build_version"] = "25C5048a"
    table = report.render(data).split('<table class="versions">')[1].split("</table>")[0]
    assert '<td class="bad">0.30.0</td>' in table and '<td class="bad">26.2 (25C5048a)</td>' in table
    assert table.count('class="bad"') == 2


def test_collect_names_an_unreadable_file_and_goes_on(tmp_path):
    folder = artifacts(tmp_path)
    (folder / "preflight.json").write_text("{not json")
    (folder / "bench" / "zzz-broken.json").write_text("[")
    data = report.collect(str(folder))
    assert "preflight" not in data and len(data["bench"]) == 4
    assert len(data["notes"]) == 2 and all("unreadable" in n for n in data["notes"])
    assert "preflight.json is unreadable" in report.render(data)


# --- the slow-cable rule: one rule for net_check's failure and the report ----------------------


def test_slow_cables_below_the_ratio_of_the_median():
    res = [
        {"name": "a", "gbps": 10.0},
        {"name": "b", "gbps": 9.0},
        {"name": "c", "gbps": 4.0},
        {"name": "d", "gbps": None},
    ]
    assert [r["name"] for r in preflight.slow_cables(res, 0.5)] == ["c"]
    assert preflight.slow_cables(res, 0.5)[0]["median_gbps"] == 9.0
    assert preflight.slow_cables(res, 0.3) == [] and preflight.slow_cables([], 0.5) == []


def test_net_check_default_ratio_is_the_rules_default():
    defaults = yaml.safe_load((ROOT / "roles" / "net_check" / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROOT / "roles" / "net_check" / "meta" / "argument_specs.yml").read_text())
    assert defaults["net_check_slow_ratio"] == preflight.SLOW_RATIO
    assert specs["argument_specs"]["main"]["options"]["net_check_slow_ratio"]["default"] == preflight.SLOW_RATIO


# --- the action: written only when it changed, nothing in check mode -----------------------------


def run_action(args, check_mode=False, diff=False):
    with controller_imports():
        from ansible_collections.mlx.cluster.plugins.action.mlx_cluster_report import ActionModule
    task = mock.MagicMock(args=args, check_mode=check_mode, async_val=0, diff=diff)
    task.get_validated_value.return_value = None
    action = ActionModule(
        task, mock.MagicMock(), mock.MagicMock(check_mode=check_mode), loader=None, templar=None, shared_loader_obj=None
    )
    return action.run(task_vars={})


def test_the_action_writes_only_when_the_page_changed(tmp_path):
    folder = artifacts(tmp_path)
    path = folder / report.REPORT_NAME
    plan = json.loads((folder / "plan.json").read_text())
    facts = json.loads((FIXTURE / "facts.json").read_text())

    res = run_action({"artifacts_dir": str(folder), "plan": plan, "facts": facts}, check_mode=True)
    assert res["changed"] and res["path"] == str(path) and not path.exists()  # check mode: nothing

    res = run_action({"artifacts_dir": str(folder), "plan": plan, "facts": facts})
    assert res["changed"] and path.is_file() and oct(path.stat().st_mode & 0o777) == "0o600"
    first = path.read_bytes()
    assert b"as of this run" in first and b"Mac Studio (Mac16,9)" in first

    assert not run_action({"artifacts_dir": str(folder), "plan": plan, "facts": facts})["changed"]
    assert not run_action({"artifacts_dir": str(folder), "plan": plan, "facts": facts}, check_mode=True)["changed"]

    problems = [
        {"severity": "error", "check": "disk", "host": "m2", "port": None, "msg": "m2 is full", "fix": "free it"}
    ]
    (folder / "preflight.json").write_text(json.dumps(problems))
    res = run_action({"artifacts_dir": str(folder), "plan": plan, "facts": facts})
    assert res["changed"] and b"m2 is full" in path.read_bytes()


def test_the_action_makes_the_directory_and_names_bad_arguments(tmp_path):
    with controller_imports():
        from ansible.errors import AnsibleActionFail
    folder = tmp_path / "new" / "artifacts"
    assert run_action({"artifacts_dir": str(folder)})["changed"] and (folder / "report.html").is_file()
    with pytest.raises(AnsibleActionFail, match="artifacts_dir must be"):
        run_action({})
    with pytest.raises(AnsibleActionFail, match="facts must be a mapping"):
        run_action({"artifacts_dir": str(folder), "facts": ["m1"]})


def test_every_run_keeps_the_artifacts_private_without_following_links(tmp_path):
    """A directory the user made before the toolkit (0755), a file copied in (0644) and a
    subdirectory: made private on every run (check mode: named and shown with --diff, not
    changed); a link's target outside is left alone."""
    folder = tmp_path / "artifacts"
    (folder / "bench").mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("not ours")
    for path, mode in ((folder, 0o755), (folder / "bench", 0o775), (outside, 0o644)):
        path.chmod(mode)
    (folder / "plan.json").write_text("{}")
    (folder / "plan.json").chmod(0o644)
    (folder / "bench" / "run.json").write_text("{}")
    (folder / "bench" / "run.json").chmod(0o740)
    (folder / "link").symlink_to(outside)

    def modes():
        return {
            p: oct(p.stat().st_mode & 0o777)
            for p in (folder, folder / "bench", folder / "plan.json", folder / "bench" / "run.json", outside)
        }

    before = modes()
    res = run_action({"artifacts_dir": str(folder)}, check_mode=True, diff=True)
    assert res["changed"] and modes() == before
    assert {(m["path"], m["mode"], m["set"]) for m in res["modes"]} == {
        (str(folder), "0755", "0700"),
        (str(folder / "bench"), "0775", "0700"),
        (str(folder / "plan.json"), "0644", "0600"),
        (str(folder / "bench" / "run.json"), "0740", "0700"),
    }
    (shown,) = res["diff"]  # --check --diff: the modes before and after, nothing changed
    assert shown["before_header"] == shown["after_header"] == f"{folder} (modes)"
    assert f"0755 {folder}\n" in shown["before"] and f"0700 {folder}\n" in shown["after"]
    assert f"0644 {folder / 'plan.json'}\n" in shown["before"] and f"0600 {folder / 'plan.json'}\n" in shown["after"]
    assert len(shown["before"].splitlines()) == len(shown["after"].splitlines()) == 4
    assert "diff" not in run_action({"artifacts_dir": str(folder)}, check_mode=True)  # without --diff
    assert run_action({"artifacts_dir": str(folder)})["changed"]
    assert modes() == {
        folder: "0o700",
        folder / "bench": "0o700",
        folder / "plan.json": "0o600",
        folder / "bench" / "run.json": "0o700",
        outside: "0o644",
    }
    again = run_action({"artifacts_dir": str(folder)}, diff=True)
    assert not again["changed"] and again["modes"] == [] and "diff" not in again


def test_every_run_writes_the_metrics_beside_the_report_and_to_a_textfile_directory(tmp_path):
    """artifacts/metrics.prom (0600) with the report, only when a number changed; with
    metrics_textfile_dir, node_exporter's mlx_cluster.prom there too (0644, another user reads
    it); nothing in check mode; a textfile directory that is not there is named."""
    with controller_imports():
        from ansible.errors import AnsibleActionFail
    folder = artifacts(tmp_path)
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    args = {"artifacts_dir": str(folder), "metrics_textfile_dir": str(textfiles)}
    dry = run_action(args, check_mode=True)
    assert dry["changed"] and not (folder / "metrics.prom").exists() and not list(textfiles.iterdir())
    res = run_action(args)
    prom = folder / "metrics.prom"
    assert res["changed"] and res["metrics"] == str(prom)
    assert oct(prom.stat().st_mode & 0o777) == "0o600"
    assert b"mlx_cluster_cable_bandwidth_gbps" in prom.read_bytes()
    shared = textfiles / "mlx_cluster.prom"
    assert shared.read_bytes() == prom.read_bytes() and oct(shared.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in textfiles.iterdir()] == ["mlx_cluster.prom"]  # no temporary file left
    assert not run_action(args)["changed"]
    (folder / "net_check" / "results.json").write_text(
        json.dumps({"cables": [{"cable": "m1:en2~m2:en2", "name": "m1:en2 <-> m2:en2", "gbps": 9.5}]})
    )
    assert run_action(args)["changed"] and b" 9.5" in shared.read_bytes()
    with pytest.raises(AnsibleActionFail, match="metrics_textfile_dir .* is not a directory"):
        run_action({"artifacts_dir": str(folder), "metrics_textfile_dir": str(tmp_path / "none")})


def test_a_controller_without_prometheus_client_still_gets_its_report_and_the_fix(tmp_path, monkeypatch):
    """A controller set up before the metrics (no prometheus-client in its Python): the report is
    written, the run does not fail, a warning names the fix."""
    import sys as _sys

    with controller_imports():
        from ansible_collections.mlx.cluster.plugins.action.mlx_cluster_report import ActionModule
    monkeypatch.setattr(_sys.modules[ActionModule.__module__], "metrics", None)
    folder = artifacts(tmp_path)
    res = run_action({"artifacts_dir": str(folder)})
    assert res["changed"] and (folder / "report.html").is_file() and not (folder / "metrics.prom").exists()
    assert res["metrics"] is None
    assert any("run scripts/controller.sh again" in w for w in res["warnings"]), res


def test_a_run_that_compared_backends_is_shown_side_by_side_with_the_ratio(tmp_path):
    """The latest comparison (artifacts/bench/<run>-side-by-side.json) leads the benchmark section;
    the ring over the cables and the ring over the LAN are two series, not one 'ring'."""
    art = artifacts(tmp_path)
    bench = art / "bench"
    bench.mkdir(exist_ok=True)
    for name, over, gen in (("ring", "thunderbolt", 40.0), ("ring-lan", "lan", 10.0)):
        run = {"backend": "ring", "compared_as": name, "over": over, "round": 1, "world_size": 2}
        run.update(mode="tensor", prompt_tps=100.0, generation_tps=gen)
        (bench / f"cmp12345-{name}-w2-tensor-r1.json").write_text(json.dumps(run))
    rows = [
        {"name": "ring", "over": "thunderbolt", "prompt_tps": 100.0, "generation_tps": 40.0, "generation_ratio": 1.0},
        {"name": "ring-lan", "over": "lan", "prompt_tps": 100.0, "generation_tps": 10.0, "generation_ratio": 0.25},
    ]
    compare = {"run_id": "cmp12345", "reference": "ring", "rounds": 2, "modes": {"tensor": rows}}
    (bench / "cmp12345-side-by-side.json").write_text(json.dumps(compare))
    page = report.render(report.collect(str(art)))
    section = page.split('id="benchmark"')[1]
    assert "Backends side by side (run cmp12345, 2 round(s); ratios to ring, per round, then the median)" in section
    table = section.split('<table class="bench">')[1].split("</table>")[0]
    cells = ["tensor", "ring-lan", "lan", "100.00", "10.00", "-", "0.25x"]
    assert "<tr>%s</tr>" % "".join("<td>%s</td>" % c for c in cells) in table
    chart = re.search(r'aria-label="Generation tokens/s per run[^"]*".*?</svg>', page, re.S).group(0)
    assert "ring-lan ×2 tensor" in chart and "ring ×2 tensor" in chart
    assert "side by side" not in report.render(fixture_data(tmp_path / "plain"))
