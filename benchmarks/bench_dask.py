"""avgpool.dask against the Dask-ecosystem peers, on the same chunked input, in one run.

Run on demand (not a test)::

    .venv/bin/python benchmarks/bench_dask.py            # 1x8x4096x4096 (chunks 1024) and 1x8x1024x1024 (chunks 256)
    .venv/bin/python benchmarks/bench_dask.py --quick    # 1x2x1024x1024 (chunks 256) and 1x2x256x256 (chunks 64)
    .venv/bin/python benchmarks/bench_dask.py --repeats 9

Cases, float32 NCHW, numpy-backed ``da.from_array`` (no I/O), threaded scheduler (one thread per CPU):

- k = s (2x2 s2, 4x4 s4, 8x8 s8): ``avgpool.dask.average_pool(x, [k, k], strides=[k, k])`` against
  ``xarray.DataArray(x, dims=...).coarsen(y=k, x=k).mean()`` (dask-backed);
- stride 1 (3x3, 7x7, 15x15): ``avgpool.dask.average_pool(x, [k, k], auto_pad="SAME_UPPER",
  count_include_pad=1)`` against ``dask_image.ndfilters.uniform_filter(x, size=(1, 1, k, k),
  mode="constant")`` (zeros outside, divided by k*k: what count_include_pad=1 computes; the
  default mode="reflect" has no ONNX equivalent).

Each timing is the graph's construction and its computation into a preallocated numpy array
(``da.store``), the median of ``--repeats`` runs after one untimed warm-up run (whose result is
checked); the two libraries alternate run by run (``harness.alternate``), and the ratio is the
median of the run-by-run ratios (``harness.paired_ratio``: robust to the machine's speed
drifting). Both results are compared with a float64 reference computed from exact integer sums
(``rng.random`` float32 values are multiples of 2**-24, so the window sums are exact in int64):
the error is ``|result - reference|`` in units of the float32 ulp at the reference (a correctly
rounded result is within 0.5). The table's last columns count the values where the two results
differ and their largest distance in ulp steps (between the two float32 values).
"""

from __future__ import annotations

import argparse
import sys

import dask
import dask.array as da
import harness
import numpy as np
from harness import Runner, markdown_table

import avgpool
import avgpool.dask

SCALE = 2.0**24  # rng.random(dtype=float32) draws multiples of 2**-24 in [0, 1)


def make_input(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).random(shape, dtype=np.float32)
    q = x.astype(np.float64) * SCALE
    assert np.array_equal(q, np.floor(q)), "the reference needs values that are multiples of 2**-24"
    return x


