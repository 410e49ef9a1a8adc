"""XLA options for the tests whose assertions hold at any optimization level."""

from conftest import FAST_COMPILE_OPTIONS

FAST_COMPILE = {
    "xla_backend_optimization_level": 0,
    "xla_llvm_disable_expensive_passes": True,
    **FAST_COMPILE_OPTIONS,
}
"""`jax.jit(..., compiler_options=FAST_COMPILE)`: XLA's lowest backend optimization and XLA CPU's
older fusion emitters (conftest.py's `FAST_COMPILE_OPTIONS`, which `fast_compile` adds too), as
tests/grokbench/test_quant_budget.py's tiny script run compiles. The traced program, the
library's code path, is the one training runs; only XLA's code generation is cheaper (a tiny
quant model's training step compiled in about half the time at level 0 alone; the older emitters
halve such programs' compile again, benchmarks/compile_options.py). For smoke tests (finite
values, a loss that moves, shapes) and structural properties (exact zeros of a clipped entry, a
causal mask), never for a test whose bound is a rounding-error model."""
