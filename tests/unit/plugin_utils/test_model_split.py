"""The split check: whether mlx-lm can split a model over the Macs in each mode, from its
config.json, before the benchmark launches; the rule against mlx-lm's own `shard`, and the
demo's tiny model (scripts/demo.sh, tests/tinymodel.py demo_plan) against every wiring."""

from types import SimpleNamespace

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_weights import config_dims
from ansible_collections.mlx.cluster.plugins.plugin_utils.model_split import (
    split_problems,
    tensor_blockers,
)
from ansible_collections.mlx.cluster.plugins.plugin_utils.preflight import pipeline_split, report
from tests.simcluster.spec import SPECS_DIR, load_spec
from tests.tinymodel import demo_plan, tiny_config

BOTH = ["tensor", "pipeline"]
# the demo's model before issue 29: 4 layers, 8 heads, 4 key/value heads, 64 wide, MLP 128
TINY4 = {"layers": 4, "heads": 8, "kv_heads": 4, "head_dim": 8, "intermediate_size": 128, "group_size": None}
# Qwen3-4B-4bit as mlx-community converted it
QWEN3_4B = {"layers": 36, "heads": 32, "kv_heads": 8, "head_dim": 128, "intermediate_size": 9728, "group_size": 64}


@pytest.mark.parametrize(
    "dims, ranks, modes, index, words",
    [
        pytest.param(TINY4, 4, BOTH, True, [], id="tiny-4-macs-both-modes"),
        pytest.param(
            TINY4,
            3,
            BOTH,
            True,
            [
                [
                    "tensor mode",
                    "over 3 Macs",
                    "8 attention heads (not a multiple of 3)",
                    "4 key/value heads (not a multiple of 3)",
                    "MLP width (intermediate_size) of 128 (not a multiple of 3)",
                    "fix: run pipeline mode only (benchmark_modes: [pipeline])",
                    "num_attention_heads and num_key_value_heads and intermediate_size are multiples of 3",
                    "tensor mode can split it over 2",
                ]
            ],
            id="tiny-3-macs-tensor",
        ),
        pytest.param(TINY4, 3, ["pipeline"], True, [], id="tiny-3-macs-pipeline-only"),
        pytest.param(
            TINY4,
            8,
            BOTH,
            True,
            [
                [
                    "tensor mode",
                    "4 key/value heads (not a multiple of 8)",
                    "num_key_value_heads is a multiple of 8",
                    "over 2, 4)",
                ],
                ["pipeline mode gives each of the 8 Macs whole layers", "tiny has 4 layer(s)", "run on at most 4 Macs"],
            ],
            id="tiny-8-macs-neither",
        ),
        pytest.param(
            TINY4,
            2,
            BOTH,
            False,
            [
                [
                    "model.safetensors.index.json",
                    "run tensor mode only (benchmark_modes: [tensor])",
                    "mlx_lm.convert writes the index",
                ]
            ],
            id="single-file-pipeline",
        ),
        pytest.param(QWEN3_4B, 8, BOTH, True, [], id="qwen3-4b-8-macs"),
        pytest.param(
            QWEN3_4B,
            3,
            ["tensor"],
            True,
            [
                [
                    "32 attention heads (not a multiple of 3)",
                    "MLP width (intermediate_size) of 9728 (not a multiple of 192: 3 Macs x quantization groups of 64)",
                    "heads x head_dim and intermediate_size are multiples of 192",
                ]
            ],
            id="qwen3-4b-3-macs-quantized",
        ),
        pytest.param(
            dict(QWEN3_4B, intermediate_size=9728 + 64),
            2,
            ["tensor"],
            True,
            [["MLP width (intermediate_size) of 9792 (not a multiple of 128: 2 Macs x quantization groups of 64)"]],
            id="quantized-mlp-not-whole-groups",
        ),
        pytest.param(
            {
                "layers": 61,
                "heads": 128,
                "kv_heads": 128,
                "head_dim": 56,
                "intermediate_size": 18432,
                "moe_intermediate_size": 2048,
                "group_size": 64,
                "latent_attention": True,
            },
            8,
            BOTH,
            True,
            [],
            id="deepseek-v3-latent-attention",
        ),
        pytest.param(
            {"heads": 6, "kv_heads": 1, "head_dim": 8, "intermediate_size": None},
            3,
            BOTH,
            True,
            [["1 key/value heads (not a multiple of 3)"]],
            id="unknown-numbers-left-out",
        ),
        pytest.param(None, 3, BOTH, True, [], id="no-config"),
        pytest.param(TINY4, 1, BOTH, False, [], id="one-mac"),
    ],
)
def test_split_problems_name_the_numbers_and_the_fix(dims, ranks, modes, index, words):
    problems = split_problems(dims, ranks, modes, "tiny", index)
    assert len(problems) == len(words), report(problems)
    text = report(problems)
    for problem, expected in zip(problems, words):
        assert problem["severity"] == "error" and problem["check"] == "split"
        for w in expected:
            assert w in f"{problem['msg']} -> fix: {problem['fix']}", text


