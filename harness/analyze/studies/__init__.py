"""The read-only diagnostic studies over a study folder's Dataset (repeat, MoE backend, falsification,
dispersion, host drift, engine reuse): each computes frames and conclusions and measures nothing."""
