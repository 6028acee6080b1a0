"""The engine, which knows no attribute names: the canonical spec and shape inference, window
plans and kernel tables, the prepared pools (float, quantized, tiled), tuning, caches and the
worker threads. Imports only :mod:`avgpool.kernels` and :mod:`avgpool.errors` from outside.
"""