def _mlx_lm_shards(cfg, ranks, group_size=None):
    """Whether mlx-lm's qwen2 `shard` cuts the model over `ranks` and leaves every rank whole
    heads (its attention reshapes by n_heads // N). `shard` asks the group only its size and rank."""
    import mlx.nn as nn
    from mlx_lm.models import qwen2

    model = qwen2.Model(qwen2.ModelArgs.from_dict(dict(cfg, num_hidden_layers=1)))
    if group_size:
        nn.quantize(model, group_size=group_size, bits=4)
    try:
        model.shard(SimpleNamespace(size=lambda: ranks, rank=lambda: 0))
    except ValueError:
        return False
    attn = model.model.layers[0].self_attn
    return attn.n_heads * ranks == cfg["num_attention_heads"] and attn.n_kv_heads * ranks == cfg["num_key_value_heads"]


@pytest.mark.parametrize(
    "hidden, heads, kv_heads, inter, group_size",
    [
        pytest.param(64, 8, 4, 128, None, id="demo-4"),
        pytest.param(48, 6, 3, 96, None, id="demo-3"),
        pytest.param(64, 4, 4, 96, None, id="mlp-96"),
        pytest.param(96, 12, 6, 192, None, id="12-heads"),
        pytest.param(64, 4, 2, 256, None, id="4-heads-wide-head"),
        pytest.param(256, 8, 4, 512, 64, id="quantized-64"),
        pytest.param(256, 8, 8, 384, 32, id="quantized-32"),
    ],
)
@pytest.mark.parametrize("ranks", [2, 3, 4, 6, 8])
def test_the_tensor_rule_is_mlx_lms(hidden, heads, kv_heads, inter, group_size, ranks):
    cfg = tiny_config(64, 0, hidden_size=hidden, heads=heads, kv_heads=kv_heads, intermediate_size=inter)
    if group_size:
        cfg["quantization"] = {"group_size": group_size, "bits": 4}
    blockers = tensor_blockers(config_dims(cfg), ranks)
    assert (not blockers) == _mlx_lm_shards(cfg, ranks, group_size), blockers


@pytest.mark.parametrize("spec", sorted(p.stem for p in SPECS_DIR.glob("*.yml")))
def test_the_demo_model_splits_over_every_wiring(spec):
    """What scripts/demo.sh makes for a wiring: each mode it runs can split the model (the
    benchmark's check and mlx-lm's own shard agree), each Mac gets a layer of the pipeline,
    and a mode left out says why."""
    macs = len(load_spec(spec).hosts)
    plan = demo_plan(macs)
    d = plan["dims"]
    cfg = tiny_config(
        64,
        0,
        hidden_size=d["hidden_size"],
        layers=d["layers"],
        heads=d["heads"],
        kv_heads=d["kv_heads"],
        intermediate_size=d["intermediate_size"],
    )
    assert split_problems(config_dims(cfg), macs, plan["modes"], spec) == []
    assert plan["modes"] and set(plan["modes"]) | set(plan["left_out"]) == set(BOTH)
    assert all(why for why in plan["left_out"].values())
    if "pipeline" in plan["modes"]:
        assert all(n >= 1 for _, n in pipeline_split(d["layers"], macs))
    if "tensor" in plan["modes"]:
        assert _mlx_lm_shards(cfg, macs)


def test_the_demo_runs_tensor_mode_over_at_most_eight_macs_and_says_why_not_above():
    assert demo_plan(8)["modes"] == ["tensor", "pipeline"] and demo_plan(8)["left_out"] == {}
    plan = demo_plan(16)
    assert plan["modes"] == ["pipeline"]
    assert "the demo runs the pipeline alone over more than 8 Macs" in plan["left_out"]["tensor"]
