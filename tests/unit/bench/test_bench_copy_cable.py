"""bench/copy_cable.py's pure parts on made-up numbers (no cluster, no timing threshold): the
methods and their rotating order, CPU seconds from /proc/stat, the summary's ratios, the text
table and the Markdown section, and that rewriting the section keeps the rest of the file."""

from __future__ import annotations

import pytest

from bench import copy_cable

MB = 1 << 20
SIZE = 512 * MB
# seconds for 512 MB: raw 0.4 s = 1280 MB/s, rsync over ssh 4 s = 128 MB/s
SECONDS = {
    "raw": [0.4, 0.5, 0.32],
    "raw_sha256": [0.8, 0.8, 0.8],
    "ours_s1": [1.0, 1.1, 0.9],
    "ours_s4": [0.5, 0.6, 0.4],
    "rsync_daemon": [2.0, 2.0, 2.0],
    "rsync_ssh": [4.0, 3.0, 5.0],
}
INFO = {
    "cpus": 2,
    "cpu_model": "x",
    "kernel": "k",
    "python": "3.11",
    "ansible_core": "2.19",
    "date": "today",
    "loadavg_start": 1.0,
    "loadavg_end": 2.0,
}
CABLE = {
    "cable": "c1",
    "m1": "10.0.0.1",
    "m2": "10.0.0.2",
    "iface": "en2",
    "python": "Python 3.9.6",
    "rsync": "rsync version 3.2.7 protocol version 31",
    "ssh": "OpenSSH_9.2p1",
    "mlx_copy": {"commit": "abc1234", "modified": True, "sha256": "0123456789ab"},
}


def samples(cpu=1.0):
    return {m: [{"round": r, "seconds": s, "cpu_seconds": cpu} for r, s in enumerate(v)] for m, v in SECONDS.items()}


def test_methods_expand_ours_by_streams_in_table_order():
    assert copy_cable.method_names([1, 2, 4]) == [
        "raw",
        "raw_sha256",
        "ours_s1",
        "ours_s2",
        "ours_s4",
        "rsync_daemon",
        "rsync_ssh",
    ]
    assert copy_cable.method_names([4, 1], ["rsync_ssh", "ours"]) == ["ours_s4", "ours_s1", "rsync_ssh"]
    assert copy_cable.method_names([1, 2], ["ours_s2", "raw"]) == ["raw", "ours_s2"]


def test_every_round_measures_every_method_once_the_order_rotating():
    methods = ["a", "b", "c"]
    order = copy_cable.schedule(methods, 4)
    assert [m for r, m in order if r == 0] == ["a", "b", "c"]
    assert [m for r, m in order if r == 1] == ["b", "c", "a"]
    assert [m for r, m in order if r == 2] == ["c", "a", "b"]
    assert [m for r, m in order if r == 3] == ["a", "b", "c"]  # back to the start after len(methods)
    assert [r for r, _ in order] == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    assert copy_cable.schedule(["a"], 2) == [(0, "a"), (1, "a")] and copy_cable.schedule([], 3) == []


def test_cpu_seconds_are_the_busy_ticks_of_proc_stat():
    #          user nice system idle iowait irq softirq steal guest guest_nice
    before = "cpu  1000 10 500 9000 300 20 30 40 0 0\ncpu0 500 5 250 4500 150 10 15 20 0 0\n"
    after = "cpu  1400 10 700 9100 900 25 35 99 0 0\ncpu0 700 5 350 4550 450 12 17 50 0 0\n"
    assert copy_cable.busy_ticks(before) == 1000 + 10 + 500 + 20 + 30
    # idle, iowait and steal do not count: +400 user, +200 system, +5 irq, +5 softirq
    ticks = copy_cable.busy_ticks(before), copy_cable.busy_ticks(after)
    assert copy_cable.cpu_seconds(*ticks, 100) == pytest.approx(6.1)
    with pytest.raises(ValueError):
        copy_cable.busy_ticks("intr 1 2 3\n")


