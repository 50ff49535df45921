"""The memory check: each rank's share of the model against what its Mac's GPU may wire."""

from types import SimpleNamespace

import pytest

from ansible_collections.mlx.cluster.plugins.plugin_utils.preflight import (
    GIB,
    MIB,
    gpu_limit,
    memory_fit,
    pipeline_split,
    rank_bytes,
    safe_wired_limit_mb,
)

# 40 GB of layers (8 x 5 GB) and 2 GB shared (embeddings, head)
WEIGHTS = {"total_bytes": 42 * GIB, "shared_bytes": 2 * GIB, "layer_bytes": [5 * GIB] * 8, "files": 9}
HOSTS = ["m1", "m2", "m3", "m4"]


def hw(mem_gb, wired=0):
    return {"memsize": mem_gb * GIB, "wired_limit_mb": wired}


@pytest.mark.parametrize("layers, ranks", [(8, 4), (9, 4), (10, 3), (3, 3), (36, 8)])
def test_pipeline_split_is_mlx_lms(layers, ranks):
    """The same layers per rank as mlx-lm's own PipelineMixin.pipeline()."""
    from mlx_lm.models.pipeline import PipelineMixin

    for rank in range(ranks):
        model = PipelineMixin()
        model.layers = list(range(layers))
        model.pipeline(SimpleNamespace(rank=lambda r=rank: r, size=lambda: ranks))
        start, n = pipeline_split(layers, ranks)[rank]
        assert (start, start + n) == (model.start_idx, model.end_idx)


def test_rank_bytes_per_mode():
    assert rank_bytes(WEIGHTS, "tensor", 4) == [12 * GIB] * 4
    assert rank_bytes(WEIGHTS, "pipeline", 4) == [12 * GIB] * 4
    assert rank_bytes(WEIGHTS, "pipeline", 3) == [17 * GIB, 17 * GIB, 12 * GIB]  # 3, 3, 2 layers
    assert rank_bytes(WEIGHTS, "tensor", 1) == [42 * GIB]
    assert rank_bytes(WEIGHTS, "pipeline", 9) is None  # 8 layers cannot feed 9 ranks


def test_gpu_limit_is_the_setting_or_macos_default_share():
    assert gpu_limit(hw(64, wired=60000)) == (60000 * MIB, "iogpu.wired_limit_mb=60000")
    limit, how = gpu_limit(hw(32))
    assert limit == int(32 * GIB * 2 / 3) and "default" in how and "2/3 of 32 GB" in how and "estimated" in how
    assert gpu_limit(hw(128))[0] == 96 * GIB
    assert gpu_limit({"memsize": 16 * GIB, "wired_limit_mb": None})[0] == int(16 * GIB * 2 / 3)
    assert gpu_limit({})[0] is None


def test_macos_default_as_the_mac_reports_it_replaces_the_estimate():
    # macOS 26 on a 128 GiB M5 Max: 107.52 GiB by default (antirez/ds4 PR #893), not the 96 GB
    # the estimate gives
    limit, how = gpu_limit({**hw(128), "gpu_working_set_mb": 110100})
    assert limit == 110100 * MIB and "as the Mac reports it" in how and "110100 MB" in how
    # once the sysctl is set, Metal reports it: the sysctl's value is the limit (a reading from
    # before a change this run makes, or would make in check mode, does not count)
    assert gpu_limit({**hw(128, wired=114688), "gpu_working_set_mb": 110100}) == (
        114688 * MIB,
        "iogpu.wired_limit_mb=114688",
    )
    assert gpu_limit({"gpu_working_set_mb": 12124})[0] == 12124 * MIB  # memory size unknown
    assert gpu_limit({**hw(16), "gpu_working_set_mb": None})[0] == int(16 * GIB * 2 / 3)  # not read: the estimate


def test_a_model_refused_by_the_estimate_fits_what_the_mac_reports():
    hws = {h: hw(128) for h in HOSTS}
    hws["m3"] = {**hw(16), "gpu_working_set_mb": 12124}  # 11.84 GB (macOS 26, llmfit PR #754)
    weights = {"files": ["a"], "total_bytes": 40 * GIB, "shared_bytes": 0, "layer_bytes": [10 * GIB] * 4}
    assert memory_fit(weights, HOSTS, hws, ["tensor"], 0.1)["fits"] == {"tensor": True}  # 11 GB each
    hws["m3"] = hw(16)  # the same Mac before the env stage read it: 10.67 GB estimated
    (p,) = memory_fit(weights, HOSTS, hws, ["tensor"], 0.1)["problems"]
    assert p["host"] == "m3" and "estimated" in p["msg"]


