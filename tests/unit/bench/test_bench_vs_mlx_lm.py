"""The benchmark measures what mlx_lm.benchmark measures: run both in one process on the same
tiny model with the same lengths and trials, and compare the numbers (same definitions, so the
same order of magnitude on the same machine; timing noise on a busy machine is why the bound
is a factor, not a percentage)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.programs import program_path
from tests.tinymodel import make_tiny_model

# (the benchmark and mlx_lm.benchmark run for real: the full suite runs it, the quick tier does not)
pytestmark = pytest.mark.slow

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
for _var in ("MLX_RANK", "MLX_HOSTFILE", "MLX_IBV_DEVICES", "MLX_JACCL_COORDINATOR", "MLX_WORLD_SIZE"):
    ENV.pop(_var, None)
PROMPT_TOKENS, GENERATION_TOKENS, TRIALS = 64, 48, 3
AVERAGES = re.compile(r"Averages: prompt_tps=([\d.]+), generation_tps=([\d.]+), peak_memory=([\d.]+)")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("vs") / "tiny", dtype="float32", layers=4)


def test_same_definitions_same_order_of_magnitude_as_mlx_lm_benchmark(tiny):
    theirs = subprocess.run([sys.executable, "-m", "mlx_lm.benchmark", "--model", str(tiny),
                             "-p", str(PROMPT_TOKENS), "-g", str(GENERATION_TOKENS), "-n", str(TRIALS)],
                            capture_output=True, text=True, timeout=300, env=ENV)
    assert theirs.returncode == 0, theirs.stderr[-2000:]
    (m,) = AVERAGES.findall(theirs.stdout)
    their_prompt, their_gen, their_peak = map(float, m)
    assert len(re.findall(r"^Trial \d+:", theirs.stdout, re.M)) == TRIALS

    ours = subprocess.run([sys.executable, str(program_path("benchmark", "mlx_cluster_bench.py")),
                           "--model", str(tiny), "--prompt-tokens", str(PROMPT_TOKENS),
                           "--generation-tokens", str(GENERATION_TOKENS), "--num-trials", str(TRIALS)],
                          capture_output=True, text=True, timeout=300, env=ENV)
    assert ours.returncode == 0, ours.stderr[-2000:]
    r = json.loads(ours.stdout.strip().splitlines()[-1])
    # the same work: as many prompt and generated tokens, as many timed trials after one warm-up
    assert (r["prompt_tokens"], r["generation_tokens"], r["num_trials"], r["warmup"]) == \
        (PROMPT_TOKENS, GENERATION_TOKENS, TRIALS, 1)
    assert r["prompt_source"] == "random"
    # mlx_lm.benchmark prints means: compare means
    for name, mine, theirs_v in (("prompt_tps", r["stats"]["prompt_tps"]["mean"], their_prompt),
                                 ("generation_tps", r["stats"]["generation_tps"]["mean"], their_gen)):
        assert theirs_v / 10 <= mine <= theirs_v * 10, (name, mine, theirs_v)
    assert their_peak / 3 <= r["peak_memory_gb"][0] <= their_peak * 3, (r["peak_memory_gb"], their_peak)
