"""grokbench: the harness. Optimizers, precision policies, the training engine, sweeps, CLI."""
