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
        "peak_memory_gb": [0.5, 0.001483],  # (a small model's 1.5 MB: not 0.00)
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
        "| r1abcdef | ring | 2 | tensor | 64 | 16 | 1 | 812.50 | 41.25 | 40.00-42.50 | 0.5 / 0.00148 | abababababab |"
    )
    assert stat.S_IMODE(md.stat().st_mode) == 0o600
    assert capsys.readouterr().out.splitlines()[-1] == lines[-1]


def test_a_run_that_compared_backends_leads_with_the_comparison(tmp_path):
    """The comparison bench_runs.side_by_side made (the role writes it), its numbers and ratios
    first; each run's row says the backend as asked, over what, which round."""
    report = load_program("benchmark", "bench_report.py")
    for name, over, gen in (("ring", "thunderbolt", 40.0), ("ring-lan", "lan", 10.0)):
        run = {
            "backend": "ring",
            "compared_as": name,
            "over": over,
            "round": 1,
            "world_size": 2,
            "mode": "tensor",
            "prompt_tps": 100.0,
            "generation_tps": gen,
        }
        (tmp_path / f"r2abcdefgh-{name}-w2-tensor-r1.json").write_text(json.dumps(run))
    compare = {
        "run_id": "r2abcdefgh",
        "reference": "ring",
        "rounds": 1,
        "modes": {
            "tensor": [
                {"name": "ring", "over": "thunderbolt", "prompt_tps": 100.0, "generation_tps": 40.0}
                | {"prompt_ratio": 1.0, "generation_ratio": 1.0, "fell_back": False},
                {"name": "ring-lan", "over": "lan", "prompt_tps": 100.0, "generation_tps": 10.0}
                | {"prompt_ratio": 1.0, "generation_ratio": 0.25, "fell_back": False},
            ]
        },
    }
    (tmp_path / "r2abcdefgh-side-by-side.json").write_text(json.dumps(compare))
    report.main(str(tmp_path))
    text = (tmp_path / "results.md").read_text()
    head, every = text.split("## Every run")
    assert "## Backends side by side (run r2abcdef, 1 round(s))" in head and "Ratios are to ring" in head
    assert "| tensor | ring-lan | lan | 100.00 | 10.00 | 1.00x | 0.25x |" in head
    rows = [line for line in every.splitlines() if line.startswith("| r2abcdef")]
    lan_row = "| r2abcdef | ring | ring-lan | lan | 1 | 2 | tensor |"
    assert len(rows) == 2 and any(r.startswith(lan_row) for r in rows), rows
