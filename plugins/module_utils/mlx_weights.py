# -*- coding: utf-8 -*-
"""How a model's weights divide into layers, from its safetensors headers (pure, no MLX).

A .safetensors file starts with an 8-byte little-endian header length and a JSON header
{tensor name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}; the
bytes of a tensor are end - begin. Reading the headers costs a few KB per file, whatever the
model's size.

Tensors are given to layers the way mlx-lm's sharded_load does for a pipeline: a name with
"layers.<i>." belongs to layer i; everything else (embeddings, final norm, head) is "shared",
kept by every pipeline stage.
"""

from __future__ import annotations

import json
import re

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError

# mlx-lm (utils.sharded_load) matches layers by this pattern, since sanitize can rename them
LAYER_NAME = re.compile(r"(?:^|\.)layers\.(\d+)\.")
# a header larger than this is not a safetensors header (real ones are KB to a few MB)
MAX_HEADER_BYTES = 100 * 2**20
INDEX_FILE = "model.safetensors.index.json"


def header_length(first8, name):
    """The header length from a file's first 8 bytes; ParseError naming the file otherwise."""
    if len(first8) != 8:
        raise ParseError(name, "shorter than a safetensors header (8 bytes)")
    n = int.from_bytes(first8, "little")
    if not 2 <= n <= MAX_HEADER_BYTES:
        raise ParseError(name, f"safetensors header length {n} is not plausible: not a safetensors file?")
    return n


def tensor_bytes(header, name):
    """{tensor name: bytes} from a safetensors header (bytes of JSON)."""
    try:
        data = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ParseError(name, f"safetensors header is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ParseError(name, "safetensors header is not a JSON object")
    out = {}
    for key, entry in data.items():
        if key == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            or offsets[1] < offsets[0]
        ):
            raise ParseError(name, f"tensor {key[:80]!r} has no valid data_offsets")
        out[key] = offsets[1] - offsets[0]
    return out


def layout(tensors):
    """{tensor: bytes} of the whole model -> {"total_bytes", "shared_bytes", "layer_bytes":
    [bytes of layer 0, 1, ...]}. A layer number with no tensor counts 0 bytes."""
    shared, layers = 0, {}
    for key, size in tensors.items():
        m = LAYER_NAME.search(key)
        if m is None:
            shared += size
        else:
            layers[int(m.group(1))] = layers.get(int(m.group(1)), 0) + size
    count = max(layers) + 1 if layers else 0
    return {
        "total_bytes": shared + sum(layers.values()),
        "shared_bytes": shared,
        "layer_bytes": [layers.get(i, 0) for i in range(count)],
    }


CONFIG_FILE = "config.json"


def _count(cfg, *keys):
    """The first of `keys` in `cfg` that is a positive whole number, else None."""
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def config_dims(config):
    """The numbers of a model's config.json (a dict) that decide how mlx-lm can split it
    between ranks: {"model_type", "layers", "heads", "kv_heads", "head_dim", "intermediate_size",
    "moe_intermediate_size", "group_size", "latent_attention"}; a number the config does not
    give is None. A vision-language model splits its text model (`text_config`); the
    quantization (`quantization`, else `quantization_config`) is the checkpoint's, at the top.
    Key/value heads default to the attention heads (no grouped-query attention), the head
    width to hidden_size / heads, as mlx-lm's models take them."""
    if not isinstance(config, dict):
        return None
    cfg = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    heads = _count(cfg, "num_attention_heads", "n_head")
    hidden = _count(cfg, "hidden_size", "n_embd")
    quant = config.get("quantization") or config.get("quantization_config") or {}
    return {
        "model_type": cfg.get("model_type", config.get("model_type")),
        "layers": _count(cfg, "num_hidden_layers", "n_layer"),
        "heads": heads,
        "kv_heads": _count(cfg, "num_key_value_heads") or heads,
        "head_dim": _count(cfg, "head_dim") or (hidden // heads if hidden and heads else None),
        "intermediate_size": _count(cfg, "intermediate_size"),
        "moe_intermediate_size": _count(cfg, "moe_intermediate_size"),
        "group_size": _count(quant, "group_size") if isinstance(quant, dict) else None,
        # multi-head latent attention (DeepSeek V2/V3, Kimi): only the query heads are split
        "latent_attention": "kv_lora_rank" in cfg,
    }
