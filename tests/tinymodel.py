"""A tiny qwen2 model for mlx-lm, made on the spot: no download, no network.

`make_tiny_model(path)` writes a directory that `mlx_lm.load(path)` and
`mlx_lm.utils.sharded_load(path, ...)` accept like any converted checkpoint:

- config.json: qwen2, untied lm_head (`tie_word_embeddings: false`), dimensions that split
  evenly over 2 ranks (heads, kv_heads, intermediate size) and >= 2 layers for a pipeline;
- tokenizer.json + tokenizer_config.json: a byte-level BPE trained here, with the `tokenizers`
  library, on an in-code corpus; eos `<|im_end|>`; a ChatML-like chat_template;
- model-0000K-of-0000N.safetensors (>= 2 shards) + model.safetensors.index.json (weight_map),
  the layers spread over the shards so a pipeline rank only needs some of them.

Weights are random but deterministic for a seed (numpy's PCG64). The lm_head is scaled so the
logits are well apart (greedy decoding gives the same tokens whether the matmuls are summed on
one process or across tensor-parallel ranks) and the embeddings are small next to the layers
(the context, not just the last token, picks the next token, so a sharding error shows).

`demo_plan(macs)` picks the dimensions (and the modes) for a demo over a number of Macs:
scripts/demo.sh makes its model with them (`--for-macs N`).

CLI: python tests/tinymodel.py OUT_DIR [--dtype float32|float16] [--seed N]
     [--for-macs N | --layers N --heads N --kv-heads N --hidden-size N --intermediate-size N]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

# Special tokens, ChatML-style like the real Qwen2 tokenizers.
PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, IM_START, EOS_TOKEN]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CORPUS = [
    "The Mac Studio and the Mac mini are joined by Thunderbolt cables into a small cluster.",
    "Each node runs MLX and takes one rank; rank zero prints the result as one JSON line.",
    "Tensor parallel splits every layer across the ranks; a pipeline gives each rank layers.",
    "An all sum adds the arrays of every rank, and an all gather concatenates them.",
    "Write a story about a fast computer that counts tokens per second in the morning.",
    "Hello world! What is the capital of France? Paris is the capital of France.",
    "The quick brown fox jumps over the lazy dog 0 1 2 3 4 5 6 7 8 9 times.",
    "Ansible configures the network, checks every link, then launches the benchmark.",
]
DTYPES = ("float32", "float16")
# Small embeddings next to unit-scale layers: the layers (attention over the context), not the
# current token alone, pick the next token, so a sharding error shows in the greedy tokens.
EMBED_STD = 0.3


def build_tokenizer(vocab_size: int):
    """A byte-level BPE trained on CORPUS: any text encodes, ids are stable for a vocab size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    return tok


