"""plugins/module_utils/mlx_rsync.py, relaying a copy that is still arriving (the pipelined tree):
when a file is complete, the excludes of a pass, the pass loop (a fake copy, runner and clock),
the results added up over passes and the failure of a Mac whose own copy stopped arriving."""

from __future__ import annotations

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rsync import (
    UpstreamStalled,
    complete_files,
    file_complete,
    merge_itemized,
    parse_itemized,
    relay_excludes,
    relay_passes,
    rsync_argv,
    stall_message,
)

T = 1764130000
WANT = {
    "config.json": {"size": 10, "mtime": T},
    "model.safetensors": {"size": 1000, "mtime": T},
    "sub/tokenizer.json": {"size": 5, "mtime": T + 1},
}


@pytest.mark.parametrize(
    "have, complete",
    [
        pytest.param((1000, T + 0.9), True, id="size-and-second"),
        pytest.param((1000, T + 1.0), False, id="next-second"),
        pytest.param((999, T), False, id="short"),
        pytest.param(None, False, id="absent"),
    ],
)
def test_a_file_is_complete_with_the_sources_size_and_time(have, complete):
    assert file_complete(WANT["model.safetensors"], have) is complete


def test_a_source_entry_without_a_time_is_never_complete():
    assert file_complete({"size": 3}, (3, T)) is False


def test_complete_files_ignores_temporaries_and_files_the_source_lacks():
    stats = {
        "config.json": (10, T),
        ".model.safetensors.Ab12Cd": (400, T + 50),
        "extra.txt": (1, T),
        "sub/tokenizer.json": (5, T + 1.2),
    }
    assert complete_files(WANT, stats) == {"config.json", "sub/tokenizer.json"}


def test_excludes_are_anchored_and_cover_the_temporary_names():
    assert relay_excludes({"sub/model-00002-of-00002.safetensors", "top.bin"}) == [
        "--exclude=/sub/model-00002-of-00002.safetensors",
        "--exclude=/sub/.model-00002-of-00002.safetensors.*",
        "--exclude=/top.bin",
        "--exclude=/.top.bin.*",
    ]
    # wildcard characters in a name are escaped (rsync honours the backslash in a wildcard pattern)
    assert relay_excludes({"a[1]*.json"}) == ["--exclude=/a\\[1\\]\\*.json", "--exclude=/.a\\[1\\]\\*.json.*"]
    assert relay_excludes(set()) == []


def test_rsync_argv_puts_the_excludes_before_the_paths():
    argv = rsync_argv("rsync", "/s", "h:/d", ssh_command="ssh", excludes=["--exclude=/x", "--exclude=/.x.*"])
    assert argv[-6:] == ["--exclude=/x", "--exclude=/.x.*", "--rsh", "ssh", "/s/", "h:/d/"]
    assert all(not a.startswith("-") or a.startswith("--") for a in argv)  # long options only (openrsync)


class FakeCopy:
    """A Mac's own copy arriving over time: at each tick of the fake clock, the next state."""

    def __init__(self, states, step=0.5):
        self.states, self.now, self.step, self.passes = list(states), 0.0, step, []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds

    def look(self):
        index = min(int(self.now / self.step), len(self.states) - 1)
        return dict(self.states[index])

    def run_pass(self, excludes, rc=0):
        self.passes.append((self.now, list(excludes)))
        self.now += 0.2  # a pass takes a little time
        sent = [f">f+++++++++ {rel}" for rel in WANT if f"--exclude=/{rel}" not in excludes]
        return rc, "\n".join(sent) + "\n", "", ["rsync", *excludes]


def arriving():
    """config.json complete first, then the weights grow and complete, then the tokenizer."""
    return [
        {},
        {"config.json": (10, T)},
        {"config.json": (10, T), ".model.safetensors.X1": (300, T + 9)},
        {"config.json": (10, T), ".model.safetensors.X1": (700, T + 9)},
        {"config.json": (10, T), "model.safetensors": (1000, T)},
        {"config.json": (10, T), "model.safetensors": (1000, T), "sub/tokenizer.json": (5, T + 1)},
    ]


