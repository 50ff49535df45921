"""The benchmark's launches when it compares backends (bench_runs): the order (every backend
once per round, reversed every other round), the comparison (tokens/s per backend, the ratio to
the first one per round, then the median) and the files left on the controller (a plain run's
names unchanged)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.mlx.cluster.plugins.filter.bench_filters import mlx_bench_results, mlx_bench_schedule
from ansible_collections.mlx.cluster.plugins.plugin_utils import bench_runs, plan_common

JACCL = {"name": "jaccl", "backend": "jaccl", "over": "thunderbolt", "hostfile_name": "hostfile.json", "hostfile": {}}
LAN = {"name": "ring-lan", "backend": "ring", "over": "lan", "hostfile_name": "hostfile-ring-lan.json", "hostfile": {}}


def result(backend, prompt, gen, mode="tensor", **kw):
    return dict(backend=backend, world_size=2, mode=mode, prompt_tps=prompt, generation_tps=gen, **kw)


def test_every_backend_once_per_round_the_order_reversed_every_other_round():
    order = [(r["mode"], r["round"], r["name"]) for r in bench_runs.schedule(["tensor", "pipeline"], [JACCL, LAN], 3)]
    assert order == [
        ("tensor", 1, "jaccl"),
        ("tensor", 1, "ring-lan"),
        ("tensor", 2, "ring-lan"),
        ("tensor", 2, "jaccl"),
        ("tensor", 3, "jaccl"),
        ("tensor", 3, "ring-lan"),
        ("pipeline", 1, "jaccl"),
        ("pipeline", 1, "ring-lan"),
        ("pipeline", 2, "ring-lan"),
        ("pipeline", 2, "jaccl"),
        ("pipeline", 3, "jaccl"),
        ("pipeline", 3, "ring-lan"),
    ]
    first = bench_runs.schedule(["tensor"], [LAN], 1)
    assert first == [
        {
            "mode": "tensor",
            "round": 1,
            "name": "ring-lan",
            "backend": "ring",
            "over": "lan",
            "hostfile_name": "hostfile-ring-lan.json",
        }
    ]


@pytest.mark.parametrize(
    ("modes", "entries", "rounds", "message"),
    [
        ([], [JACCL], 1, "benchmark_modes must be a non-empty list"),
        (["tensor"], [], 1, "expected the backends to run"),
        (["tensor"], [JACCL], 0, "benchmark_rounds must be a whole number of at least 1, got 0"),
        (["tensor"], [JACCL], True, "benchmark_rounds must be a whole number"),
    ],
)
def test_a_schedule_that_cannot_run_is_refused(modes, entries, rounds, message):
    with pytest.raises(plan_common.PlanError, match=message):
        bench_runs.schedule(modes, entries, rounds)
    with pytest.raises(AnsibleFilterError, match="mlx_bench_schedule: " + message):
        mlx_bench_schedule(modes, entries, rounds)


def runs_of(results):
    """[{run, result}] in schedule order from {(round, name): result}."""
    return [
        {"run": run, "result": results.get((run["round"], run["name"]))}
        for run in bench_runs.schedule(["tensor"], [JACCL, LAN], 2)
    ]


def test_the_comparison_takes_the_ratio_per_round_then_the_median():
    runs = runs_of(
        {
            (1, "jaccl"): result("jaccl", 400.0, 30.0),
            (1, "ring-lan"): result("ring", 100.0, 10.0),
            (2, "ring-lan"): result("ring", 50.0, 9.0),
            (2, "jaccl"): result("jaccl", 100.0, 18.0),
        }
    )
    out = bench_runs.side_by_side(runs)
    assert (out["reference"], out["rounds"]) == ("jaccl", 2)
    jaccl, lan = out["modes"]["tensor"]
    assert (jaccl["name"], jaccl["prompt_tps"], jaccl["generation_tps"]) == ("jaccl", 250.0, 24.0)
    assert (jaccl["prompt_ratio"], jaccl["generation_ratio"]) == (1.0, 1.0)
    # per round 0.25 and 0.5 (prompt), 1/3 and 1/2 (generation); the ratio of the medians would be 0.3 and 0.396
    assert (lan["prompt_ratio"], lan["generation_ratio"]) == (0.375, round((1 / 3 + 1 / 2) / 2, 3))
    assert (lan["over"], lan["runs"], lan["fell_back"]) == ("lan", 2, False)


def test_a_launch_without_numbers_counts_for_neither_side_and_a_fallback_is_said():
    runs = runs_of(
        {
            (1, "jaccl"): result("ring", 400.0, 40.0, fallback_from="jaccl"),
            (1, "ring-lan"): result("ring", 100.0, 10.0),
            (2, "ring-lan"): result("ring", 50.0, 5.0),
            (2, "jaccl"): {},
        }
    )
    jaccl, lan = bench_runs.side_by_side(runs)["modes"]["tensor"]
    assert (jaccl["fell_back"], jaccl["runs"], lan["runs"]) == (True, 1, 2)
    assert (lan["generation_tps"], lan["generation_ratio"]) == (7.5, 0.25)  # round 2 has no reference


def test_a_plain_run_keeps_its_file_names_a_compared_one_names_backend_and_round():
    plain_run = [{"run": bench_runs.schedule(["tensor"], [JACCL], 1)[0], "result": result("ring", 1.0, 2.0)}]
    (only,) = mlx_bench_results(plain_run, "abc", {"topology": "t"})
    # a plan that fell back keeps the backend it ran on in the name, as before; nothing is added
    assert only["name"] == "abc-ring-w2-tensor.json"
    assert only["data"] == dict(result("ring", 1.0, 2.0), topology="t")
    runs = runs_of({(r, n): result("x", 1.0, 2.0) for r in (1, 2) for n in ("jaccl", "ring-lan")})
    files = mlx_bench_results(runs, "abc")
    assert [f["name"] for f in files] == [
        "abc-jaccl-w2-tensor-r1.json",
        "abc-ring-lan-w2-tensor-r1.json",
        "abc-ring-lan-w2-tensor-r2.json",
        "abc-jaccl-w2-tensor-r2.json",
        "abc-side-by-side.json",
    ]
    assert {k: files[1]["data"][k] for k in ("compared_as", "over", "round")} == {
        "compared_as": "ring-lan",
        "over": "lan",
        "round": 1,
    }
    assert files[-1]["data"]["run_id"] == "abc" and files[-1]["data"]["reference"] == "jaccl"
    with pytest.raises(AnsibleFilterError, match="mlx_bench_results: expects the list of runs"):
        mlx_bench_results({}, "abc")
