#!/usr/bin/env python3
"""avgpool.block_mean against the block means scientists use today, interleaved in one process:
scikit-image's ``block_reduce(image, k, np.mean)`` on a uint16 8192x8192 image, and
``avgpool.xarray.block_mean`` against xarray's ``coarsen(...).mean()`` (both skipping NaN, numpy-
and dask-backed) on a float32 (8, 4096, 4096) stack with 5% NaN; and what ``skipna=True`` costs
over ``skipna=False``, in block_mean and in ``average_pool`` (no peer: the cost is the row).

    python benchmarks/bench_block_mean.py              # every row, 5 rounds
    python benchmarks/bench_block_mean.py --rounds 3 --only uint16

Each round times one call of every runner of a row, in turn (:func:`harness.alternate`); a ratio
is the median over rounds of the two times in the same round. Peak memory above the input is
measured once per row with tracemalloc (numpy's allocations are traced). A run of every row
writes ``results/bench_block_mean.md``, which docs/performance.md embeds.
"""

from __future__ import annotations

import argparse
import sys
import tracemalloc
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import harness  # noqa: E402

import avgpool  # noqa: E402

#: What a run of every row writes, embedded in docs/performance.md (tests/test_docs.py).
RESULTS = HERE / "results" / "bench_block_mean.md"


def peak_above(call) -> int:
    """Bytes allocated at the peak of one call, its result included."""
    tracemalloc.start()
    try:
        result = call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del result
    return peak


def rows(only: str | None):
    rng = np.random.default_rng(0)
    image = rng.integers(0, 65536, (8192, 8192), dtype=np.uint16)
    stack = rng.standard_normal((8, 4096, 4096), dtype=np.float32)
    stack[rng.random(stack.shape, dtype=np.float32) < 0.05] = np.nan
    found = []
    try:
        from skimage.measure import block_reduce
    except ImportError:
        block_reduce = None
    try:
        import dask.array as dask_array
        import xarray as xr
    except ImportError:
        xr = None
    for k in (2, 4, 8):
        runners = [harness.Runner("avgpool", lambda k=k: avgpool.block_mean(image, k), _none)]
        if block_reduce is not None:
            runners.append(harness.Runner("skimage", lambda k=k: block_reduce(image, k, np.mean), _none))
        found.append((f"uint16 8192x8192 k{k}", runners, "skimage", image.nbytes))
    for k in (2, 4, 8):
        ours = lambda k=k: avgpool.block_mean(stack, (1, k, k), skipna=True)  # noqa: E731
        runners = [harness.Runner("avgpool", ours, lambda: None)]
        runners.append(harness.Runner("skipna=False", lambda k=k: avgpool.block_mean(stack, (1, k, k)), lambda: None))
        found.append((f"block_mean float32 8x4096x4096 5% NaN k{k}", runners, None, stack.nbytes))
    if xr is not None:
        from avgpool.xarray import block_mean as xarray_block_mean

        array = xr.DataArray(stack, dims=("t", "y", "x"))
        lazy_array = xr.DataArray(dask_array.from_array(stack, chunks=(1, 1024, 1024)), dims=("t", "y", "x"))
        for backed, data in (("numpy", array), ("dask chunks 1024", lazy_array)):
            done = (lambda r: r.compute()) if backed != "numpy" else (lambda r: r)
            for k in (2, 4, 8):
                windows = {"y": k, "x": k}
                runners = [
                    harness.Runner("avgpool", lambda d=data, w=windows: done(xarray_block_mean(d, w)), _none),
                    harness.Runner("coarsen", lambda d=data, k=k: done(d.coarsen(y=k, x=k).mean()), _none),
                ]
                if backed == "numpy":
                    runners.insert(
                        1,
                        harness.Runner(
                            "skipna=False",
                            lambda d=data, w=windows: xarray_block_mean(d, w, skipna=False),
                            _none,
                        ),
                    )
                name = f"xarray {backed} float32 8x4096x4096 5% NaN k{k}"
                found.append((name, runners, "coarsen", stack.nbytes))
    batch = stack[:2, None]  # (2, 1, 4096, 4096): average_pool's N x C x H x W
    for kernel, attrs in (([2, 2], dict(strides=[2, 2])), ([3, 3], dict(strides=[1, 1], pads=[1, 1, 1, 1]))):
        runners = [
            harness.Runner(
                "avgpool", lambda k=kernel, a=attrs: avgpool.average_pool(batch, k, **a, skipna=True), _none
            ),
            harness.Runner("skipna=False", lambda k=kernel, a=attrs: avgpool.average_pool(batch, k, **a), _none),
        ]
        name = f"average_pool float32 2x1x4096x4096 5% NaN k{kernel[0]} s{attrs['strides'][0]}"
        found.append((name, runners, None, batch.nbytes))
    return harness.select(found, only, name=lambda row: row[0])


def _none() -> None:
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", metavar="SUBSTRING")
    args = parser.parse_args(argv)
    harness.warn_if_loaded()
    print(harness.describe(harness.environment(None, ("numpy", "dask", "xarray", "skimage"))))
    columns = ["row", "avgpool", "peer", "ratio", "skipna=True / False", "avgpool peak above input"]
    table = []
    for name, runners, peer, in_bytes in rows(args.only):
        samples = harness.alternate(runners, args.rounds)
        times = harness.medians(samples)
        ratio = harness.paired_ratio(samples["avgpool"], samples[peer]) if peer in samples else None
        skip = harness.paired_ratio(samples["avgpool"], samples["skipna=False"]) if "skipna=False" in samples else None
        peak = peak_above(runners[0].call) if "dask" not in name else None
        table.append(
            [
                name,
                harness.fmt_time(times["avgpool"]),
                f"{peer} {harness.fmt_time(times.get(peer))}" if peer else "",
                harness.fmt_ratio(ratio),
                harness.fmt_ratio(skip) if skip else "",
                f"{peak / 2**20:.0f} MiB" if peak is not None else "",
            ]
        )
        print(" | ".join(table[-1]), flush=True)
    text = "\n".join(harness.markdown_table(columns, table)) + "\n"
    print()
    print(text, end="")
    if not args.only:  # a run of every row: the table the documentation embeds
        settings = f"{args.rounds} rounds, {harness.describe(harness.environment(None, ('skimage', 'xarray', 'dask')))}"
        harness.write_results(RESULTS, text, "bench_block_mean.py", settings)
        print(f"wrote {RESULTS.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
