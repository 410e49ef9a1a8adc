"""One thin script per paper figure or table, reading stored results; the build that trains
what they read (`figures.build`); the reproduction report, its own package (`figures.report`)."""
