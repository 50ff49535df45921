"""roles/benchmark/files/bench_report.py: the table of every run, written the user's alone."""

from __future__ import annotations

import json
import stat

from tests.programs import load_program


def test_the_table_lists_each_run_and_is_the_users_alone(tmp_path, capsys):
    report = load_program("benchmark", "bench_report.py")
    run = {
        "backend": "ring",
        "world_size": 2,
        "mode": "tensor",
        "prompt_tokens": 64,
        "generation_tokens": 16,
        "num_trials": 1,
        "prompt_tps": 812.5,
        "generation_tps": 41.25,
        "peak_memory_gb": [0.5, 0.5],
        "tokens_sha256": "ab" * 32,
        "stats": {"generation_tps": {"min": 40.0, "max": 42.5}},
    }
    (tmp_path / "r1abcdefgh-ring-w2-tensor.json").write_text(json.dumps(run))
    (tmp_path / "not-a-result.json").write_text("[1, 2]")
    report.main(str(tmp_path))
    md = tmp_path / "results.md"
    lines = md.read_text().splitlines()
    assert lines[0] == "# Benchmark results"
    assert lines[-1] == (
        "| r1abcdef | ring | 2 | tensor | 64 | 16 | 1 | 812.50 | 41.25 | 40.00-42.50 | 0.50 / 0.50 | abababababab |"
    )
    assert stat.S_IMODE(md.stat().st_mode) == 0o600
    assert capsys.readouterr().out.splitlines()[-1] == lines[-1]
