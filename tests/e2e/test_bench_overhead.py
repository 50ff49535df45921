"""bench/overhead.py smoke: one round on the pair cluster gives a well-formed table and JSON,
positive tokens/s both ways and the same generated tokens (never a threshold on the ratio:
bench runs are not timed tests)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.e2e.runner import ROOT

pytestmark = [pytest.mark.sim, pytest.mark.slow]

SAMPLES = (
    "pb_gen",
    "hand_gen",
    "pb_prompt",
    "hand_prompt",
    "gen_ratio",
    "prompt_ratio",
    "pb_wall",
    "pb_launch",
    "pb_ansible",
    "hand_wall",
    "pb_gen_s",
    "hand_gen_s",
    "beside_cpu",
    "load1",
)


def test_quick_run_gives_the_table_and_json(tmp_path):
    js = tmp_path / "overhead.json"
    res = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "overhead.py"), "--quick", "--runs", "1", "--json", str(js)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    assert res.returncode == 0, res.stderr[-3000:]

    lines = res.stdout.strip().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("mode") and "gen tok/s playbook" in line)
    for col in ("gen tok/s by hand", "gen playbook/by hand", "prompt tok/s playbook", "tokens sha256 equal"):
        assert col in lines[header], lines[header]
    assert lines[header + 2].split()[0] == "tensor" and lines[header + 2].split()[-1] == "yes", lines[header + 2]
    assert any(line.startswith("mode") and "Ansible's own (s)" in line for line in lines)
    assert "load average" in res.stdout

    out = json.loads(js.read_text())
    assert out["runs"] == 1 and out["warmup"] == 0 and out["control"] is False and out["machine"]["cpus"] >= 1
    assert out["max_tokens"] >= 1 and out["converge_s"] > 0
    [row] = out["results"]
    assert row["mode"] == "tensor" and row["world_size"] == 2 and row["generation_tokens"] == out["max_tokens"]
    for key in SAMPLES:
        assert len(row["samples"][key]) == 1, key
        assert set(row["summary"][key]) == {"min", "median", "max"}, key
    for key in (
        "pb_gen",
        "hand_gen",
        "pb_prompt",
        "hand_prompt",
        "gen_ratio",
        "prompt_ratio",
        "pb_wall",
        "pb_launch",
        "hand_wall",
    ):
        assert row["samples"][key][0] > 0, key
    # Same model, greedy, same prompt: the same tokens both ways; the same argv (run id aside).
    assert row["tokens_equal"] is True
    assert row["tokens_sha256"]["playbook"] == row["tokens_sha256"]["by_hand"]
    assert "<run id>" in row["argv"] and "--hostfile" in row["argv"]
