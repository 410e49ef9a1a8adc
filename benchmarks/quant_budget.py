"""The quant lab within a wall-clock budget: time 100 steps, fit the step count, train as it goes.

    python benchmarks/quant_budget.py --out DIR --budget-s 570 [--max-steps 20000] [key=value ...]

The engine of `benchmarks/gpu_quant_10min.sh` (the ten-minute GPU recipe; docs/quant.md
says why each setting), usable on any device. In order:

1. builds the corpus (once) and prints the plan's fixed part: the models, their parameter
   count and training FLOPs per step (`train_flops`);
2. times the first model's training, 100 steps with the compile and 100 without
   (`grokbench.quant.train.time_steps`; nothing stored);
3. sets one step count for the decoder pair, vanilla against the linear gate, that fits
   the budget with each model's compile and evaluation reserved, and prints it;
4. trains and evaluates them one after the other through `grokbench.quant.run_quant` (the
   store's records, written when each model finishes), rewriting OUT/decoder/quant_table.*
   and packing the records (`pack_results.pack_quant`) after each;
5. then the encoder pair (vanilla against the MLP gate) if at least `--encoder-min-steps`
   each still fit, timed and planned the same way, into OUT/encoder/.

`key=value` overrides go to every model (`grokbench quant`'s keys), after the recipe's
`SIZE`; the tests run it at a tiny size. The step count is a multiple of 100 (one compiled
chunk); warmup stays the lab's 5% of it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax
from pack_results import pack_quant

from grokbench.quant import QuantConfig, parse_quant_overrides, quant_configs, run_quant
from grokbench.quant.config import parse_bit_list
from grokbench.quant.table import corpus_of
from grokbench.quant.train import CHUNK, time_steps
from tasks.quant import MATMUL_PRECISION

SIZE: dict[str, object] = {
    "n_layers": 6,  # the depth of the paper's smallest public configs (BERT "15m", OPT-6L)
    "d_model": 256,  # Guo et al.'s width for sinks in small models; d_head 64 as BERT/OPT
    "n_heads": 4,
    "seq_len": 256,
    "batch_size": 64,  # 16,384 tokens a step, as the older GPU recipe's 128 x 128
    "lr": 1e-3,  # between the CPU recipe's 3e-3 x 64/256 and OPT-125m's 6e-4 x 768/256
    "decay_lr": False,  # constant after the warmup: the step count is not known in advance
    "corpus_chars": 16_000_000,  # ~36M bits of text against the ~10M 4.8M parameters can hold
    "bits": "W8A8,W6A6",
}
"""The ten-minute recipe's settings (their reasons: docs/quant.md, "The ten-minute GPU recipe").
Everything else is the lab's recipe: its corpus, OPT's weight decay 0.1 with LayerNorm scales
decayed on the decoder, BERT's on the encoder, the clipping, the init and the PTQ."""

PAIRS: dict[str, tuple[str, str]] = {
    "decoder": ("vanilla", "gated"),
    "encoder": ("vanilla", "gated_mlp"),
}
"""Each family's pair, in the order they run: vanilla against the paper's gate (OPT's linear
gate, BERT's MLP gate). The decoder runs first; the encoder if time allows."""


def train_flops(cfg: QuantConfig, vocab_size: int) -> float:
    """Matmul FLOPs of one training step (forward and backward, 3x the forward; 2 per
    multiply-add): per token and layer 8 D^2 (q, k, v, o), 4 D F (the FFN) and 4 T D (scores
    and context over every key, as the masked dense attention computes them), and 2 D V for
    the head. Elementwise work, LayerNorms and the gates are left out (a few percent)."""
    d, t, f = cfg.d_model, cfg.seq_len, cfg.d_ffn or 4 * cfg.d_model
    per_token = cfg.n_layers * (8 * d * d + 4 * d * f + 4 * t * d) + 2 * d * vocab_size
    return 3.0 * per_token * cfg.batch_size * t


def _eval_passes(cfg: QuantConfig) -> int:
    """Forward passes of one evaluation: the float model, then per bit width and calibration
    subset its calibration batches and the validation batches again."""
    per_bits = cfg.calib_subsets * (cfg.calib_batches + cfg.eval_batches)
    return cfg.eval_batches + len(parse_bit_list(cfg.bits)) * per_bits


def _params(cfg: QuantConfig, vocab_size: int) -> int:
    return sum(math.prod(s) for s in cfg.model_config(vocab_size).param_shapes().values())


class Plan:
    """The budget's clock and the step counts it allows."""

    def __init__(self, budget_s: float, margin: float) -> None:
        self.start = time.perf_counter()
        self.budget_s = budget_s
        self.margin = margin

    def left(self) -> float:
        """Seconds left, less the safety margin."""
        return self.budget_s * (1 - self.margin) - (time.perf_counter() - self.start)

    def steps(self, n_models: int, step_s: float, reserve_s: float, cap: int | None) -> int:
        """The most steps (a multiple of CHUNK) that `n_models` can each train in what is left
        after `reserve_s` (their compiles and evaluations); 0 if not even one chunk fits."""
        per_model = (self.left() - reserve_s) / n_models
        steps = int(max(per_model, 0) / step_s) // CHUNK * CHUNK
        return min(steps, cap) if cap else steps


def _family_configs(family: str, user: dict, steps: int) -> list[QuantConfig]:
    over = {**SIZE, **user, "families": (family,), "variants": PAIRS[family], "steps": steps}
    return quant_configs(False, over)