def _weight_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """HF-style qwen2 tensor names and shapes (what mlx-lm's qwen2.Model expects)."""
    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    head_dim = h // cfg["num_attention_heads"]
    q_out = cfg["num_attention_heads"] * head_dim
    kv_out = cfg["num_key_value_heads"] * head_dim
    shapes = {"model.embed_tokens.weight": (vocab, h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update(
            {
                p + "input_layernorm.weight": (h,),
                p + "self_attn.q_proj.weight": (q_out, h),
                p + "self_attn.q_proj.bias": (q_out,),
                p + "self_attn.k_proj.weight": (kv_out, h),
                p + "self_attn.k_proj.bias": (kv_out,),
                p + "self_attn.v_proj.weight": (kv_out, h),
                p + "self_attn.v_proj.bias": (kv_out,),
                p + "self_attn.o_proj.weight": (h, q_out),
                p + "post_attention_layernorm.weight": (h,),
                p + "mlp.gate_proj.weight": (inter, h),
                p + "mlp.up_proj.weight": (inter, h),
                p + "mlp.down_proj.weight": (h, inter),
            }
        )
    shapes["model.norm.weight"] = (h,)
    shapes["lm_head.weight"] = (vocab, h)
    return shapes


def _random_weights(cfg: dict, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in _weight_shapes(cfg).items():
        if name.endswith("norm.weight"):
            w = np.ones(shape)
        elif name == "lm_head.weight":
            # After the final RMSNorm the hidden state has unit RMS, so this std gives logits
            # of std ~4: top-1 gaps dwarf float rounding, greedy decoding is stable.
            w = rng.normal(0.0, 4.0 / math.sqrt(shape[1]), shape)
        elif name == "model.embed_tokens.weight":
            w = rng.normal(0.0, EMBED_STD, shape)
        else:
            w = rng.normal(0.0, 1.0 / math.sqrt(shape[-1]), shape)
        out[name] = w.astype(np.float32)
    return out


def _shard_of(name: str, layers: int, shards: int) -> int:
    """Embeddings in the first shard, norm and lm_head in the last, layers spread in order."""
    if name.startswith("model.layers."):
        return int(name.split(".")[2]) * shards // layers
    return 0 if name.startswith("model.embed_tokens") else shards - 1


def tiny_config(
    vocab: int,
    eos_id: int,
    dtype: str = "float32",
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate_size: int = 128,
) -> dict:
    """config.json of the tiny qwen2 model (what mlx-lm's qwen2.ModelArgs reads), checked."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, not {dtype!r}")
    if hidden_size % heads or heads % kv_heads or (hidden_size // heads) % 2:
        raise ValueError(
            "hidden_size must divide by heads into an even head width (RoPE turns pairs), and heads by kv_heads"
        )
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "vocab_size": vocab,
        "tie_word_embeddings": False,
        "bos_token_id": None,
        "eos_token_id": eos_id,
        "torch_dtype": dtype,
    }


def make_tiny_model(
    path,
    dtype: str = "float32",
    seed: int = 0,
    vocab_size: int = 384,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate_size: int = 128,
    shards: int = 2,
) -> Path:
    """Write the tiny qwen2 model into `path` (created if missing) and return it as a Path.

    vocab_size is the BPE trainer's target; the model's vocab_size is the size the tokenizer
    really reaches (the corpus is small), so every id the model can emit decodes.
    """
    import mlx.core as mx

    tiny_config(1, 0, dtype, hidden_size, layers, heads, kv_heads, intermediate_size)  # the checks, first
    if not 2 <= shards <= layers:
        raise ValueError(f"shards must be between 2 and layers ({layers}), not {shards}")

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)

    tok = build_tokenizer(vocab_size)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": None,
                "eos_token": EOS_TOKEN,
                "pad_token": PAD_TOKEN,
                "unk_token": None,
                "model_max_length": 512,
                "clean_up_tokenization_spaces": False,
                "chat_template": CHAT_TEMPLATE,
            },
            indent=2,
        )
        + "\n"
    )

    cfg = tiny_config(
        tok.get_vocab_size(), tok.token_to_id(EOS_TOKEN), dtype, hidden_size, layers, heads, kv_heads, intermediate_size
    )
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")

    for stale in out.glob("model*.safetensors"):  # from an earlier call with other shards
        stale.unlink()
    weights = _random_weights(cfg, seed)
    names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    per_file: list[dict] = [{} for _ in names]
    weight_map = {}
    for name, w in weights.items():
        k = _shard_of(name, layers, shards)
        per_file[k][name] = mx.array(w).astype(getattr(mx, dtype))
        weight_map[name] = names[k]
    total = 0
    for fname, tensors in zip(names, per_file):
        mx.save_safetensors(str(out / fname), tensors, metadata={"format": "mlx"})
        total += sum(t.nbytes for t in tensors.values())
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, indent=2) + "\n"
    )
    return out


# Width of each attention head in demo_plan: even (RoPE rotates pairs), small.
DEMO_HEAD_DIM = 8
# The most Macs the demo runs tensor mode over (demo_plan): the simulated Macs share this
# machine's cores, and tensor mode's two sums per layer and token over every Mac grow with them.
DEMO_TENSOR_MAX_MACS = 8


def demo_plan(macs: int) -> dict:
    """The tiny model for a demo over `macs` Macs, and the modes it runs: {"dims": make_tiny_model's
    layers, heads, kv_heads, hidden_size, intermediate_size; "modes": [...]; "left_out": {mode:
    why}}. A pipeline gives each Mac whole layers: one layer per Mac (no more: in tensor mode
    every layer sums across the Macs twice per token, the slow part on a simulated cluster).
    Tensor mode cuts every layer's heads, key/value heads and MLP evenly: each a multiple of the
    Macs (grouped-query attention, two query heads per key/value head, as the 4-Mac demo had);
    over more than DEMO_TENSOR_MAX_MACS Macs it is left out, with the reason."""
    if macs < 1:
        raise ValueError(f"a demo needs at least one Mac, not {macs}")
    kv_heads = macs
    heads = 2 * kv_heads
    hidden = heads * DEMO_HEAD_DIM
    dims = {
        "layers": max(2, macs),
        "heads": heads,
        "kv_heads": kv_heads,
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
    }
    if macs > DEMO_TENSOR_MAX_MACS:
        why = (
            f"tensor mode sums every layer across all {macs} Macs twice per token, and the simulated Macs "
            f"share this machine's cores (over 8 a trial took 44 s on 2 cores; over 16 the warm-up had not "
            f"ended after 7 minutes): the demo runs the pipeline alone over more than {DEMO_TENSOR_MAX_MACS} Macs"
        )
        return {"dims": dims, "modes": ["pipeline"], "left_out": {"tensor": why}}
    return {"dims": dims, "modes": ["tensor", "pipeline"], "left_out": {}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write a tiny random qwen2 model for mlx-lm.")
    parser.add_argument("out_dir", help="directory to write the model into")
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, default=2, help="decoder layers (a pipeline needs one per rank)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (tensor ranks split them evenly)")
    parser.add_argument("--kv-heads", type=int, default=2, help="key/value heads (tensor ranks split them evenly)")
    parser.add_argument("--hidden-size", type=int, default=64, help="model width (heads x head width)")
    parser.add_argument("--intermediate-size", type=int, default=128, help="MLP width (tensor ranks split it evenly)")
    parser.add_argument(
        "--for-macs",
        type=int,
        metavar="N",
        help="the dimensions demo_plan picks for a demo over N Macs (instead of the four above)",
    )
    args = parser.parse_args(argv)
    dims = {
        "layers": args.layers,
        "heads": args.heads,
        "kv_heads": args.kv_heads,
        "hidden_size": args.hidden_size,
        "intermediate_size": args.intermediate_size,
    }
    if args.for_macs is not None:
        dims = demo_plan(args.for_macs)["dims"]
    print(make_tiny_model(args.out_dir, dtype=args.dtype, seed=args.seed, **dims))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
