"""The benchmark's tokens/s formula on a fixed clock: mlx_cluster_bench.py's generate_fixed and
mlx_lm's own stream_generate (what mlx_lm.benchmark reports) read the same scripted clock while a
stub generates the tokens, and must give the numbers mlx_lm's definition gives for those times.

No model and no MLX computation: the stub stands in for mlx_lm.generate.generate_step, and the
clock moves only when the stub says a token took time (plus a nanosecond a read, so that no
interval is zero: stream_generate divides by one right after the first token).
"""

from __future__ import annotations

import contextlib
import importlib
import time

import pytest

from tests.programs import load_program

READ_COST = 1e-9  # seconds a clock read takes: keeps every interval above zero, far below the tolerance
REL = 1e-6


class Clock:
    """time.perf_counter for the test: the scripted time, moved by the stub generator."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        self.now += READ_COST
        return self.now


def scripted_generate_step(clock, prompt_seconds, token_seconds, calls):
    """A generate_step whose first token comes after prompt_seconds and token i + 1 token_seconds[i]
    later. Like the real one, the time a token takes passes before it is yielded (its `.item()`
    waits for it), and nothing is computed after the last one."""

    def generate_step(prompt, model, *args, max_tokens, **kwargs):
        calls.append({"prompt_size": prompt.size, "max_tokens": max_tokens, "sampler": kwargs.get("sampler")})
        for i, seconds in enumerate([prompt_seconds, *token_seconds][:max_tokens]):
            clock.now += seconds
            yield 100 + i, None

    return generate_step


def mlx_lm_rates(prompt_tokens, generated, prompt_seconds, token_seconds):
    """mlx_lm's definition, read from mlx_lm/generate.py `stream_generate` (0.32): a timer starts
    before generation; at the first token `prompt_tps = prompt.size / prompt_time` and the timer
    restarts; after the last, `generation_tps = (n + 1) / (time.perf_counter() - tic)` with n + 1 the
    tokens generated (the first one counted, its time not). mlx_lm/benchmark.py `main` reports the
    last response's values (their mean over trials)."""
    return prompt_tokens / prompt_seconds, generated / sum(token_seconds[: generated - 1])


class HFTokenizer:
    """The least a Hugging Face tokenizer must offer mlx_lm's TokenizerWrapper: no EOS (as
    mlx_lm.benchmark empties it), no chat template."""

    eos_token_id = None
    bos_token = None
    chat_template = None

    def get_vocab(self):
        return {}

    def decode(self, ids, **kwargs):
        return "".join(map(chr, ids))

    def encode(self, text, add_special_tokens=True):
        return list(map(ord, text))

    def apply_chat_template(self, messages, **kwargs):
        raise AssertionError("no chat template")


@pytest.fixture
def bench(monkeypatch):
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # set by the program on import: restored after
        monkeypatch.setenv(var, "1")
    return load_program("benchmark", "mlx_cluster_bench.py")


# (prompt tokens, seconds to the first token, seconds each further token took)
CASES = [
    pytest.param(12, 0.75, [0.1, 0.2, 0.05, 0.3, 0.15, 0.25], id="irregular-7-tokens"),
    pytest.param(512, 2.0, [0.02] * 1023, id="mlx_lm.benchmark-defaults"),
    pytest.param(3, 0.5, [0.4], id="two-tokens"),
]


@pytest.mark.parametrize(("prompt_tokens", "prompt_seconds", "token_seconds"), CASES)
def test_generate_fixed_gives_mlx_lm_tokens_per_second_on_a_fixed_clock(
    bench, monkeypatch, prompt_tokens, prompt_seconds, token_seconds
):
    import mlx.core as mx
    from mlx_lm.tokenizer_utils import TokenizerWrapper

    mlx_generate = importlib.import_module("mlx_lm.generate")  # (mlx_lm.generate is also a function's name)
    generated = len(token_seconds) + 1
    want_prompt_tps, want_generation_tps = mlx_lm_rates(prompt_tokens, generated, prompt_seconds, token_seconds)
    clock = Clock()
    monkeypatch.setattr(time, "perf_counter", clock)
    monkeypatch.setattr(mlx_generate, "wired_limit", lambda *args, **kwargs: contextlib.nullcontext())
    monkeypatch.setattr(
        mlx_generate, "generate_step", scripted_generate_step(clock, prompt_seconds, token_seconds, calls := [])
    )
    prompt = list(range(prompt_tokens))

    start = clock.now
    tokens, ours = bench.generate_fixed(object(), prompt, generated)
    assert tokens == [100 + i for i in range(generated)]
    assert calls == [{"prompt_size": prompt_tokens, "max_tokens": generated, "sampler": None}]  # greedy
    assert ours["prompt_tps"] == pytest.approx(want_prompt_tps, rel=REL)
    assert ours["generation_tps"] == pytest.approx(want_generation_tps, rel=REL)
    assert ours["total_time"] == pytest.approx(clock.now - start, rel=REL)
    assert ours["total_time"] == pytest.approx(prompt_seconds + sum(token_seconds), rel=REL)

    # mlx_lm's own code on the same script: what mlx_lm.benchmark reads is the last response
    *_, theirs = mlx_generate.stream_generate(
        object(), TokenizerWrapper(HFTokenizer()), mx.array(prompt), max_tokens=generated
    )
    assert (theirs.prompt_tokens, theirs.generation_tokens) == (prompt_tokens, generated)
    assert theirs.prompt_tps == pytest.approx(want_prompt_tps, rel=REL)
    assert theirs.generation_tps == pytest.approx(want_generation_tps, rel=REL)
    assert ours["prompt_tps"] == pytest.approx(theirs.prompt_tps, rel=REL)
    assert ours["generation_tps"] == pytest.approx(theirs.generation_tps, rel=REL)