def _run_family(
    family: str, user: dict, plan: Plan, args: argparse.Namespace, min_steps: int
) -> tuple[int, float, float, float]:
    """Time, plan, train and evaluate one family's pair: (its step count, 0 when skipped;
    seconds per step, per compile and per evaluation)."""
    first = _family_configs(family, user, CHUNK)[0]
    corpus_t0 = time.perf_counter()
    corpus = corpus_of(first)
    corpus_s = time.perf_counter() - corpus_t0
    vocab = corpus.vocab_size
    flops = train_flops(first, vocab)
    print(
        f"== {family}: {first.n_layers} layers, d_model {first.d_model}, {first.n_heads} heads, "
        f"T {first.seq_len}, batch {first.batch_size}: {_params(first, vocab):,} "
        f"parameters, {flops:.3g} FLOP per training step; corpus {first.corpus} "
        f"({len(corpus.train_ids):,} training tokens, {corpus_s:.1f} s)"
    )
    timing = time_steps(first, corpus)
    step_s, compile_s = timing["step_s"], max(timing["first_chunk_s"] - CHUNK * timing["step_s"], 0)
    # Evaluation: its probe compiles about as long as training's chunk did, and a probe pass
    # costs at most a training step (a forward is about a third of one). The first model's
    # training program is compiled already; every other model compiles its own, and each
    # model compiles its probe.
    eval_s = _eval_passes(first) * step_s
    n = len(PAIRS[family])
    reserve_s = (2 * n - 1) * compile_s + n * eval_s
    print(
        f"   timing: 100 steps with the compile {timing['first_chunk_s']:.1f} s, then "
        f"{1e3 * step_s:.3g} ms per step ({flops / step_s / 1e12:.3g} TFLOP/s); "
        f"reserved {reserve_s:.0f} s for {2 * n - 1} compiles of ~{compile_s:.0f} s and "
        f"{n} evaluations of ~{_eval_passes(first)} passes"
    )
    steps = plan.steps(n, step_s, reserve_s, args.max_steps)
    if steps < min_steps:
        print(
            f"   skipped: {plan.left():.0f} s left fit {steps} steps per model, "
            f"fewer than {min_steps}"
        )
        return 0, step_s, compile_s, eval_s
    tokens = steps * first.batch_size * first.seq_len
    print(
        f"   plan: {', '.join(PAIRS[family])}, {steps:,} steps each: ~{steps * step_s:.0f} s "
        f"of training and {flops * steps:.3g} FLOP per model, {tokens:.3g} tokens "
        f"({tokens / len(corpus.train_ids):.1f} passes over the training text)"
    )
    out = pathlib.Path(args.out) / family
    for k in range(1, len(PAIRS[family]) + 1):
        variants = PAIRS[family][:k]
        if k > 1 and plan.left() < steps * step_s + 2 * compile_s + eval_s:
            print(f"   {variants[-1]}: skipped, {plan.left():.0f} s left")
            break
        t0 = time.perf_counter()
        over = {**SIZE, **user, "families": (family,), "variants": variants, "steps": steps}
        table = run_quant(
            quick=False, out=out, overrides=over, results=args.results, progress=False
        )
        row = table["rows"][-1]
        print(
            f"   {row['label']}: FP {row['fp_perplexity']:.3f}, max inf-norm "
            f"{row['max_inf_norm']:.1f}, kurtosis {row['avg_kurtosis']:.1f}, "
            + ", ".join(
                f"{b} {row[b.lower() + '_perplexity']:.3f}" for b in parse_bit_list(first.bits)
            )
            + f"; trained in {row['train_seconds']:.0f} s, {time.perf_counter() - t0:.0f} s "
            f"in all, {plan.left():.0f} s left"
        )
        pack_quant(pathlib.Path(args.results), pathlib.Path(args.out))
    return steps, step_s, compile_s, eval_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--budget-s", type=float, required=True, help="wall-clock budget")
    parser.add_argument("--results", default=os.environ.get("GROKBENCH_RESULTS", "results"))
    parser.add_argument("--max-steps", type=int, default=20_000, help="cap per model (0: none)")
    parser.add_argument(
        "--encoder-min-steps",
        type=int,
        default=2_000,
        help="run the encoder pair only if each gets this many steps (the CPU recipe's)",
    )
    parser.add_argument("--margin", type=float, default=0.05, help="budget share kept free")
    parser.add_argument("overrides", nargs="*", help="key=value, as grokbench quant takes")
    args = parser.parse_intermixed_args(argv)
    plan = Plan(args.budget_s, args.margin)
    user = parse_quant_overrides(args.overrides)
    swept = [k for k, v in user.items() if isinstance(v, tuple)]
    if swept:
        parser.error(f"one value per key (the pairs are fixed): {', '.join(swept)}")
    pathlib.Path(args.out).mkdir(parents=True, exist_ok=True)
    print(
        f"== budget {args.budget_s:.0f} s on {jax.devices()[0].device_kind} "
        f"({jax.default_backend()}); float32 matmuls at precision {MATMUL_PRECISION}; "
        f"sizes {json.dumps({**SIZE, **user})}"
    )
    done = {}
    done["decoder"], step_s, compile_s, eval_s = _run_family("decoder", user, plan, args, CHUNK)
    # The encoder's own timing costs a compile: pay it only if, at the decoder's speed, its
    # pair could get `--encoder-min-steps` each (two models: two trainings and two probes).
    n = len(PAIRS["encoder"])
    need = n * (args.encoder_min_steps * step_s + eval_s) + 2 * n * compile_s
    if done["decoder"] and plan.left() >= need:
        done["encoder"] = _run_family("encoder", user, plan, args, args.encoder_min_steps)[0]
    else:
        print(f"== encoder: skipped, {plan.left():.0f} s left, its pair needs ~{need:.0f} s")
        done["encoder"] = 0
    print(f"== done in {time.perf_counter() - plan.start:.0f} s: steps per model {done}")
    return 0 if done["decoder"] else 1


if __name__ == "__main__":
    sys.exit(main())
