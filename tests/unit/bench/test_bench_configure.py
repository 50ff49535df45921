"""bench/configure.py's Markdown on made-up samples (no cluster): one topology per invocation fills
one table, and the rest of docs/benchmarks.md is left as it is."""

from __future__ import annotations

from bench import configure
from bench.common import read_section, write_section

INFO = {
    "cpus": 2,
    "cpu_model": "x",
    "kernel": "k",
    "python": "3.11",
    "ansible_core": "2.19",
    "mlx": "0.3",
    "date": "today",
    "loadavg_start": 1.0,
    "loadavg_end": 2.0,
}


def result(topology, hosts, first):
    n = [1, 1]
    samples = {
        "first": [first, first],
        "rerun": [1.0, 1.2],
        "mlx": [10.0, 10.0],
        "ratio": [first / 10] * 2,
        "rerun_ratio": [1.0 / first] * 2,
        "changed_first": [5, 5],
        "changed_rerun": [0, 0],
        "ssh_first": [n, n],
        "ssh_rerun": [n, n],
        "ssh_mlx": [[7, 7]] * 2,
        "target_first": [configure.TARGETS[topology] * 10.0] * 2 if topology in configure.TARGETS else [],
        "target_rerun": [configure.RERUN_TARGET * first] * 2,
        "floor_ping": [0.5, 0.6],
        "floor_discovery": [0.9, 1.1],
    }
    return {"topology": topology, "hosts": hosts, "cables": hosts, "samples": samples}


def write(doc, results, command):
    section = configure.markdown_section(results, 2, INFO, command, read_section(doc, configure.SECTION))
    write_section(doc, configure.SECTION, section)


def test_each_invocation_replaces_its_own_rows_and_keeps_the_rest(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Time to a configured cluster\n\nold\n\n## Test suite: workers\n\nkept\n")
    write(doc, [result("ring16", 16, 8.0)], "cmd ring16")
    write(doc, [result("mesh4", 4, 5.0)], "cmd mesh4")
    write(doc, [result("mesh4", 4, 4.0)], "cmd mesh4 again")
    text = doc.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| topology")]
    assert [r.split(" | ")[0] for r in rows] == ["| mesh4", "| ring16"]  # TOPOLOGIES' order, one row each
    assert "| 4.00 (4.00–4.00) |" in rows[0] and "| 8.00 (8.00–8.00) |" in rows[1]
    assert "cmd mesh4 again" in text and "cmd ring16" in text and "`cmd mesh4`" not in text
    assert (
        text.count(configure.SECTION) == 1 and "old" not in text and text.endswith("## Test suite: workers\n\nkept\n")
    )


def test_a_run_note_annotated_by_hand_is_kept_with_its_row(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Time to a configured cluster\n\nold\n")
    write(doc, [result("ring16", 16, 8.0)], "cmd ring16")
    text = doc.read_text().replace("- `ring16`: date", "- `ring16` (on another machine, not re-measured): date")
    doc.write_text(text)
    write(doc, [result("mesh4", 4, 5.0)], "cmd mesh4")
    notes = [line for line in doc.read_text().splitlines() if line.startswith("- `")]
    assert [n.split("`")[1] for n in notes] == ["mesh4", "ring16"]
    assert notes[1].startswith("- `ring16` (on another machine, not re-measured): date") and "cmd ring16" in notes[1]


def test_the_targets_and_the_floor_are_columns_and_a_row_of_the_old_layout_is_dropped(tmp_path):
    doc = tmp_path / "benchmarks.md"
    old_header = "| topology | Macs | cables | ours first (s) | ours re-run (s) |"
    doc.write_text(
        f"# Benchmarks\n\n## Time to a configured cluster\n\n{old_header}\n|---|---|---|---|---|\n"
        "| ring16 | 16 | 16 | 9.0 | 4.0 |\n\n- `ring16`: date then; `old cmd`\n"
    )
    write(doc, [result("mesh4", 4, 5.0), result("ring8", 8, 6.0)], "cmd")
    lines = doc.read_text().splitlines()
    header = next(line for line in lines if line.startswith("| topology"))
    rows = {line.split(" | ")[0][2:]: line for line in lines if line.startswith("| ") and line != header}
    assert set(rows) == {"mesh4", "ring8"} and "old cmd" not in "\n".join(lines)  # ring16's old row is gone
    cells = dict(zip(configure._cells(header), configure._cells(rows["mesh4"])))
    assert cells["target first (s)"] == "7.00 (7.00–7.00)"  # 0.7 of distributed_config's 10 s
    assert cells["target re-run (s)"] == "1.75 (1.75–1.75)"  # 0.35 of our first run's 5 s
    assert cells["floor: ansible ping (s)"] == "0.55 (0.50–0.60)"
    assert cells["floor: discovery alone (s)"] == "1.00 (0.90–1.10)"
    assert dict(zip(configure._cells(header), configure._cells(rows["ring8"])))["target first (s)"] == "-"
