# -*- coding: utf-8 -*-
"""Can mlx-lm split this model over this many Macs, in each mode? (pure, controller side)

From the numbers of the model's config.json (module_utils/mlx_weights.config_dims, read on
rank 0 by model_manifest), before the benchmark launches anything:

- pipeline (mlx-lm's PipelineMixin): each rank runs whole layers, so at least one layer per
  rank, and sharded_load picks each rank's files by model.safetensors.index.json;
- tensor (the models' `shard` methods, mlx.nn.layers.distributed.shard_linear): every layer's
  query projection, key/value projections and MLP are cut evenly between the ranks along
  their output (the heads and MLP widths must divide by the ranks: `n_heads //= N`, mx.split
  into N equal parts), and the attention output and MLP down projections along their input;
  a quantized layer cut along its input must leave each rank whole quantization groups, so
  those widths must divide by ranks x group size.

Problems have the shape of preflight.py's ({severity, check, host, port, msg, fix}), so
preflight.report renders them with the others.
"""

from __future__ import annotations

MODES = ("tensor", "pipeline")


def _problem(msg, fix):
    return {"severity": "error", "check": "split", "host": None, "port": None, "msg": msg, "fix": fix}


def tensor_requirements(dims, ranks):
    """[(what, config key, number, must divide by)] that mlx-lm's tensor split of `dims` over
    `ranks` Macs needs; numbers the config does not give are left out (mlx-lm's load then says)."""
    group = dims.get("group_size")
    per_group = ranks * group if group else ranks  # an input split keeps whole quantization groups
    heads, head_dim = dims.get("heads"), dims.get("head_dim")
    out = [("{} attention heads", "num_attention_heads", heads, ranks)]
    if not dims.get("latent_attention"):  # latent attention keeps its key/value projection whole
        out.append(("{} key/value heads", "num_key_value_heads", dims.get("kv_heads"), ranks))
        if group and heads and head_dim:
            out.append(("an attention width (heads x head_dim) of {}", "heads x head_dim", heads * head_dim, per_group))
    out.append(
        ("an MLP width (intermediate_size) of {}", "intermediate_size", dims.get("intermediate_size"), per_group)
    )
    out.append(
        (
            "an expert MLP width (moe_intermediate_size) of {}",
            "moe_intermediate_size",
            dims.get("moe_intermediate_size"),
            per_group,
        )
    )
    return [item for item in out if isinstance(item[2], int) and not isinstance(item[2], bool)]


def tensor_blockers(dims, ranks):
    """The tensor requirements of `dims` over `ranks` Macs that do not hold."""
    return [item for item in tensor_requirements(dims, ranks) if item[2] % item[3]]


def pipeline_blocker(dims, ranks, index=True, model="the model"):
    """(why, fix) when pipeline mode cannot split `dims` over `ranks` Macs, else None."""
    layers = dims.get("layers")
    if isinstance(layers, int) and layers < ranks:
        return (
            f"pipeline mode gives each of the {ranks} Macs whole layers, and {model} has {layers} layer(s)",
            f"run on at most {layers} Macs",
        )
    if not index:
        return (
            f"pipeline mode loads each Mac's layers by model.safetensors.index.json, and {model} has none "
            "(a single-file model)",
            "use a copy of the model saved in several shards (mlx_lm.convert writes the index)",
        )
    return None


def _tensor_fix(dims, ranks, blockers, pipeline_runs):
    by_divisor = {}
    for _what, key, _n, by in blockers:
        by_divisor.setdefault(by, []).append(key)
    wanted = " and ".join(
        f"{' and '.join(keys)} {'are multiples' if len(keys) > 1 else 'is a multiple'} of {by}"
        for by, keys in by_divisor.items()
    )
    fixes = ["run pipeline mode only (benchmark_modes: [pipeline])"] if pipeline_runs else []
    fixes.append(f"use a model whose {wanted}")
    fewer = [m for m in range(2, ranks) if not tensor_blockers(dims, m)]
    if fewer:
        fixes.append(f"fewer Macs (tensor mode can split it over {', '.join(map(str, fewer))})")
    return ", or ".join(fixes)


def split_problems(dims, ranks, modes, model="the model", index=True):
    """Errors for each mode in `modes` that mlx-lm cannot split `dims` (config_dims) over `ranks`
    Macs with, naming the numbers and the fix; [] when every mode can (or dims is unknown).
    `index`: whether the model has model.safetensors.index.json (model_manifest's weights.index)."""
    if not dims or ranks <= 1:
        return []
    tensor = tensor_blockers(dims, ranks)
    pipeline = pipeline_blocker(dims, ranks, index, model)
    problems = []
    if "tensor" in modes and tensor:
        has = ", ".join(
            what.format(n)
            + f" (not a multiple of {by}"
            + (f": {ranks} Macs x quantization groups of {by // ranks})" if by != ranks else ")")
            for what, _key, n, by in tensor
        )
        problems.append(
            _problem(
                f"tensor mode splits every layer of {model} evenly over {ranks} Macs, and it has {has}",
                _tensor_fix(dims, ranks, tensor, pipeline is None),
            )
        )
    if "pipeline" in modes and pipeline:
        why, fix = pipeline
        fixes = [fix] if tensor else ["run tensor mode only (benchmark_modes: [tensor])", fix]
        problems.append(_problem(why, ", or ".join(fixes)))
    return problems
