"""Figure 3: the normalized Adam step |g_t| / (|g_t| + eps) against the margin, eps 1e-8.

Analytic: g_t is the target-logit gradient of cross-entropy on logits [m, 0] in the
compute dtype (figures.fig1.target_gradients). With fixed CE the step stays near 1 and
falls smoothly around log(1/eps) = 18.4; standard CE's step drops to 0 at the cliff of its
dtype (c16 = 5.5 in bf16, c32 = 16.6 in fp32), before the equilibrium is reached.

    python -m figures fig3
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import numerics
from figures._common import LOSS_COLORS, Context, mark_cliffs, new_figure, save
from figures.claims import Evidence, Row, claim_row
from figures.fig1 import cliff_row, target_gradients
from figures.paper import CLIFFS, EQUILIBRIUM_1E8, FIX
from figures.registry import Figure

EPS = 1e-8
_DTYPES = (("bf16", ml_dtypes.bfloat16, ":"), ("fp32", np.float32, "-"))


def normalized_steps(
    dtype, margins: np.ndarray, eps: float = EPS, truth: bool = False
) -> dict[str, np.ndarray]:
    """|g_t| / (|g_t| + eps) on [m, 0] logits per loss ('standard', 'fixed'; 'truth' too,
    from mpmath, if asked)."""
    g = target_gradients(dtype, margins, truth=truth)
    names = ("standard", "fixed", "truth") if truth else ("standard", "fixed")
    return {"m": g["m"]} | {k: np.abs(g[k]) / (np.abs(g[k]) + eps) for k in names}


def draw(ctx: Context) -> list:
    """Figure 3 (analytic: no training)."""
    fig, axes = new_figure(1, 1, width=4.2, height=2.8)
    ax = axes[0, 0]
    margins = np.linspace(0.0, 30.0, 1500)
    for name, dtype, linestyle in _DTYPES:
        steps = normalized_steps(dtype, margins)
        for loss in ("standard", "fixed"):
            ax.plot(
                steps["m"],
                steps[loss],
                color=LOSS_COLORS[loss],
                linestyle=linestyle,
                label=f"{loss} {name}",
            )
    ax.plot(
        margins[::5],
        normalized_steps(np.float64, margins[::5], truth=True)["truth"],
        "k--",
        linewidth=0.8,
        label="exact",
    )
    mark_cliffs(
        ax,
        {
            "c16": numerics.precision_cliff(ml_dtypes.bfloat16),
            "c32": numerics.precision_cliff(np.float32),
            "log(1/eps)": numerics.equilibrium_margin(EPS),
        },
    )
    ax.set_xlabel("logit margin m")
    ax.set_ylabel("|g_t| / (|g_t| + eps)")
    ax.set_title("normalized Adam step, eps = 1e-8")
    ax.legend(loc="lower left")
    return save(fig, ctx, "fig3")


def adam_step_sizes(residuals: np.ndarray, lr: float, eps: float, steps: int = 50) -> np.ndarray:
    """|update| / lr of the lab's Adam (fig7's b1, b2) fed a constant gradient r for `steps`
    steps, per r (the largest over the steps): what Adam makes of a standing residual."""
    import jax
    import jax.numpy as jnp

    from grokbench import optimizers, recipes

    base = recipes.RECIPES["fig7"].base
    opt = optimizers.adam(lr, base.b1, base.b2, eps)
    g = jnp.asarray(residuals, jnp.float32)
    state = opt.init(g)

    def step(state, _):
        update, state = opt.update(g, state, g)
        return state, jnp.abs(update) / lr

    _, sizes = jax.lax.scan(step, state, None, length=steps)
    return np.asarray(sizes, np.float64).max(axis=0)


def _first_zero(step, coarse: float, dtype) -> float:
    """The exact first zero of `step` among the dtype's values up to `coarse` (a seam for the
    tests: cliff_row checks the function at it and at the value below it)."""
    return numerics.first_zero(lambda v: step(v)[0], 0.0, coarse, dtype)


def _adam_row() -> Row:
    """Sec. 7: 'whenever this residual gradient exceeds eps, Adam normalizes it into steps of
    size eta', on the lab's Adam with fig7's settings (analytic: a standing gradient)."""
    from grokbench import recipes

    base = recipes.RECIPES["fig7"].base
    eps, lr = base.eps, base.lr
    above = eps * np.asarray([10.0, 1e2, 1e4, 1e5])  # fp32's and bf16's residuals sit here
    below = eps * np.asarray([1e-1, 1e-3, 1e-6, 1e-9])  # fp64's (~1e-17) sits here
    big, small = adam_step_sizes(above, lr, eps), adam_step_sizes(below, lr, eps)
    return claim_row(
        claim="Adam normalizes a residual gradient above eps into steps of size lr",
        source=f"{FIX}, Sec. 7",
        paper="whenever this residual gradient exceeds eps, Adam normalizes it into "
        "steps of size eta",
        ours=f"fig7's Adam (lr {lr:g}, eps {eps:g}) on a standing gradient r: step / lr "
        f"{', '.join(f'{x:.3g}' for x in big)} at r = 10, 1e2, 1e4, 1e5 eps; "
        f"{', '.join(f'{x:.2g}' for x in small)} at r = 0.1, 1e-3, 1e-6, 1e-9 eps",
        tolerance="steps within 10 % of lr for r >= 10 eps; below lr / 10 for r <= eps / 10 "
        "(an order of magnitude each side of 'exceeds')",
        ok={
            "steps ~ lr above eps": bool(np.all(np.abs(big - 1) <= 0.1)),
            "steps << lr below eps": bool(np.all(small < 0.1)),
        },
    )


def claims(evidence: Evidence) -> list[Row]:
    """Fig. 3 (analytic: no runs): where the normalized step halves, and where it drops to 0."""
    del evidence  # analytic
    m = np.linspace(0.0, 30.0, 30001)
    half = float(m[np.argmax(normalized_steps(np.float32, m)["fixed"] < 0.5)])
    rows = [
        claim_row(
            claim="fixed CE's normalized Adam step (fp32, eps 1e-8) decays around log(1/eps)",
            source=EQUILIBRIUM_1E8.where,
            paper=EQUILIBRIUM_1E8.stated,
            ours=f"step < 1/2 from m = {half:.2f}",
            tolerance=EQUILIBRIUM_1E8.tolerance,
            ok=EQUILIBRIUM_1E8.holds(half),
        )
    ]
    for name, dtype, _ in _DTYPES:
        s = normalized_steps(dtype, m)
        coarse = float(s["m"][np.argmax(s["standard"] == 0)])  # the grid's first zero

        def step(margins, dtype=dtype):
            return normalized_steps(dtype, np.atleast_1d(margins))["standard"]

        # The exact first zero among the dtype's values up to the grid's (the grid steps
        # 0.001 apart, coarser than fp32's spacing there): cliff_row evaluates it and the
        # value just below it.
        first = _first_zero(step, coarse, dtype)
        claim = f"standard CE's normalized step drops to 0 at the cliff ({name}, eps 1e-8)"
        rows.append(cliff_row(claim, CLIFFS[name], dtype, first, "step", step))
    return [*rows, _adam_row()]


FIGURE = Figure(
    name="fig3",
    order=3,
    builds={"fig3": draw},
    title="Fig. 3: the normalized Adam step",
    images=("fig3.png",),
    claims=claims,
)
