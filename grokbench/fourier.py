"""Fourier progress measures (Nanda et al. 2023), taken in the engine every `eval_every` steps.

Nanda, Chan, Lieberum, Smith and Steinhardt, "Progress measures for grokking via mechanistic
interpretability" (ICLR 2023), Sec. 5.1, and their code (mechanistic-interpretability-grokking/
progress-measures-paper: `transformers.py`, `helpers.py`). A modular-addition network that
generalizes computes its logits as sum_w alpha_w cos(w (a + b - c)) over a few key
frequencies w = 2 pi k / p; each output column c of the logits over the p x p grid of inputs
(a, b) then lies in the span of cos(w (a + b)) and sin(w (a + b)). Everything below is
measured from the logits on that full grid (all p^2 pairs, `tasks.modular_table` order), in
the metric dtype (`grokbench.metrics.metric_dtype`), with the accurate `numerics.cross_entropy`
whatever loss the run trains with. Letters: F = p // 2 frequencies, K = p residues.

- Fourier basis: Nanda's `make_fourier_basis`: the p x p orthonormal rows const, cos 1,
  sin 1, ..., cos F, sin F of Z_p. Odd p only (an even p has a Nyquist row of zeros).
- Per frequency k, the logits' cos(w (a + b)) and sin(w (a + b)) components, one pair of
  numbers per output c: Nanda's `get_component_cos_xpy` / `get_component_sin_xpy`, the 2-D
  basis terms (cos a cos b - sin a sin b) / sqrt 2 and (sin a cos b + cos a sin b) / sqrt 2.
  For a - b the same with b's sine negated (cos(w (a - b)), sin(w (a - b))).
- `logit_freq_share` (F per evaluation): frequency k's squared norm in those components,
  summed over outputs, over the squared norm of the logits centred over the grid (Nanda's
  `bias_correction` removes the constant, and so does this ratio). Shares sum to at most 1.
- Key frequencies (`key_frequencies`): the frequencies whose share is at least `KEY_SHARE`,
  re-selected at every evaluation (Nanda's `take_metrics` recomputes its `key_freqs` at each
  checkpoint). The reference code takes instead each MLP neuron's best frequency and keeps
  every frequency some neuron prefers; that rule needs neuron activations and counts the
  noise of unused neurons, so we select from the logits, the quantity the two losses below
  ablate. A network still memorizing has no key frequency: a random (p^2, p) logit table
  puts about 2 / p^2 of its norm in each frequency.
- `restricted_loss`: Nanda's `calculate_trig_loss`: the logits keep only the key frequencies'
  components plus their mean over the grid (bias correction); mean CE over all p^2 pairs.
  With no key frequency it is the loss of the mean logits.
- `excluded_loss`: Nanda's `calculate_excluded_loss`: the key frequencies' components are
  removed; mean CE over the training pairs. All key frequencies are removed at once (one
  number); the reference code lists one value per frequency, each removed alone.
- `embed_freq_norm` (F per evaluation): the norm of the embedding in the Fourier basis per
  frequency, sqrt(|cos k|^2 + |sin k|^2), of the rows the residues 0..p-1 select (the
  transformer's `embed[:p]`; the MLP's first-layer rows for a, `w_in[:p]`).
- `gini`: the Gini coefficient of the norms of the embedding's p Fourier components (const,
  cos 1, sin 1, ...): the paper's sparsity measure of W_E in the Fourier basis. 0 when every
  component has the same norm, near 1 when a few carry all of it.
- `weight_sq`: the sum of squared parameters (Nanda's `sum_sq_weights`, summed), and per layer
  `weight_sq_embed` (embed, pos), `weight_sq_attn` (w_q, w_k, w_v, w_o, ln1),
  `weight_sq_mlp` (w_in, b_in, w_out, b_out, ln2) and `weight_sq_unembed` (w_u, ln_f).
  The 2-layer MLP has two layers: `weight_sq_embed` (w_in, whose rows the one-hot inputs
  select) and `weight_sq_unembed` (w_out).

What is defined where: the weight norms for every run the engine trains. The Fourier
measures for the tasks a+b and a-b at odd p (any model), where Nanda's circuit makes the
logits a function of a +- b. For the other tasks (a^2+b^2 and a^3+b of the MLP benchmarks,
a*b, a/b, a^2+ab+b^2) the logits are not functions of a +- b: the network's natural basis is
the characters of a^2 (or of the discrete log for a*b), not of a, so key frequencies over
(a, b) and the losses built on them measure nothing the paper's argument gives, and they are
not recorded. Distillation students (`grokbench.distill`) have their own loop and no measures.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import numerics
from grokbench.config import RunConfig
from grokbench.metrics import metric_dtype, sum_squares
from grokbench.tables import finite_or_none
from tasks import modular_table

__all__ = ["KEY_SHARE"]

KEY_SHARE = 0.05
"""A frequency is key when its components carry at least 5 % of the centred logits' squared
norm (a random table puts ~2 / p^2 = 0.2 % in each at p = 31)."""

FOURIER_TASKS: dict[str, int] = {"a+b": 1, "a-b": -1}
"""Tasks with Fourier measures, and the sign of b in the components (a + s b)."""

_FOURIER_COLUMNS: tuple[str, ...] = (
    "restricted_loss",
    "excluded_loss",
    "gini",
    "logit_freq_share",
    "embed_freq_norm",
)
"""The Fourier measures' metric columns (at `test_step`; the two `_freq_` ones are (E, F))."""