def test_safe_wired_limit_keeps_room_for_macos_and_never_lowers_the_default():
    assert safe_wired_limit_mb(128 * GIB) == 112 * 1024  # 1/8 kept back
    assert safe_wired_limit_mb(512 * GIB) == 496 * 1024  # at most 16 GB kept back
    # 6 GB back would be below macOS 26's default (74 % of 16 GB): 3/4, the highest reported
    assert safe_wired_limit_mb(16 * GIB) == 12 * 1024 > gpu_limit(hw(16))[0] // MIB


def test_a_model_that_fits_everywhere_is_quiet():
    out = memory_fit(WEIGHTS, HOSTS, {h: hw(128) for h in HOSTS}, ["tensor", "pipeline"], 0.1)
    assert out["problems"] == [] and out["fits"] == {"tensor": True, "pipeline": True}
    assert [r["host"] for r in out["ranks"]["pipeline"]] == HOSTS


def test_one_small_mac_fails_named_with_the_numbers_and_the_fix():
    hws = {h: hw(128) for h in HOSTS}
    hws["m3"] = hw(16)  # 10.7 GB for the GPU by default, 12 GB of weights
    out = memory_fit(WEIGHTS, HOSTS, hws, ["tensor"], 0.1, model="Big-4bit")
    (p,) = out["problems"]
    assert p["severity"] == "error" and p["check"] == "memory" and p["host"] == "m3"
    assert "Big-4bit" in p["msg"] and "12.00 GB" in p["msg"] and "rank 2" in p["msg"] and "10.67 GB" in p["msg"]
    assert "add Macs" in p["fix"]
    assert out["fits"] == {"tensor": False}


def test_the_fix_offers_the_wired_limit_when_memory_allows():
    hws = {h: hw(128) for h in HOSTS}
    hws["m1"] = hw(24, wired=8192)  # a limit set lower than the weights; 24 GB could hold them
    hws["m2"] = hw(16)  # 16 GB cannot: no wired-limit fix offered
    out = memory_fit(WEIGHTS, HOSTS, hws, ["tensor"], 0.05)
    p1, p2 = sorted(out["problems"], key=lambda p: p["host"])
    assert "iogpu.wired_limit_mb=8192" in p1["msg"]
    assert f"sudo sysctl iogpu.wired_limit_mb={safe_wired_limit_mb(24 * GIB)}" in p1["fix"]
    assert "mlx_cluster_wired_limit: auto and --tags power" in p1["fix"]  # the way that lasts
    assert "sysctl" not in p2["fix"]


def test_the_fix_names_the_other_mode_when_it_fits():
    # pipeline over 3: rank 0 and 1 hold 17 GB; tensor: 42-2=40/3 + 2 = 15.33 GB
    hws = {h: hw(24, wired=17 * 1024) for h in HOSTS[:3]}
    out = memory_fit(WEIGHTS, HOSTS[:3], hws, ["tensor", "pipeline"], 0.01)
    assert out["fits"] == {"tensor": True, "pipeline": False}
    assert {p["host"] for p in out["problems"]} == {"m1", "m2"}
    assert all("run tensor mode instead" in p["fix"] for p in out["problems"])


def test_a_pipeline_that_cannot_split_is_an_error_not_a_crash():
    out = memory_fit(WEIGHTS, [f"m{i}" for i in range(9)], {}, ["pipeline"], 0.1)
    assert out["fits"] == {"pipeline": False}
    assert "8 layer(s)" in out["problems"][0]["msg"] and "tensor" in out["problems"][0]["fix"]


def test_no_safetensors_weights_means_nothing_to_check():
    empty = {"total_bytes": 0, "shared_bytes": 0, "layer_bytes": [], "files": 0}
    assert memory_fit(empty, HOSTS, {}, ["tensor"], 0.1) == {"problems": [], "ranks": {}, "fits": {"tensor": True}}


def test_unknown_memory_is_not_a_failure():
    out = memory_fit(WEIGHTS, HOSTS, {"m1": {}}, ["tensor"], 0.1)
    assert out["problems"] == [] and out["ranks"]["tensor"][0]["limit"] is None
