# -*- coding: utf-8 -*-
"""The benchmark's runs when it compares backends (benchmark_backends, benchmark_rounds):
which launches run in which order (``schedule()``), the result files they leave on the
controller (``result_files()``) and the comparison those files carry (``side_by_side()``).

Pure functions with no Ansible import (the filters mlx_bench_schedule and mlx_bench_results,
plugins/filter/bench_filters.py, are their face); the hostfiles of each backend come from the
plan step (planner.side_by_side, the filter mlx_bench_backends).
"""

from __future__ import annotations

import statistics

from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import PlanError

# The comparison's file name after the run id, in artifacts/bench/ beside the runs' files; the
# benchmark's table (roles/benchmark/files/bench_report.py) and the report read it.
SIDE_BY_SIDE_SUFFIX = "-side-by-side.json"


def schedule(modes, entries, rounds=1):
    """The launches, in order: per mode, `rounds` rounds, each running every entry of
    planner.side_by_side once, the order reversed every other round (a load that comes and
    goes on the Macs falls on every backend alike). -> [{mode, round, name, backend, over,
    hostfile_name}]."""
    if isinstance(modes, str) or not isinstance(modes, (list, tuple)) or not modes:
        raise PlanError("benchmark_modes must be a non-empty list, got %r" % (modes,))
    if not isinstance(entries, (list, tuple)) or not entries:
        raise PlanError("expected the backends to run (mlx_bench_backends), got %r" % (entries,))
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise PlanError("benchmark_rounds must be a whole number of at least 1, got %r" % (rounds,))
    out = []
    for mode in modes:
        for r in range(1, rounds + 1):
            for e in entries if r % 2 else list(entries)[::-1]:
                out.append(
                    {
                        "mode": mode,
                        "round": r,
                        "name": e["name"],
                        "backend": e["backend"],
                        "over": e["over"],
                        "hostfile_name": e["hostfile_name"],
                    }
                )
    return out


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def side_by_side(runs):
    """{reference, rounds, modes: {mode: [{name, backend, over, fell_back, runs, prompt_tps,
    generation_tps, prompt_ratio, generation_ratio}]}} from `runs` ([{run: a schedule entry,
    result: the launch's result}]): per backend its tokens/s (the median over rounds of each
    launch's median), and its ratio to the first backend listed (the reference), taken per
    round, then the median: a round where either side has no number counts for neither."""
    names, by = [], {}
    for item in runs:
        run, result = item["run"], item.get("result") or {}
        if run["name"] not in names:
            names.append(run["name"])
        by[(run["mode"], run["round"], run["name"])] = result
    reference = names[0] if names else None
    modes = {}
    for mode in dict.fromkeys(item["run"]["mode"] for item in runs):
        rounds = sorted({item["run"]["round"] for item in runs if item["run"]["mode"] == mode})
        rows = []
        for item in runs:
            run = item["run"]
            if run["mode"] != mode or run["round"] != rounds[0]:
                continue
            row = {
                "name": run["name"],
                "backend": run["backend"],
                "over": run["over"],
                "fell_back": any(bool(by.get((mode, r, run["name"]), {}).get("fallback_from")) for r in rounds),
                "runs": sum(_number(by.get((mode, r, run["name"]), {}).get("generation_tps")) for r in rounds),
            }
            for key in ("prompt_tps", "generation_tps"):
                mine = [by.get((mode, r, run["name"]), {}).get(key) for r in rounds]
                ref = [by.get((mode, r, reference), {}).get(key) for r in rounds]
                values = [v for v in mine if _number(v)]
                ratios = [m / f for m, f in zip(mine, ref) if _number(m) and _number(f) and f > 0]
                row[key] = statistics.median(values) if values else None
                row[key.replace("_tps", "_ratio")] = round(statistics.median(ratios), 3) if ratios else None
            rows.append(row)
        modes[mode] = sorted(rows, key=lambda row: names.index(row["name"]))
    return {"reference": reference, "rounds": max((item["run"]["round"] for item in runs), default=0), "modes": modes}


def result_files(run_id, runs, context=None):
    """The files the run leaves in artifacts/bench/: [{name, data}], one per launch
    (``<run id>-<backend>-w<ranks>-<mode>.json``: the launch's result and `context`; when
    compared, also compared_as, over and round), and with more than one backend or round the comparison
    (``<run id>-side-by-side.json``). One backend in one round keeps the names of a plain run;
    otherwise the name is the backend as asked (``ring-lan``, or ``jaccl`` that fell back to the
    ring) and ``-r<round>``."""
    several = len({item["run"]["name"] for item in runs}) > 1 or any(item["run"]["round"] > 1 for item in runs)
    out = []
    for item in runs:
        run, result = item["run"], dict(item.get("result") or {})
        backend = run["name"] if several else result.get("backend", run["backend"])
        suffix = "-r%d" % run["round"] if several else ""
        data = dict(result, **(context or {}))
        if several:
            data.update(compared_as=run["name"], over=run["over"], round=run["round"])
        out.append(
            {
                "name": "%s-%s-w%s-%s%s.json" % (run_id, backend, result.get("world_size", "?"), run["mode"], suffix),
                "data": data,
            }
        )
    if several:
        out.append({"name": run_id + SIDE_BY_SIDE_SUFFIX, "data": dict(side_by_side(runs), run_id=run_id)})
    return out