_LAYERS: dict[str, dict[str, str]] = {
    "transformer": {
        "embed": "embed",
        "pos": "embed",
        "w_q": "attn",
        "w_k": "attn",
        "w_v": "attn",
        "w_o": "attn",
        "ln1": "attn",
        "w_in": "mlp",
        "b_in": "mlp",
        "w_out": "mlp",
        "b_out": "mlp",
        "ln2": "mlp",
        "w_u": "unembed",
        "ln_f": "unembed",
    },
    "mlp": {"w_in": "embed", "w_out": "unembed"},
}


def _layer_groups(model: str) -> tuple[str, ...]:
    """The per-layer weight-norm groups of `model`, in order."""
    return tuple(dict.fromkeys(_LAYERS[model].values()))


def _has_fourier(cfg: RunConfig) -> bool:
    """Whether `cfg`'s runs record the Fourier measures (see the module docstring)."""
    return (
        cfg.progress_measures
        and not cfg.teacher_steps
        and cfg.task in FOURIER_TASKS
        and cfg.p % 2 == 1
    )


def columns(cfg: RunConfig) -> tuple[str, ...]:
    """The progress columns `cfg`'s metrics.npz holds (none when measures are off)."""
    if not cfg.progress_measures or cfg.teacher_steps:
        return ()
    norms = ("weight_sq", *(f"weight_sq_{g}" for g in _layer_groups(cfg.model)))
    return (*norms, *(_FOURIER_COLUMNS if _has_fourier(cfg) else ()))


