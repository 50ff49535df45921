"""The end-to-end runner's reading of a run's events (tests/e2e/runner.py), on made-up events."""

from __future__ import annotations

from tests.e2e.runner import Run


def ok(play, task, host, **res):
    return {"event": "runner_on_ok", "event_data": {"play": play, "task": task, "host": host, "res": res}}


def run_of(*events):
    changed = {}
    for e in events:
        if e["event_data"]["res"].get("changed"):
            changed[e["event_data"]["host"]] = changed.get(e["event_data"]["host"], 0) + 1
    return Run(rc=0, status="successful", stats={"changed": changed}, events=list(events))


def test_changed_plays_names_the_plays_that_changed_less_the_report_writes():
    run = run_of(
        ok("Validate, discover and plan", "Discover", "m1", changed=False),
        ok("MLX server (OpenAI-compatible API)", "Restart every rank", "m1", changed=False),
        ok("Stop the MLX server", "Stop every rank", "m1", changed=True),
        ok("Stop the MLX server", "Stop every rank", "m2", changed=True),
        ok("Cluster report", "Write the cluster report", "localhost", changed=True, path="/x/artifacts/report.html"),
    )
    assert run.changed_plays() == {"Stop the MLX server"}
    assert run.changed() == 2 and run.report_changes() == 1


def test_changed_plays_of_a_run_that_changed_nothing_is_empty():
    run = run_of(
        ok("MLX server (OpenAI-compatible API)", "Restart every rank", "m1", changed=False),
        ok("Cluster report", "Write the cluster report", "localhost", changed=True, path="/x/artifacts/report.html"),
    )
    assert run.changed_plays() == set() and run.changed() == 0
