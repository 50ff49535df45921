"""module_utils/mlx_weights: a model's tensors by layer, from the safetensors headers, and the
module model_manifest's `weights` on a real (tiny) model written by MLX; the numbers of
config.json that decide how mlx-lm can split a model (config_dims)."""

import json
import struct

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_weights import (
    config_dims,
    header_length,
    layout,
    tensor_bytes,
)
from tests.tinymodel import make_tiny_model


def header(entries):
    return json.dumps(entries).encode()


def test_tensor_bytes_are_the_data_offsets():
    h = header(
        {
            "__metadata__": {"format": "mlx"},
            "model.embed_tokens.weight": {"dtype": "F16", "shape": [4, 2], "data_offsets": [0, 16]},
            "model.layers.0.mlp.up_proj.weight": {"dtype": "F16", "shape": [2, 2], "data_offsets": [16, 24]},
        }
    )
    assert tensor_bytes(h, "m.safetensors") == {"model.embed_tokens.weight": 16, "model.layers.0.mlp.up_proj.weight": 8}


@pytest.mark.parametrize(
    "bad, words",
    [
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (header({"w": {"data_offsets": [8, 4]}}), "no valid data_offsets"),
        (header({"w": {"data_offsets": [0, True]}}), "no valid data_offsets"),
        (header({"w": {"shape": [1]}}), "no valid data_offsets"),
    ],
)
def test_a_bad_header_names_the_file(bad, words):
    with pytest.raises(ParseError) as exc:
        tensor_bytes(bad, "model-00001.safetensors")
    assert exc.value.command == "model-00001.safetensors" and words in exc.value.message


def test_header_length_is_bounded():
    assert header_length(struct.pack("<Q", 1234), "f") == 1234
    for first8 in (b"abc", struct.pack("<Q", 0), struct.pack("<Q", 2**40)):
        with pytest.raises(ParseError):
            header_length(first8, "f")


def test_layout_groups_layers_as_mlx_lm_does():
    out = layout(
        {
            "model.embed_tokens.weight": 100,
            "lm_head.weight": 100,
            "model.norm.weight": 4,
            "model.layers.0.self_attn.q_proj.weight": 10,
            "model.layers.0.input_layernorm.weight": 1,
            "model.layers.2.mlp.down_proj.weight": 30,
            # a name mlx-lm's pattern does not take as a layer ("xlayers.1." has no dot before)
            "model.xlayers.1.w": 7,
        }
    )
    assert out == {"total_bytes": 252, "shared_bytes": 211, "layer_bytes": [11, 0, 30]}
    assert layout({}) == {"total_bytes": 0, "shared_bytes": 0, "layer_bytes": []}


def test_model_manifest_reads_the_layout_of_a_real_model(module_runner, tmp_path):
    model = make_tiny_model(tmp_path / "tiny", layers=4, shards=2)
    out = module_runner("model_manifest", args={"path": str(model), "weights": True})
    assert not out.failed, out.result
    w = out.result["weights"]
    assert w["files"] == 2 and w["index"] is True and len(w["layer_bytes"]) == 4
    assert all(b > 0 for b in w["layer_bytes"]) and w["shared_bytes"] > 0
    # every byte of tensor data: the files' sizes less their 8-byte length and header
    data = 0
    for f in model.glob("*.safetensors"):
        raw = f.read_bytes()
        data += len(raw) - 8 - struct.unpack("<Q", raw[:8])[0]
    assert w["total_bytes"] == data == w["shared_bytes"] + sum(w["layer_bytes"])
    assert w["dims"] == {
        "model_type": "qwen2",
        "layers": 4,
        "heads": 4,
        "kv_heads": 2,
        "head_dim": 16,
        "intermediate_size": 128,
        "moe_intermediate_size": None,
        "group_size": None,
        "latent_attention": False,
    }
    # without the option: nothing read
    assert module_runner("model_manifest", args={"path": str(model)}).result["weights"] is None


