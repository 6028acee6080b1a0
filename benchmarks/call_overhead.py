#!/usr/bin/env python3
"""What a plain function call costs over its prepared pool, on a call so small (1x1x4x4, k2,
``out=``) that the cost is the Python around the kernel: ``average_pool`` and
``qlinear_average_pool`` with the same argument objects every call (a model runner's) and with
lists written in the call, OpenVINO's and oneDNN's functions, and the prepared pools; where
torch is installed, the same calls on CPU tensors (their cost over the numpy call is the
conversion both ways).

    python benchmarks/call_overhead.py     # the minimum over 15 rounds of 3 x 2000 calls, in us

The minimum is the steadiest figure for sub-microsecond differences on a shared machine; compare
two checkouts by running each a few times alternately (PYTHONPATH=<checkout>/src).
"""

import timeit

import numpy as np

import avgpool
import avgpool.onednn
import avgpool.openvino

x = np.random.default_rng(0).standard_normal((1, 1, 4, 4)).astype(np.float32)
out = np.empty((1, 1, 3, 3), np.float32)
xq = np.random.default_rng(0).integers(0, 255, (1, 1, 4, 4), dtype=np.uint8)
outq = np.empty((1, 1, 3, 3), np.uint8)
ks, st = [2, 2], [1, 1]
pool = avgpool.AveragePool([2, 2], strides=[1, 1])
qpool = avgpool.QLinearAveragePool(0.1, 3, 0.2, 5, [2, 2], strides=[1, 1])
xs, xz, ys, yz = 0.1, 3, 0.2, 5
b0, e0 = [0, 0], [0, 0]
cases = {
    "prepared float": lambda: pool(x, out),
    "function same objects": lambda: avgpool.average_pool(x, ks, strides=st, out=out),
    "function literal": lambda: avgpool.average_pool(x, [2, 2], strides=[1, 1], out=out),
    "qlinear prepared": lambda: qpool(xq, outq),
    "qlinear same objects": lambda: avgpool.qlinear_average_pool(xq, xs, xz, ys, yz, ks, strides=st, out=outq),
    "qlinear literal": lambda: avgpool.qlinear_average_pool(xq, 0.1, 3, 0.2, 5, [2, 2], strides=[1, 1], out=outq),
    "openvino same objects": lambda: avgpool.openvino.avg_pool(
        x, ks, strides=st, pads_begin=b0, pads_end=e0, exclude_pad=True, out=out
    ),
    "onednn same objects": lambda: avgpool.onednn.avg_pool(
        x, ks, strides=st, pads_begin=b0, pads_end=e0, exclude_pad=True, data_format="NCX", out=out
    ),
}
try:  # the same calls on torch tensors (tensors in, tensors out: avgpool._ops._tensors)
    import torch
except ImportError:
    torch = None
if torch is not None:
    xt, outt, xqt, outqt = (torch.from_numpy(a) for a in (x, out, xq, outq))
    cases["torch prepared float"] = lambda: pool(xt, outt)
    cases["torch function same objects"] = lambda: avgpool.average_pool(xt, ks, strides=st, out=outt)
    cases["torch function no out"] = lambda: avgpool.average_pool(xt, ks, strides=st)
    cases["numpy function no out"] = lambda: avgpool.average_pool(x, ks, strides=st)
    cases["torch qlinear same objects"] = lambda: avgpool.qlinear_average_pool(
        xqt, xs, xz, ys, yz, ks, strides=st, out=outqt
    )
for f in cases.values():
    for _ in range(50):
        f()
res = {k: [] for k in cases}
for r in range(15):
    for k, f in cases.items():
        res[k].append(min(timeit.repeat(f, number=2000, repeat=3)) / 2000 * 1e6)
for k, v in res.items():
    print(f"{k:30s} {min(v):.3f} us")