def _fourier_basis(p: int) -> np.ndarray:
    """Nanda et al.'s `make_fourier_basis` for odd p: (p, p) float64, orthonormal rows const,
    cos 1, sin 1, ..., cos p//2, sin p//2 over 0..p-1."""
    if p % 2 == 0 or p < 3:
        raise ValueError(f"the Fourier measures need an odd p >= 3, got {p}")
    x = np.arange(p)
    rows = [np.ones(p)]
    for k in range(1, p // 2 + 1):
        rows += [np.cos(2 * np.pi * k * x / p), np.sin(2 * np.pi * k * x / p)]
    basis = np.stack(rows)
    return basis / np.linalg.norm(basis, axis=1, keepdims=True)


def _gini(x: jax.Array) -> jax.Array:
    """The Gini coefficient of non-negative values: sum_i (2i - n - 1) x_(i) / (n sum x), x
    sorted ascending, i = 1..n (0 for equal values, (n - 1) / n for one non-zero)."""
    n = x.shape[-1]
    ranks = 2 * jnp.arange(1, n + 1, dtype=x.dtype) - n - 1
    total = jnp.maximum(jnp.sum(x, axis=-1), jnp.finfo(x.dtype).tiny)
    return jnp.sum(ranks * jnp.sort(x, axis=-1), axis=-1) / (n * total)


def _weight_norms(params: Mapping[str, jax.Array], model: str, dt: np.dtype) -> dict:
    groups: dict[str, list] = {g: [] for g in _layer_groups(model)}
    for name, leaf in params.items():
        groups[_LAYERS[model][name.removesuffix("_scale").removesuffix("_bias")]].append(leaf)
    out = {f"weight_sq_{g}": sum_squares(leaves, dt)[0] for g, leaves in groups.items()}
    return {"weight_sq": sum(out.values()), **out}


def measures_fn(
    cfg: RunConfig, logits: Callable[[Any, jax.Array], jax.Array]
) -> Callable[[Any, jax.Array], dict] | None:
    """f(params, x_train) -> the progress columns of one evaluation (`columns(cfg)`), or None
    when `cfg` records none. `logits(params, tokens)` is the run's forward pass, read out at
    the p residues; the training pairs `x_train` select the excluded loss's examples."""
    if not columns(cfg):
        return None
    if not _has_fourier(cfg):
        return lambda params, _: _weight_norms(params, cfg.model, _dtype(params))
    p, sign = cfg.p, FOURIER_TASKS[cfg.task]
    tokens, labels = modular_table(cfg.modular_task())
    basis = _fourier_basis(p)
    c, s = basis[1::2], basis[2::2]  # (F, p): cos k, sin k
    root2 = np.sqrt(2.0)
    # The (F, p, p) directions cos(w (a + s b)) and sin(w (a + s b)) over the grid (a, b).
    u_cos = (np.einsum("fa,fb->fab", c, c) - sign * np.einsum("fa,fb->fab", s, s)) / root2
    u_sin = (np.einsum("fa,fb->fab", s, c) + sign * np.einsum("fa,fb->fab", c, s)) / root2
    embed_name = "embed" if cfg.model == "transformer" else "w_in"

    def measure(params: Any, x_train: jax.Array) -> dict:
        z = logits(params, jnp.asarray(tokens))
        dt = metric_dtype(np.dtype(z.dtype))
        grid_PxPxK = z.astype(dt).reshape(p, p, -1)
        a_cos_FxK = jnp.einsum("fab,abk->fk", u_cos.astype(dt), grid_PxPxK)
        a_sin_FxK = jnp.einsum("fab,abk->fk", u_sin.astype(dt), grid_PxPxK)
        mean_11K = jnp.mean(grid_PxPxK, axis=(0, 1), keepdims=True)
        centred = jnp.sum(jnp.square(grid_PxPxK - mean_11K))
        energy_F = jnp.sum(jnp.square(a_cos_FxK) + jnp.square(a_sin_FxK), axis=-1)
        share_F = energy_F / jnp.maximum(centred, jnp.finfo(dt).tiny)
        key_F = (share_F >= KEY_SHARE).astype(dt)[:, None]
        kept_PxPxK = jnp.einsum("fab,fk->abk", u_cos.astype(dt), key_F * a_cos_FxK)
        kept_PxPxK += jnp.einsum("fab,fk->abk", u_sin.astype(dt), key_F * a_sin_FxK)
        restricted = (mean_11K + kept_PxPxK).reshape(p * p, -1)
        excluded = (grid_PxPxK - kept_PxPxK).reshape(p * p, -1)
        train_N = x_train[:, 0] * p + x_train[:, 1]
        y_all = jnp.asarray(labels)
        embed_PxD = params[embed_name][:p].astype(dt)
        norms_P = jnp.linalg.norm(jnp.asarray(basis, dt) @ embed_PxD, axis=-1)
        return {
            **_weight_norms(params, cfg.model, dt),
            "restricted_loss": jnp.mean(numerics.cross_entropy(restricted, y_all)),
            "excluded_loss": jnp.mean(numerics.cross_entropy(excluded[train_N], y_all[train_N])),
            "gini": _gini(norms_P),
            "logit_freq_share": share_F,
            "embed_freq_norm": jnp.sqrt(jnp.square(norms_P[1::2]) + jnp.square(norms_P[2::2])),
        }

    return measure


def _dtype(params: Any) -> np.dtype:
    """The metric dtype of a parameter tree (float64 when its parameters are)."""
    return metric_dtype(np.dtype(jax.tree.leaves(params)[0].dtype))


def _key_frequencies(share_F: np.ndarray) -> list[int]:
    """The key frequencies (1-based) of one evaluation's `logit_freq_share` row."""
    return [int(k) + 1 for k in np.flatnonzero(np.asarray(share_F) >= KEY_SHARE)]


def final_measures(metrics: Mapping[str, np.ndarray]) -> dict:
    """The progress measures at the final evaluation (key frequencies, restricted and excluded
    loss, Gini), as a run's summary and the phase table show them; None where not recorded."""
    if "logit_freq_share" not in metrics:
        return dict.fromkeys(
            ("key_frequencies", "restricted_loss_final", "excluded_loss_final", "gini_final")
        )
    return {
        "key_frequencies": _key_frequencies(metrics["logit_freq_share"][-1]),
        "restricted_loss_final": finite_or_none(metrics["restricted_loss"][-1]),
        "excluded_loss_final": finite_or_none(metrics["excluded_loss"][-1]),
        "gini_final": finite_or_none(metrics["gini"][-1]),
    }