def test_model_manifest_names_a_damaged_weight_file(module_runner, tmp_path):
    model = make_tiny_model(tmp_path / "tiny", layers=2, shards=2)
    victim = sorted(model.glob("*.safetensors"))[0]
    victim.write_bytes(b"not a safetensors file at all")
    out = module_runner("model_manifest", args={"path": str(model), "weights": True, "label": "m2"})
    assert out.failed
    assert victim.name in out.result["msg"] and "m2" in out.result["msg"] and "Fix" in out.result["msg"]


def test_model_manifest_without_a_readable_config_warns_and_gives_no_dims(module_runner, tmp_path):
    model = make_tiny_model(tmp_path / "tiny", layers=2, shards=2)
    (model / "config.json").write_text("{not json")
    out = module_runner("model_manifest", args={"path": str(model), "weights": True, "label": "m1"})
    assert not out.failed and out.result["weights"]["dims"] is None
    assert any("config.json on m1 cannot be read as JSON" in w for w in out.warnings)
    (model / "config.json").unlink()
    out = module_runner("model_manifest", args={"path": str(model), "weights": True, "label": "m1"})
    assert out.result["weights"]["dims"] is None and any("has no config.json" in w for w in out.warnings)


DIMS_NONE = {
    "model_type": None,
    "layers": None,
    "heads": None,
    "kv_heads": None,
    "head_dim": None,
    "intermediate_size": None,
    "moe_intermediate_size": None,
    "group_size": None,
    "latent_attention": False,
}


@pytest.mark.parametrize(
    "config, expected",
    [
        pytest.param(
            {
                "model_type": "qwen3",
                "hidden_size": 2560,
                "num_hidden_layers": 36,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "intermediate_size": 9728,
                "quantization": {"group_size": 64, "bits": 4},
            },
            {
                "model_type": "qwen3",
                "layers": 36,
                "heads": 32,
                "kv_heads": 8,
                "head_dim": 128,
                "intermediate_size": 9728,
                "group_size": 64,
            },
            id="qwen3-4b-4bit-head-dim-given",
        ),
        pytest.param(
            {
                "model_type": "llama",
                "hidden_size": 4096,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "intermediate_size": 11008,
            },
            {
                "model_type": "llama",
                "layers": 32,
                "heads": 32,
                "kv_heads": 32,
                "head_dim": 128,
                "intermediate_size": 11008,
            },
            id="no-gqa-kv-heads-are-the-heads",
        ),
        pytest.param(
            {
                "model_type": "gemma3",
                "quantization_config": {"group_size": 32},
                "text_config": {
                    "model_type": "gemma3_text",
                    "hidden_size": 2560,
                    "num_hidden_layers": 34,
                    "num_attention_heads": 8,
                    "num_key_value_heads": 4,
                    "head_dim": 256,
                    "intermediate_size": 10240,
                },
            },
            {
                "model_type": "gemma3_text",
                "layers": 34,
                "heads": 8,
                "kv_heads": 4,
                "head_dim": 256,
                "intermediate_size": 10240,
                "group_size": 32,
            },
            id="vision-language-text-config",
        ),
        pytest.param(
            {
                "model_type": "deepseek_v3",
                "hidden_size": 7168,
                "num_hidden_layers": 61,
                "num_attention_heads": 128,
                "num_key_value_heads": 128,
                "kv_lora_rank": 512,
                "intermediate_size": 18432,
                "moe_intermediate_size": 2048,
            },
            {
                "model_type": "deepseek_v3",
                "layers": 61,
                "heads": 128,
                "kv_heads": 128,
                "head_dim": 56,
                "intermediate_size": 18432,
                "moe_intermediate_size": 2048,
                "latent_attention": True,
            },
            id="latent-attention-moe",
        ),
        pytest.param(
            {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12},
            {"model_type": "gpt2", "layers": 12, "heads": 12, "kv_heads": 12, "head_dim": 64},
            id="gpt2-names",
        ),
        pytest.param(
            {"num_attention_heads": True, "num_hidden_layers": "4", "intermediate_size": 0, "quantization": False},
            {},
            id="not-numbers-are-unknown",
        ),
    ],
)
def test_config_dims_reads_what_the_split_depends_on(config, expected):
    assert config_dims(config) == dict(DIMS_NONE, **expected)


def test_config_dims_of_not_an_object_is_none():
    assert config_dims([1, 2]) is None
