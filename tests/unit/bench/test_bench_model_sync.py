"""bench/model_sync.py's table code on made-up samples (no cluster, no timing threshold): the
text table, the Markdown section, and that rewriting the section keeps the rest of the file."""

from __future__ import annotations

import pytest

from bench import model_sync


def result(topology="ring8", hosts=8, depth=4, baselines=True):
    samples = {
        "one_copy": [4.0, 4.4, 4.2],
        "parallel": [4.6, 4.5, 4.8],
        "tree": [40.0, 42.0, 41.0],
        "share": [9.0, 9.5, 9.2],
        "share_fixed": [3.0, 3.1, 2.9],
        "serial": [1400.0] if baselines else [],
        "controller": [1650.0] if baselines else [],
    }
    return {
        "topology": topology,
        "hosts": hosts,
        "cables": hosts,
        "depth": depth,
        "rates_mbit": {},
        "samples": samples,
        "copy_phase": {"tree": [20.0, 21.0, 22.0], "controller": [1600.0] if baselines else []},
    }


SETTING = {"size_mb": 200, "tb_mbit": 400, "lan_mbit": 8}
INFO = {
    "cpus": 2,
    "cpu_model": "x",
    "kernel": "k",
    "python": "3.11",
    "ansible_core": "2.19",
    "mlx": "0.3",
    "mlx_lm": "0.2",
    "date": "today",
    "loadavg_start": 1.0,
    "loadavg_end": 2.0,
}


def test_summary_ratios():
    x = model_sync.summarize(result())
    assert x["tree_copies"]["median"] == 21.0 and x["one_copy"]["median"] == 4.2
    assert x["tree_vs_one"] == pytest.approx(5.0) and x["tree_vs_depth"] == pytest.approx(1.25)
    assert x["serial_vs_tree"] == pytest.approx(1400 / 41) and x["parallel_vs_one"] == pytest.approx(4.6 / 4.2)
    assert x["tree_run_vs_one"] == pytest.approx(41 / 4.2) and x["runs"]["serial"] == 1 and x["runs"]["tree"] == 3
    partial = result(baselines=False)
    partial["samples"].update(one_copy=[], parallel=[])
    y = model_sync.summarize(partial)  # a journal with only some methods: no ratio it cannot make
    assert "tree_vs_one" not in y and "serial_vs_tree" not in y and y["tree"]["median"] == 41.0
    assert model_sync.table_rows([partial])[0][3:5] == ("3", "-")


def test_the_data_movement_is_the_longest_senders_own_time_and_its_ratio_to_one_copy():
    def sent(host, res, task=model_sync.SEND_TASK, event="runner_on_ok"):
        return {"event": event, "event_data": {"task": task, "host": host, "res": res}}

    class Run:
        events = [
            sent("m2", {"seconds": 4.4, "bytes": 1}),
            sent("m5", {"seconds": 4.6, "bytes": 1}),
            sent("m3", {"skipped": True}),
            sent("m4", {"seconds": 9.0}, task=model_sync.TREE_TASK),  # rsync's hops are not the cables'
            sent("m6", {"seconds": 8.0}, event="runner_on_failed"),
        ]

    assert model_sync.moving(Run()) == 4.6
    Run.events = Run.events[2:]
    assert model_sync.moving(Run()) is None
    r = result()
    r["moving"] = [4.4, 4.6, 4.5]
    x = model_sync.summarize(r)
    assert x["tree_moving"]["median"] == 4.5 and x["moving_vs_one"] == pytest.approx(4.5 / 4.2)
    row = dict(zip(model_sync.HEADER, model_sync.table_rows([r])[0]))
    assert row["moving / one copy"] == "1.07" and row["tree: data moving (s)"].startswith("4.5")
    assert dict(zip(model_sync.HEADER, model_sync.table_rows([result()])[0]))["moving / one copy"] == "-"


def test_text_table_and_markdown_section(tmp_path):
    results = [result(), result("mesh4", 4, 1, baselines=False)]
    lines = model_sync.text_table([(SETTING, INFO, results)]).splitlines()
    assert lines[1].split("  ")[0] == "topology" and len(lines) == 5
    assert lines[3].startswith("ring8") and "34.1x" in lines[3] and "3; serial 1, controller 1" in lines[3]
    assert lines[4].startswith("mesh4") and lines[4].rstrip().endswith("-")  # no baseline measured

    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Time to a configured cluster\n\nkept\n\n## Test suite: workers\n\nkept too\n")
    tables = [
        (SETTING, INFO, results, ["python bench/model_sync.py --journal a"]),
        (dict(SETTING, tb_mbit=2000, lan_mbit=40), INFO, results[:1], []),
    ]
    section = model_sync.markdown_section(tables, "python bench/model_sync.py --report")
    model_sync.write_section(doc, section)
    model_sync.write_section(doc, section.replace("| ring8 |", "| ring8x |"))  # again: replaced, not added
    text = doc.read_text()
    assert text.count(model_sync.SECTION) == 1 and "| ring8x | 8 | 4 |" in text and "| ring8 |" not in text
    assert text.count("kept") == 2 and "mlx-lm 0.2" in text
    assert text.count("| " + " | ".join(model_sync.HEADER) + " |") == 2  # one table per setting
    assert "### 200 MB model; Thunderbolt 400 Mbit/s" in text and "LAN 40 Mbit/s (Thunderbolt 50x the LAN)" in text
    assert "measured with: `python bench/model_sync.py --journal a`" in text