def test_each_file_is_passed_on_once_complete_then_a_last_pass_without_excludes():
    copy = FakeCopy(arriving())
    results = relay_passes(WANT, copy.look, copy.run_pass, copy.clock, copy.sleep, wait_limit=10, poll=0.5)
    excluded = [sorted(e for e in ex if not e.endswith(".*")) for _, ex in copy.passes]
    assert excluded == [
        ["--exclude=/model.safetensors", "--exclude=/sub/tokenizer.json"],
        ["--exclude=/sub/tokenizer.json"],
        [],
    ]
    assert [r[0] for r in results] == [0, 0, 0]
    # nothing ran before the first file was complete
    assert copy.passes[0][0] >= 0.5


def test_a_copy_already_complete_is_one_pass():
    copy = FakeCopy([arriving()[-1]])
    results = relay_passes(WANT, copy.look, copy.run_pass, copy.clock, copy.sleep, wait_limit=10)
    assert len(results) == 1 and copy.passes[0][1] == []


def test_a_failed_pass_ends_the_passes():
    copy = FakeCopy(arriving())
    failing = lambda excludes: copy.run_pass(excludes, rc=23)  # noqa: E731
    results = relay_passes(WANT, copy.look, failing, copy.clock, copy.sleep, wait_limit=10)
    assert [r[0] for r in results] == [23]


def test_growing_files_keep_it_waiting_and_a_copy_that_stops_raises():
    # the weights grow for a while, then nothing moves
    states = arriving()[:4]
    copy = FakeCopy(states, step=2.0)
    with pytest.raises(UpstreamStalled) as err:
        relay_passes(WANT, copy.look, copy.run_pass, copy.clock, copy.sleep, wait_limit=3, poll=0.5)
    assert err.value.complete == ["config.json"]
    assert err.value.pending == ["model.safetensors", "sub/tokenizer.json"]
    assert err.value.waited >= 3
    # it waited past the growth (the last state shows at 6 s), not 3 s from the start
    assert copy.now >= 6 + 3
    assert len(copy.passes) == 1  # config.json was passed on meanwhile


def test_nothing_ever_arriving_raises_after_the_limit():
    copy = FakeCopy([{}])
    with pytest.raises(UpstreamStalled) as err:
        relay_passes(WANT, copy.look, copy.run_pass, copy.clock, copy.sleep, wait_limit=2)
    assert err.value.complete == [] and copy.passes == [] and 2 <= copy.now <= 2.5


def test_the_stall_message_names_both_macs_and_the_fix():
    msg = stall_message("m2", "m3", "m1", ["config.json"], ["a.safetensors", "b.safetensors", "c", "d"], 120.2)
    for words in (
        "m2 stopped waiting to pass the model on to m3",
        "its own copy from m1",
        "has not grown for 120 s",
        "1 of 5 files complete",
        "a.safetensors, b.safetensors, c, ...",
        "m2's copy from m1",
        "re-run the models stage",
        "resumes",
    ):
        assert words in msg, (words, msg)


def test_results_add_up_over_passes():
    first = parse_itemized(">f+++++++++ config.json\ncd+++++++++ ./\n")
    second = parse_itemized("<f....... config.json\n.d..t...... ./\n>f+++++++++ model.safetensors\n")
    last = parse_itemized("<f....... config.json\n<f....... model.safetensors\n")
    out = merge_itemized([first, second, last])
    assert out["transferred"] == ["config.json", "model.safetensors"]
    assert out["created"] == ["./"] and out["deleted"] == []
    assert out["unchanged"] == [] and out["attrs_only"] == ["./"]
    assert out["changed"] is True
    rerun = merge_itemized([parse_itemized("<f....... config.json\n<f....... model.safetensors\n")])
    assert rerun["changed"] is False and rerun["unchanged"] == ["config.json", "model.safetensors"]
