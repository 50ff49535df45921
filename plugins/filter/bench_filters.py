# -*- coding: utf-8 -*-
"""Filters over plugins/plugin_utils/bench_runs.py: the benchmark's launches when it compares
backends (mlx_bench_schedule) and the files they leave on the controller (mlx_bench_results).
The backends' hostfiles come from the plan step: mlx_bench_backends (plan_filters.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.mlx.cluster.plugins.plugin_utils import bench_runs, plan_common
from ansible_collections.mlx.cluster.plugins.plugin_utils.plain import plain

# Each filter is documented in its own file beside this one (plugins/filter/<name>.yml):
# `ansible-doc -t filter mlx.cluster.<name>`.


def _call(filter_name, function, *args):
    try:
        return function(*[plain(a) for a in args])
    except plan_common.PlanError as exc:
        raise AnsibleFilterError("%s: %s" % (filter_name, exc.message)) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("%s: %s: %s" % (filter_name, type(exc).__name__, exc)) from None


def mlx_bench_schedule(modes, backends, rounds=1):
    return _call("mlx_bench_schedule", bench_runs.schedule, modes, backends, rounds)


def mlx_bench_results(runs, run_id, context=None):
    if not isinstance(runs, list):
        raise AnsibleFilterError("mlx_bench_results: expects the list of runs [{run, result}]")
    return _call("mlx_bench_results", bench_runs.result_files, run_id, runs, context or {})


class FilterModule:
    def filters(self):
        return {"mlx_bench_schedule": mlx_bench_schedule, "mlx_bench_results": mlx_bench_results}
