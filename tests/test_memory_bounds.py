"""Memory of one call on the exact float32 path (kernels/running.py) stays proportional to its
input and output: the running sums hold a few rows, never an int64 copy of a slab (two of them
took +512 MiB on a 128 MiB NXC input), a long 1-D line is summed in chunks instead of copied
whole (with its sums: 16 bytes per value), and a huge kernel with a few outputs does not get a
line as long as the kernel (kernel 10**10: MemoryError where the float64 path answered).

Peak memory is measured in a process of its own (forked, one per case) from VmHWM, the resident
high-water mark: over the first call (from before its input is made), and over a second call
alone into the same output (the high-water mark reset through /proc/self/clear_refs). The bounds
are far from both the old and the new values.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from reference import reference_pool

import avgpool
from avgpool._core import engine, tables
from avgpool._core.spec import Layout
from avgpool._ops import onnx as onnx_dialect
from avgpool.kernels import running

MIB = 1 << 20

# One interpreter per test worker imports avgpool and loads its kernels, then forks a child for
# each case: the case is measured in a process of its own, without each case paying Python's and
# numba's start (about 1 s of each case's 1.5-2.6 s on the 2-core machine). The child's VmHWM
# starts at its RSS at the fork; it is read from after the child's own warm call.
_SERVER = textwrap.dedent("""
    import json, os, sys, traceback
    import numpy as np
    import avgpool
    from avgpool._core import engine
    from avgpool._ops import onnx as onnx_dialect
    from avgpool.kernels import running
    from avgpool._core.spec import Layout

    def status(key):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))

    def warm(nd, layout):  # another exact call first: the kernels loaded, the helper threads up
        small = (2, 3) + (9,) * nd if layout == "NCX" else (2,) + (9,) * nd + (3,)
        avgpool.AveragePool([5] * nd, pads=[2] * 2 * nd, layout=layout)(np.ones(small, np.float32))

    def measure(shape, kernel, pads, layout, values):
        shape = tuple(shape)
        attrs = dict(kernel_shape=kernel, pads=pads, layout=layout, count_include_pad=True)
        spec = onnx_dialect.make_spec(22, shape if layout == "NCX" else (shape[0], shape[-1], *shape[1:-1]), kernel,
                                      pads=pads, count_include_pad=True)
        prepared = engine.prepare(spec, shape, np.dtype(np.float32), Layout[layout])
        tiled = getattr(prepared, "tiling", None)  # a very long axis: pooled tile by tile (avgpool._core.tiles)
        exact = tiled.exact if tiled is not None else prepared.kernel.__name__ == "pool_slabs_exact"
        warm(len(shape) - 2, layout)
        before = status("VmHWM")
        if values == "normal":
            x = np.random.default_rng(5).standard_normal(shape, dtype=np.float32)
        else:  # small integers: exact whatever the kernel
            x = (np.arange(np.prod(shape), dtype=np.float32) % 7).reshape(shape)
        pool = avgpool.AveragePool(**attrs)
        y = pool(x)
        first_call = status("VmHWM") - before
        try:  # the second call alone: 5 resets the high-water mark to the current RSS (Linux >= 4.0)
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            resident = status("VmRSS")
            pool(x, y)
            kernel_call = status("VmHWM") - resident
        except OSError:
            kernel_call = None
        # the first output against the float64 path on a corner of the input (the same first window)
        corner = x[tuple(slice(0, 16) for _ in shape)].astype(np.float64)
        sample = np.float32(avgpool.average_pool(corner, **attrs).ravel()[0])
        return dict(first_call=first_call, kernel_call=kernel_call, x=x.nbytes, y=y.nbytes, exact=exact,
                    first=[float(y.ravel()[0]), float(sample)])

    for layout in ("NCX", "NXC"):
        for nd in (1, 2, 3):
            warm(nd, layout)
    print("ready", flush=True)
    for line in sys.stdin:  # one case a line; one answer a line: the child's exit code and report
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            try:
                os.write(write_end, json.dumps(measure(*json.loads(line))).encode())
                os._exit(0)
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
                os._exit(1)
        os.close(write_end)
        with os.fdopen(read_end) as answer:
            report = answer.read()
        _, status_code = os.waitpid(pid, 0)
        print(json.dumps(dict(exit=os.waitstatus_to_exitcode(status_code), report=report)), flush=True)
