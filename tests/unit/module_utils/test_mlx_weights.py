"""module_utils/mlx_weights: a model's tensors by layer, from the safetensors headers, and the
module model_manifest's `weights` on a real (tiny) model written by MLX."""

import json
import struct

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_weights import header_length, layout, tensor_bytes
from tests.tinymodel import make_tiny_model


def header(entries):
    return json.dumps(entries).encode()


def test_tensor_bytes_are_the_data_offsets():
    h = header({"__metadata__": {"format": "mlx"},
                "model.embed_tokens.weight": {"dtype": "F16", "shape": [4, 2], "data_offsets": [0, 16]},
                "model.layers.0.mlp.up_proj.weight": {"dtype": "F16", "shape": [2, 2], "data_offsets": [16, 24]}})
    assert tensor_bytes(h, "m.safetensors") == {"model.embed_tokens.weight": 16,
                                                "model.layers.0.mlp.up_proj.weight": 8}


@pytest.mark.parametrize("bad, words", [
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (header({"w": {"data_offsets": [8, 4]}}), "no valid data_offsets"),
    (header({"w": {"data_offsets": [0, True]}}), "no valid data_offsets"),
    (header({"w": {"shape": [1]}}), "no valid data_offsets"),
])
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
    out = layout({"model.embed_tokens.weight": 100, "lm_head.weight": 100, "model.norm.weight": 4,
                  "model.layers.0.self_attn.q_proj.weight": 10, "model.layers.0.input_layernorm.weight": 1,
                  "model.layers.2.mlp.down_proj.weight": 30,
                  # a name mlx-lm's pattern does not take as a layer ("xlayers.1." has no dot before)
                  "model.xlayers.1.w": 7})
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
    # without the option: nothing read
    assert module_runner("model_manifest", args={"path": str(model)}).result["weights"] is None


def test_model_manifest_names_a_damaged_weight_file(module_runner, tmp_path):
    model = make_tiny_model(tmp_path / "tiny", layers=2, shards=2)
    victim = sorted(model.glob("*.safetensors"))[0]
    victim.write_bytes(b"not a safetensors file at all")
    out = module_runner("model_manifest", args={"path": str(model), "weights": True, "label": "m2"})
    assert out.failed
    assert victim.name in out.result["msg"] and "m2" in out.result["msg"] and "Fix" in out.result["msg"]
