"""One thin script per paper figure or table, reading stored results."""