""")


class _PeakServer:
    """The interpreter above, talked to one JSON line per case."""

    def __init__(self, log):
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
        )
        assert self._line(600) == "ready", self._stderr()

    def _line(self, seconds: float) -> str:
        if not select.select([self.process.stdout], [], [], seconds)[0]:
            self.process.kill()
            raise AssertionError(f"no answer within {seconds} s\n{self._stderr()}")
        return self.process.stdout.readline().strip()

    def _stderr(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def measure(self, case: list) -> dict:
        self.process.stdin.write(json.dumps(case) + "\n")
        self.process.stdin.flush()
        answer = json.loads(self._line(600) or '{"exit": "the server ended"}')
        assert answer["exit"] == 0, f"{answer}\n{self._stderr()}"
        return json.loads(answer["report"])

    def close(self):
        self.process.stdin.close()
        self.process.wait(60)
        self.process.stdout.close()


@pytest.fixture(scope="module")
def peak_server(tmp_path_factory):
    with open(tmp_path_factory.mktemp("peak") / "stderr.txt", "w+") as log:
        server = _PeakServer(log)
        yield server
        server.close()


@pytest.fixture
def peak(peak_server):
    def measure(shape, kernel, pads, layout, values="normal"):
        report = peak_server.measure([shape, kernel, pads, layout, values])
        assert report["exact"], "the case must take the exact int64 path"
        got, sample = report["first"]
        assert abs(got - sample) <= 1e-6 * max(1.0, abs(sample))
        return report

    return measure


def _check_kernel_call(report):
    """A call into a kept output holds at most a few rows beside its input and output."""
    if report["kernel_call"] is None:
        pytest.skip("the high-water mark cannot be reset here (/proc/self/clear_refs)")
    in_out = report["x"] + report["y"]
    assert report["kernel_call"] < 0.1 * in_out + 16 * MIB, (
        f"a call grew by {report['kernel_call'] / MIB:.1f} MiB for {in_out / MIB:.0f} MiB of input and output"
    )


@pytest.mark.parametrize(
    "shape, kernel, layout",
    [
        ((1, 512, 1024, 64), [5, 5], "NXC"),  # one 128 MiB slab: +512 MiB of int64 copies before
        ((1, 1, 128, 512, 512), [5, 5, 5], "NCX"),  # 3-D NCX, one 128 MiB slab: the same
        ((1, 32, 256, 64, 64), [3, 5, 5], "NXC"),  # 3-D NXC, the same
    ],
)
def test_peak_memory_of_a_large_exact_call_is_its_input_and_output(peak, shape, kernel, layout):
    pads = [k // 2 for k in kernel] * 2
    report = peak(shape, kernel, pads, layout)
    in_out = report["x"] + report["y"]
    # before: 768-776 MiB for 256 of input and output; since: the input, the output and 0-8 MiB
    assert report["first_call"] < 1.5 * in_out + 64 * MIB, (
        f"peak {report['first_call'] / MIB:.0f} MiB for {in_out / MIB:.0f} MiB of input and output"
    )
    _check_kernel_call(report)  # before: +512 MiB; since: 0-8 MiB (one row of the first axis)


def test_a_long_1d_line_is_summed_in_chunks(peak):
    # one line of 4M values: its integer copy and sums took 64 MiB (16 bytes per value); since,
    # three chunks of 4096 int64s, or tiles of 64K outputs
    report = peak((1, 1, 1 << 22), [9], [4, 4], "NCX")
    _check_kernel_call(report)


def test_a_very_long_axis_makes_its_window_tables_per_tile(peak):
    # 1 x 1 x 32M: the whole axis's window tables (48 bytes per output, with the plans and their
    # temporaries about 200) took 3.4 GiB beside 256 MiB of input and output; since, the tables
    # of one tile of 64K outputs at a time (tuning.Tuning.long_axis_outputs, avgpool._core.tiles.TiledPool)
    report = peak((1, 1, 1 << 25), [9], [4, 4], "NCX")
    in_out = report["x"] + report["y"]
    assert report["first_call"] < 1.5 * in_out + 64 * MIB, (
        f"peak {report['first_call'] / MIB:.0f} MiB for {in_out / MIB:.0f} MiB of input and output"
    )
    _check_kernel_call(report)


@pytest.mark.parametrize(
    "shape, kernel, layout",
    [
        ((1, 1, 1, 1 << 22), [1, 9], "NCX"),  # a line as a 2-D plane of one row: 64 MiB of line and sums
        ((1, 1, 1 << 19, 8), [1, 5], "NXC"),  # its first axis's running sum was the whole slab: 96 MiB
    ],
)
def test_planes_of_one_row_hold_no_copy_of_it(peak, shape, kernel, layout):
    report = peak(shape, kernel, [0, kernel[1] // 2] * 2, layout)
    _check_kernel_call(report)


@pytest.mark.parametrize("layout", ["NCX", "NXC"])
@pytest.mark.parametrize("width", [300, 70001])  # whole and streamed lines
def test_planes_of_one_row_give_the_lines_results(layout, width):
    """A plane of one row pools as its line: the same bits (the first axis's scale is 1)."""
    x = np.random.default_rng(width).standard_normal((2, 3, 1, width)).astype(np.float32)
    x[1, 2, 0, 7] = np.nan  # that slab goes to the float64 kernels
    if layout == "NXC":
        x = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    plane = avgpool.average_pool(x, [1, 9], pads=[0, 4, 0, 3], layout=layout)
    line = avgpool.average_pool(x[:, :, 0] if layout == "NCX" else x[:, 0], [9], pads=[4, 3], layout=layout)
    assert np.array_equal(plane[:, :, 0] if layout == "NCX" else plane[:, 0], line, equal_nan=True)


def test_a_huge_kernel_with_few_outputs_allocates_what_the_input_needs(peak):
    # kernel 10**8 along a contiguous axis of 10 values, 2 outputs: an 800 MB line before
    shape, kernel, pads = _huge_kernel_case(1, 10**8, 2)
    report = peak(shape, kernel, pads, "NCX", values="integers")
    assert report["first_call"] < 64 * MIB, f"peak {report['first_call'] / MIB:.0f} MiB for a 240-byte input"
    assert report["first"][0] == report["first"][1]


def _huge_kernel_case(ndim: int, k: int, outputs: int):
    """A length-10 last axis, a kernel of ``k`` along it and pads that leave ``outputs`` windows."""
    before = (k - 10 + outputs - 1) // 2
    after = k - 10 + outputs - 1 - before
    kernel = [3] * (ndim - 1) + [k]
    pads = [1] * (ndim - 1) + [before] + [1] * (ndim - 1) + [after]
    shape = (2, 3) + (4,) * (ndim - 1) + (10,)
    return shape, kernel, pads


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("include_pad", [False, True])
def test_a_huge_kernel_with_few_outputs_answers_on_the_exact_path(ndim, include_pad):
    """Kernel 10**10 (MemoryError before): the exact path sums the windows clipped to the input,
    and gives the float64 path's result (the same averages: small integers, exact both ways)."""
    shape, kernel, pads = _huge_kernel_case(ndim, 10**10, 3)
    # small integers: within the headroom of 9 * 10**10 taps (25 bits), so summed exactly
    x = np.random.default_rng(ndim).integers(-3, 4, shape).astype(np.float32)
    got = avgpool.average_pool(x, kernel, pads=pads, count_include_pad=include_pad)
    spec = onnx_dialect.make_spec(22, shape, kernel, pads=pads, count_include_pad=include_pad)
    assert engine.prepare(spec, shape, np.dtype(np.float32), Layout.NCX).kernel.__name__ == "pool_slabs_exact"
    plan = tables.running_plan(spec, shape[2:], 1, Layout.NCX, tables.kernel_tables(spec, shape[2:], 1))
    assert plan.passes[0, 6] == 1 and plan.passes[0, 5] == 2 * 10 + 1  # clipped: a line of the input
    assert running.fixed_point_exponent(x.view(np.uint32).ravel(), 0, x.size, plan.headroom) != running.NOT_EXACT
    # the float64 path scales each axis's sums, which leaves a residue of 2**-52 of the values
    # where the exact sum is 0
    wide = avgpool.average_pool(x.astype(np.float64), kernel, pads=pads, count_include_pad=include_pad)
    np.testing.assert_allclose(got, wide, rtol=1e-6, atol=1e-12 * np.abs(wide).max())
    # every window covers the whole last axis (10 taps of its 10**10): the reference with a kernel
    # of 10 there, whose divisor counts 10 taps of the padded line instead of 10**10
    exact = reference_pool(
        x,
        kernel[:-1] + [10],
        [1] * ndim,
        [1] * ndim,
        list(zip(pads[: ndim - 1], pads[ndim:-1])) + [(0, 0)],
        divisor="padded" if include_pad else "valid",
    )
    exact = np.repeat(exact * (10 / kernel[-1] if include_pad else 1.0), 3, axis=-1)
    np.testing.assert_array_max_ulp(got, exact.astype(np.float32), maxulp=1)
    # NXC never had the long line (its windows are the clipped tables): the same numbers
    got_nxc = avgpool.average_pool(
        np.moveaxis(x, 1, -1), kernel, pads=pads, count_include_pad=include_pad, layout="NXC"
    )
    assert np.array_equal(np.moveaxis(got_nxc, -1, 1), got)


@pytest.mark.parametrize(
    "shape, layout",
    [
        ((1, 2, 1 << 17, 64), "NXC"),  # two rows of 8M values: the first axis's row was the whole slab
        ((1, 3, 1 << 16, 128), "NXC"),  # three rows: two thirds of it
        ((1, 2, 256, 256, 128), "NXC"),  # 3-D, the same
        ((1, 1, 2, 2048, 4096), "NCX"),  # 3-D NCX, a short first axis and a long second
        ((1, 2, 1 << 23), "NXC"),  # 1-D NXC: the running sum of the channels is the whole slab
        ((1, 1, 2, 1 << 22), "NXC"),  # a 2-D NXC slab of one row: its channels' running sum was half of it
    ],
)
def test_a_slab_of_few_rows_holds_a_bounded_running_sum(peak, shape, layout):
    # every axis pooled with kernel 5 (the exact path), "same" padding: the output as big as the
    # input. Before, the running sums of one row of the later axes were 2 / (first axis length)
    # of the slab's bytes (+64 MiB here for 128 of input and output, on every call), and NXC's
    # plan held a float64 factor of 1 per channel (+64 MiB on a first call of 1-D 1x2x8M);
    # since, boxes of at most tuning.Tuning.exact_held_bytes
    nd = len(shape) - 2
    report = peak(shape, [5] * nd, [2] * 2 * nd, layout)
    in_out = report["x"] + report["y"]
    assert report["first_call"] < 1.2 * in_out + 16 * MIB, (
        f"peak {report['first_call'] / MIB:.0f} MiB for {in_out / MIB:.0f} MiB of input and output"
    )
    _check_kernel_call(report)


_QLINEAR_LONG = textwrap.dedent("""
    import gc, json
    import numpy as np
    import avgpool

    def status(key):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))

    avgpool.qlinear_average_pool(np.zeros((1, 1, 64), np.uint8), 0.1, 0, 0.2, 0, [2])  # kernels loaded
    x = np.random.default_rng(0).integers(0, 256, (1, 1, 1 << 24), dtype=np.uint8)
    gc.collect()
    before = status("VmRSS")
    y = avgpool.qlinear_average_pool(x, 0.1, 0, 0.2, 0, [2])
    peak = status("VmHWM") - before
    del y
    for i in range(5):  # five more shapes: what the caches keep after their calls
        avgpool.qlinear_average_pool(np.zeros((1, 1, (1 << 22) + i), np.uint8), 0.1, 0, 0.2, 0, [2])
    gc.collect()
    print(json.dumps(dict(peak=peak, kept=status("VmRSS") - before)))
""")


def test_a_long_qlinear_axis_takes_memory_in_proportion_to_its_data():
    # 1 x 1 x 16M uint8 (16 MiB in, 16 out): the whole axis's window tables took +1.3 GiB, and
    # five 4M calls left 800 MiB held by make_plan's lru_cache; since, tiles of 64K outputs
    # (quantized_pools._tiled) and plans cached by bytes too
    run = subprocess.run([sys.executable, "-c", _QLINEAR_LONG], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    in_out = 2 * (1 << 24)
    assert report["peak"] < 1.5 * in_out + 48 * MIB, f"the call grew by {report['peak'] / MIB:.0f} MiB"
    assert report["kept"] < in_out + 64 * MIB, f"{report['kept'] / MIB:.0f} MiB kept after the calls"