def test_summary_speeds_ratios_and_cpu_per_gb():
    x = copy_cable.summarize(samples(cpu=0.5), SIZE)
    assert x["raw"]["mb_s"] == {"min": 1024.0, "median": 1280.0, "max": 1600.0}
    assert x["raw"]["x_raw"] == 1.0 and x["rsync_ssh"]["x_rsync_ssh"] == 1.0
    assert x["ours_s4"]["x_raw"] == pytest.approx(1.0 / 1.25)  # 1024 of 1280 MB/s
    assert x["ours_s4"]["x_rsync_ssh"] == pytest.approx(1024 / 128)
    assert x["raw_sha256"]["cpu_s_per_gb"]["median"] == pytest.approx(1.0)  # 0.5 s for half a GB
    assert x["rsync_daemon"]["runs"] == 3 and x["rsync_daemon"]["seconds"]["median"] == 2.0
    alone = copy_cable.summarize({"ours_s1": samples()["ours_s1"], "raw": []}, SIZE)
    assert set(alone) == {"ours_s1"} and "x_raw" not in alone["ours_s1"]  # no anchor, no ratio


def test_text_table_and_markdown_section(tmp_path):
    methods = copy_cable.method_names([1, 2, 4])
    summary = copy_cable.summarize(samples(), SIZE)
    lines = copy_cable.text_table(summary, methods).splitlines()
    assert lines[0].split("  ")[0] == "method" and len(lines) == 2 + 6  # ours_s2 was not measured
    assert lines[2].split() == ["raw", "1280", "(1024–1600)", "1.00x", "10.00x", "2.00"]
    assert lines[5].split() == ["ours_s4", "1024", "(853–1280)", "0.80x", "8.00x", "2.00"]

    doc = {
        "setting": {"size_mb": 512, "rounds": 3, "streams": [1, 2, 4], "spec": "pair"},
        "machine": INFO,
        "cable": CABLE,
        "methods": methods,
        "summary": summary,
    }
    section = copy_cable.markdown_section(doc, "python bench/copy_cable.py --markdown")
    assert "| ours_s4 | 1024 (853–1280) | 0.80x | 8.00x | 2.00 |" in section
    assert (
        "ours at its best (ours_s4) copies at 1024 MB/s, 0.80x raw (meets the issue's bar of 0.8x), "
        "8.00x rsync over ssh (meets the bar of 3x)." in section.replace("\n  ", " ")
    )
    assert "every method 3 times in one interleaved run" in section.replace("\n", " ")
    flat = section.replace("\n  ", " ")
    assert "raw_sha256 (hashing as it writes, 640 MB/s, 0.50x raw)" in flat
    assert "ours at its best copies at 1.60x its speed (more: several streams hash" in flat
    assert "openrsync/daemon.c" in section and "rsync-146" in section and "2-core" in section
    assert "- this section: `python bench/copy_cable.py --markdown`" in section and "Python 3.9.6" in section
    assert (
        "- mlx_copy.py measured: at abc1234, with changes not committed yet (sha256 of the source 0123456789ab...)"
        in section
    )

    path = tmp_path / "benchmarks.md"
    path.write_text("# Benchmarks\n\n## Time to a configured cluster\n\nkept\n\n## Test suite: workers\n\nkept too\n")
    copy_cable.write_section(path, section)
    copy_cable.write_section(path, section.replace("| ours_s4 |", "| ours_s4x |"))  # again: replaced, not added
    text = path.read_text()
    assert text.count(copy_cable.SECTION) == 1 and "| ours_s4x |" in text and "| ours_s4 |" not in text
    assert text.count("kept") == 2


def test_a_slow_transport_is_said_to_miss_the_bars():
    slow = samples()
    slow["ours_s1"] = [{"round": 0, "seconds": 2.0, "cpu_seconds": 1.0}]
    del slow["ours_s4"]
    lines = copy_cable.verdict(copy_cable.summarize(slow, SIZE))
    assert lines[0] == (
        "- ours at its best (ours_s1) copies at 256 MB/s, 0.20x raw (misses the issue's bar of 0.8x), "
        "2.00x rsync over ssh (misses the bar of 3x)."
    )
    assert lines[1].endswith("ours at its best copies at 0.40x its speed.")