def reference_blocks(x: np.ndarray, k: int) -> np.ndarray:
    """Float64 means of the k x k blocks at stride k (no padding): exact sums, one rounding."""
    n, c, h, w = x.shape
    out = np.empty((n, c, h // k, w // k), np.float64)
    for i in range(n):
        for j in range(c):
            q = (x[i, j, : h // k * k, : w // k * k].astype(np.float64) * SCALE).astype(np.int64)
            s = q.reshape(h // k, k, w // k, k).sum(axis=(1, 3))
            out[i, j] = s / (k * k * SCALE)
    return out


def reference_same(x: np.ndarray, k: int) -> np.ndarray:
    """Float64 means of k x k windows at stride 1, zero padding (k odd: k // 2 each side),
    divided by k * k: exact integer sums (summed-area table in int64), one rounding."""
    assert k % 2 == 1
    n, c, h, w = x.shape
    r = k // 2
    out = np.empty(x.shape, np.float64)
    for i in range(n):
        for j in range(c):
            q = (x[i, j].astype(np.float64) * SCALE).astype(np.int64)
            t = np.zeros((h + 2 * r + 1, w + 2 * r + 1), np.int64)
            t[r + 1 : r + 1 + h, r + 1 : r + 1 + w] = q
            t = t.cumsum(axis=0).cumsum(axis=1)
            s = t[k:, k:] - t[:-k, k:] - t[k:, :-k] + t[:-k, :-k]
            out[i, j] = s / (k * k * SCALE)
    return out


def ulp_error(y: np.ndarray, ref: np.ndarray) -> float:
    """The largest |y - ref| in float32 ulps at ref."""
    ulp = np.spacing(np.abs(ref.astype(np.float32))).astype(np.float64)
    return float((np.abs(y.astype(np.float64) - ref) / ulp).max())


def ulp_steps(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """How many values differ, and the largest distance in float32 steps (finite, same sign)."""
    ia, ib = a.view(np.int32).astype(np.int64), b.view(np.int32).astype(np.int64)
    return int(np.count_nonzero(ia != ib)), int(np.abs(ia - ib).max(initial=0))


def run_case(name: str, ours, peer, ref: np.ndarray, repeats: int) -> dict:
    """Time ``ours`` and ``peer`` (each builds a graph), every timed run a graph built and stored."""
    a = np.empty(ref.shape, np.float32)
    b = np.empty(ref.shape, np.float32)
    runners = [
        Runner("ours", lambda: da.store(ours(), a, lock=False), lambda: a),
        Runner("peer", lambda: da.store(peer(), b, lock=False), lambda: b),
    ]
    samples = harness.alternate(runners, repeats)  # ours, peer, ours, peer ... after a warm-up of each
    times = harness.medians(samples)
    differ, steps = ulp_steps(a, b)
    return {
        "case": name,
        "ours": times["ours"],
        "peer": times["peer"],
        "ratio": harness.paired_ratio(samples["ours"], samples["peer"]),
        "ours_err": ulp_error(a, ref),
        "peer_err": ulp_error(b, ref),
        "ours_not_rounded": int(np.count_nonzero(a != ref.astype(np.float32))),
        "peer_not_rounded": int(np.count_nonzero(b != ref.astype(np.float32))),
        "differ": differ,
        "total": a.size,
        "steps": steps,
    }


def explain(x: np.ndarray) -> list[str]:
    """Check, on one plane, how the peers compute (the mechanism behind their errors)."""
    import xarray as xr
    from scipy import ndimage

    lines = []
    plane = x[:1, :1, :256, :256]
    d = da.from_array(plane, chunks=(1, 1, 64, 64))
    ok = []
    for k in (2, 4, 8):
        c = xr.DataArray(d, dims=("n", "c", "y", "x")).coarsen(y=k, x=k).mean().data.compute()
        r = plane.reshape(1, 1, 256 // k, k, 256 // k, k)
        f32 = r.sum(axis=(3, 5), dtype=np.float32) / np.float32(k * k)
        ok.append(np.array_equal(c, f32))
    lines.append(
        f"coarsen(...).mean() == numpy's float32 sum of each block / k*k (k = 2, 4, 8): {ok}; "
        f"k*k is a power of two, so the division is exact and the error is the float32 "
        f"accumulation's (k*k - 1 roundings of partial sums)"
    )
    ok, wrong = [], []
    for k in (3, 7, 15):
        u = ndimage.uniform_filter(plane, size=(1, 1, k, k), mode="constant")
        first = ndimage.uniform_filter1d(plane, k, axis=2, mode="constant")
        ok.append(np.array_equal(u, ndimage.uniform_filter1d(first, k, axis=3, mode="constant")))
        q = np.pad((plane.astype(np.float64) * SCALE).astype(np.int64), ((0, 0), (0, 0), (k // 2, k // 2), (0, 0)))
        t = np.concatenate([np.zeros_like(q[:, :, :1]), q.cumsum(axis=2)], axis=2)
        exact = ((t[:, :, k:] - t[:, :, :-k]) / (k * SCALE)).astype(np.float32)  # correctly rounded 1-D means
        wrong.append(int(np.count_nonzero(first != exact)))
    lines.append(
        f"uniform_filter == a 1-D pass along H stored as float32, then a 1-D pass along W (k = 3, 7, 15): {ok}"
    )
    lines.append(
        f"  its 1-D pass (a float64 running sum) is the correctly rounded 1-D mean but for "
        f"{wrong} of {plane.size} values: the error comes from rounding the intermediate to float32 "
        f"(<= 0.5 ulp of the intermediate, averaged by the second pass) plus the final rounding"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (1x2x1024x1024 and 1x2x256x256)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per case and library (default 5)")
    args = parser.parse_args(argv)

    import xarray as xr
    from dask_image.ndfilters import uniform_filter

    if args.quick:
        sizes = [((1, 2, 1024, 1024), 256), ((1, 2, 256, 256), 64)]
    else:
        sizes = [((1, 8, 4096, 4096), 1024), ((1, 8, 1024, 1024), 256)]
    env = harness.environment(None, ("dask", "xarray", "dask_image", "scipy"))
    print(
        f"# {harness.describe(env)}; avgpool {harness.source_state()}; threaded scheduler; "
        f"median of {args.repeats}; load average {harness.load_average():.2f}"
    )
    harness.warn_if_loaded()
    rows = []
    with dask.config.set(scheduler="threads"):
        for shape, chunk in sizes:
            x = make_input(shape)
            dx = da.from_array(x, chunks=(1, 1, chunk, chunk))
            label = "x".join(map(str, shape)) + f"/{chunk}"
            for k in (2, 4, 8):
                ref = reference_blocks(x, k)
                rows.append(
                    run_case(
                        f"{label} {k}x{k} s{k} vs coarsen",
                        lambda k=k, dx=dx: avgpool.dask.average_pool(dx, [k, k], strides=[k, k]),
                        lambda k=k, dx=dx: xr.DataArray(dx, dims=("n", "c", "y", "x")).coarsen(y=k, x=k).mean().data,
                        ref,
                        args.repeats,
                    )
                )
                print(_row(rows[-1]), flush=True)
            for k in (3, 7, 15):
                ref = reference_same(x, k)
                rows.append(
                    run_case(
                        f"{label} {k}x{k} s1 SAME vs uniform_filter",
                        lambda k=k, dx=dx: avgpool.dask.average_pool(
                            dx, [k, k], auto_pad="SAME_UPPER", count_include_pad=1
                        ),
                        lambda k=k, dx=dx: uniform_filter(dx, size=(1, 1, k, k), mode="constant"),
                        ref,
                        args.repeats,
                    )
                )
                print(_row(rows[-1]), flush=True)
            del x, dx
        notes = explain(make_input((1, 1, 256, 256), seed=1))

    print()
    print("\n".join(markdown_table(COLUMNS, map(_cells, rows))))
    print()
    for label in dict.fromkeys(r["case"].split()[0] for r in rows):
        ratios = [r["ratio"] for r in rows if r["case"].split()[0] == label]
        print(f"{label}: geometric mean avgpool/peer {harness.geomean(ratios):.2f}")
    print(f"load average at the end: {harness.load_average():.2f}")
    print("\n".join(["", "How the peers compute (checked on one 256x256 plane):"] + ["- " + s for s in notes]))
    return 0


COLUMNS = (
    "case",
    "avgpool s",
    "peer s",
    "avgpool/peer (median of pairs)",
    "avgpool max err (ulp)",
    "peer max err (ulp)",
    "avgpool not correctly rounded",
    "peer not correctly rounded",
    "values differing",
    "max ulp steps apart",
)


def _cells(r: dict) -> list[str]:
    return [
        r["case"],
        f"{r['ours']:.3f}",
        f"{r['peer']:.3f}",
        f"{r['ratio']:.2f}",
        f"{r['ours_err']:.3f}",
        f"{r['peer_err']:.3f}",
        str(r["ours_not_rounded"]),
        str(r["peer_not_rounded"]),
        f"{r['differ']} of {r['total']} ({100 * r['differ'] / r['total']:.1f}%)",
        str(r["steps"]),
    ]


def _row(r: dict) -> str:
    return (
        f"{r['case']:<48} avgpool {r['ours']:.3f} s  peer {r['peer']:.3f} s  ratio {r['ratio']:.2f}  "
        f"err {r['ours_err']:.3f} / {r['peer_err']:.3f} ulp  differ {r['differ']}  steps {r['steps']}"
    )


if __name__ == "__main__":
    sys.exit(main())
