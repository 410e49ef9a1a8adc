"""The report's claims of Fig. 3 (analytic): where fixed CE's normalized Adam step halves,
where standard CE's drops to 0, and Sec. 7's Adam normalizing a residual above eps.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

import numerics
from figures._analytic import EPS, normalized_steps
from figures.registry import Claims
from figures.report.claims import Evidence, Row, claim_row
from figures.report.fig1 import cliff_row
from figures.report.paper import CLIFFS, EQUILIBRIUM_1E8, FIX

__all__ = ["CLAIMS", "EPS", "adam_step_sizes", "claims", "normalized_steps"]

_DTYPES = (("bf16", ml_dtypes.bfloat16), ("fp32", np.float32))
"""The compute dtypes Figure 3 draws, whose cliffs the claims measure."""


def adam_step_sizes(residuals: np.ndarray, lr: float, eps: float, steps: int = 50) -> np.ndarray:
    """|update| / lr of the lab's Adam (fig7's b1, b2) fed a constant gradient r for `steps`
    steps, per r (the largest over the steps): what Adam makes of a standing residual."""
    r = np.asarray(residuals, np.float64)
    flat = tuple(float(x) for x in r.ravel())
    return _adam_step_sizes(flat, float(lr), float(eps), int(steps)).reshape(r.shape)


@functools.cache  # the report and its tests ask again: its scan compiles anew on every call
def _adam_step_sizes(residuals: tuple, lr: float, eps: float, steps: int) -> np.ndarray:
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
    sizes = np.asarray(sizes, np.float64).max(axis=0)
    sizes.flags.writeable = False  # cached: the callers get a read-only view
    return sizes


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
    for name, dtype in _DTYPES:
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


CLAIMS = Claims(figure="fig3", claims=claims)