def test_the_journal_resumes_where_a_run_stopped(tmp_path):
    path = tmp_path / "journal.jsonl"
    j = model_sync.Journal(path)
    j.add(topology="ring8", meta={"hosts": 8, "cables": 8, "depth": 4, "rates_mbit": {}})
    j.add(topology="ring8", method="one_copy", run=0, seconds=4.0)
    j.add(topology="ring8", method="serial", run=0, part="m2", seconds=200.0)
    again = model_sync.Journal(path)  # a new run reads what the cut one kept
    assert again.get("ring8", "one_copy", 0)["seconds"] == 4.0
    assert again.get("ring8", "serial", 0) is None and again.get("ring8", "serial", 0, "m2")["seconds"] == 200.0
    res = again.result("ring8")
    assert res["depth"] == 4 and res["samples"]["one_copy"] == [4.0] and res["samples"]["serial"] == []
    # every method once per run, the baselines only in the first, the order rotating
    order = model_sync.schedule(2, 1)
    assert [m for r, m in order if r == 0] == list(model_sync.METHODS)
    assert [m for r, m in order if r == 1] == ["parallel", "tree", "tree_rsync", "share", "share_fixed", "one_copy"]
    assert model_sync.schedule(3, 1, ["serial"]) == [(0, "serial")]


def test_the_made_model_reads_as_safetensors_weights(tmp_path):
    """The model stage reads every shard's header (memory fit): the made model must pass it."""
    from ansible_collections.mlx.cluster.plugins.module_utils.mlx_weights import header_length, layout, tensor_bytes

    files = dict(model_sync.make_model(tmp_path / "m", 2, shards=4))
    tensors = {}
    for name in sorted(n for n in files if n.endswith(".safetensors")):
        with open(tmp_path / "m" / name, "rb") as f:
            n = header_length(f.read(8), name)
            shard = tensor_bytes(f.read(n), name)
        assert 8 + n + sum(shard.values()) == files[name]  # the data fills the shard exactly
        tensors.update(shard)
    shape = layout(tensors)
    assert shape["shared_bytes"] == 0 and len(shape["layer_bytes"]) == 4
    assert 0.99 * 2 * 2**20 <= sum(files.values()) <= 2 * 2**20 + 1024 and "model.safetensors.index.json" in files


def test_report_one_table_per_journal(tmp_path, capsys):
    """--report with several journals (one setting each): a table each, the setting and the
    commands from the journal itself, not from the command line."""
    paths = []
    for name, setting in (("a", SETTING), ("b", dict(SETTING, tb_mbit=2000, lan_mbit=40))):
        j = model_sync.Journal(tmp_path / f"{name}.jsonl")
        j.add(setting=setting, machine=INFO, command=f"python bench/model_sync.py --journal {name}")
        r = result()
        j.add(topology="ring8", meta={k: r[k] for k in ("hosts", "cables", "depth", "rates_mbit")})
        for method, values in r["samples"].items():
            for run, seconds in enumerate(values):
                copy = r["copy_phase"].get(method)
                j.add(
                    topology="ring8", method=method, run=run, seconds=seconds, **({"copy": copy[run]} if copy else {})
                )
        paths.append(str(j.path))
    doc = tmp_path / "benchmarks.md"
    assert model_sync.main(["--report", "--journal", paths[0], "--journal", paths[1], "--markdown", str(doc)]) == 0
    out = capsys.readouterr().out
    assert "Thunderbolt 400 Mbit/s" in out and "Thunderbolt 2000 Mbit/s" in out
    text = doc.read_text()
    assert text.count("| ring8 | 8 | 4 | 3; serial 1, controller 1 |") == 2
    assert "measured with: `python bench/model_sync.py --journal b`" in text
    with pytest.raises(SystemExit):
        model_sync.main(["--journal", paths[0], "--journal", paths[1]])  # measuring: one journal
