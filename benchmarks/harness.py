"""What the benchmarks share: timing a callable, pairing runners measured in one run, formatting
the tables and summary lines, and the run header (settings, versions, the commit, the load).

``bench.py``, ``bench_qlinear.py``, ``bench_dask.py`` and ``single_calls.py`` time with it;
``out_of_core.py`` takes :func:`source_state` from it. Each script keeps its own workloads,
runners, columns and targets.

Timing. :func:`measure` calls every runner once (compilation, caches, first touch), calibrates
it to a batch of at least ``budget_s`` seconds, then for R rounds times one batch of each runner
in turn, the order rotated every round, with a :data:`PAUSE_S` pause before every batch; it
returns per-round samples (seconds per call), and :func:`medians` the time of each runner.
:func:`alternate` times one call of each runner per round, in a fixed order (long calls: a dask
graph); :func:`call_times_ns` times single calls one by one (percentiles).

Pairing. The machine's speed drifts for seconds at a time, so a ratio of two runners is the
median over the rounds of their two times in the same round (:func:`paired_ratio`), and a row's
ratio is a runner's time over the fastest peer's (:class:`Paired`). :func:`spread` gives the
geometric mean and the worst row of a ratio over rows.
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

import avgpool

#: Seconds of pause before every timed batch: onnxruntime's workers spin ~40 ms after a call, torch's ~10 ms
PAUSE_S = 0.05
#: How many slices a round's batch of each runner in a ``together`` group is cut into
SLICES = 8
#: :func:`warn_if_loaded` warns above this one-minute load average
LOAD_LIMIT = 0.5


# --------------------------------------------------------------------------------------------- #
# Timing
# --------------------------------------------------------------------------------------------- #


@dataclass
class Runner:
    """One way of making the row's call, ready to call on preallocated buffers."""

    name: str
    call: Callable[[], object]  # one call on preallocated buffers
    result: Callable[[], Any]  # the last output (None where there is nothing to compare)
    note: str = ""
    # buffers a runtime reads or writes through a raw pointer (OrtValue, ov.Tensor(shared_memory=True)
    # do not own them): they must outlive the runner, or the runtime reads freed memory
    keep: tuple = ()


def time_batch(call: Callable[[], object], n: int) -> float:
    """Seconds per call of ``n`` calls of ``call`` in a row."""
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - t0) / n


def calls_per_batch(call: Callable[[], object], budget_s: float) -> int:
    """Warm up ``call`` and return how many calls make a batch of about ``budget_s`` seconds."""
    call()  # first call: JIT, plan caches, memory first touch
    n = 1
    while True:
        elapsed = time_batch(call, n) * n
        if elapsed >= budget_s / 4 or n >= 1 << 20:
            break
        n *= 4
    return max(1, math.ceil(budget_s / (elapsed / n)))


def measure(
    runners: list[Runner],
    rounds: int,
    budget_s: float,
    together: Sequence[str] = (),
    *,
    pause_s: float | None = None,
    calibrate: Callable[[Callable[[], object], float], int] | None = None,
) -> dict[str, list[float]]:
    """Per-call seconds for each runner, one sample per round; runners interleaved, order rotated.

    Each runner is warmed up and sized by ``calibrate`` (default :func:`calls_per_batch`), after
    a pause of ``pause_s`` (default :data:`PAUSE_S`). The runners named in ``together`` (one
    library's own ways of making one call, whose ratios to each other are a cost of a fraction of
    a microsecond) share one place in the rotation: their batches are cut into :data:`SLICES`
    slices taken in turn, with no pause between (they have no worker threads left spinning), so
    that the machine's drift reaches all of them alike. Timed apart, each after its pause and
    another peer's batch, avgpool's function came out 1.35x its prepared pool on a 29 us node
    (shufflenet node 1): 10 us more than its Python can cost."""
    pause = PAUSE_S if pause_s is None else pause_s
    calibrate = calibrate or calls_per_batch
    batches = {}
    for r in runners:
        time.sleep(pause)
        batches[r.name] = calibrate(r.call, budget_s)
    group = [r for r in runners if r.name in together]
    slots: list[list[Runner]] = [[r] for r in runners if r.name not in together]
    if group:
        slots.insert(0, group)
    samples: dict[str, list[float]] = {r.name: [] for r in runners}
    for i in range(rounds):
        for slot in slots[i % len(slots) :] + slots[: i % len(slots)]:
            time.sleep(pause)
            if len(slot) == 1:
                samples[slot[0].name].append(time_batch(slot[0].call, batches[slot[0].name]))
                continue
            spent = dict.fromkeys((r.name for r in slot), 0.0)
            calls = {r.name: max(1, batches[r.name] // SLICES) for r in slot}
            for j in range(SLICES):
                for r in slot if j % 2 == 0 else slot[::-1]:
                    spent[r.name] += time_batch(r.call, calls[r.name]) * calls[r.name]
            for name, seconds in spent.items():
                samples[name].append(seconds / (calls[name] * SLICES))
    return samples


def alternate(runners: list[Runner], rounds: int) -> dict[str, list[float]]:
    """Seconds of one call of each runner per round, in the order given, after one untimed call
    of each: for calls long enough (a whole dask graph) that a batch is one call."""
    for r in runners:
        r.call()
    samples: dict[str, list[float]] = {r.name: [] for r in runners}
    for _ in range(rounds):
        for r in runners:
            samples[r.name].append(time_batch(r.call, 1))
    return samples


def call_times_ns(call: Callable[..., object], calls: int, args: tuple = ()) -> np.ndarray:
    """Nanoseconds of each of ``calls`` single calls ``call(*args)``, after one untimed call."""
    call(*args)
    times = np.empty(calls)
    clock = time.perf_counter_ns
    for i in range(calls):
        start = clock()
        call(*args)
        times[i] = clock() - start
    return times


def medians(samples: dict[str, list[float]]) -> dict[str, float]:
    """Each runner's time: the median of its samples."""
    return {name: statistics.median(s) for name, s in samples.items()}


# --------------------------------------------------------------------------------------------- #
# Pairing
# --------------------------------------------------------------------------------------------- #


def paired_ratio(a: list[float], b: list[float]) -> float:
    """The median over rounds of ``a``'s time / ``b``'s in the same round. This machine's speed
    drifts by up to 1.5x for a second or two at a time, whatever runs (a serial 1x1024x7x7 7x7
    pool: 8.5 us for most 20 ms batches, 12.3 for runs of several, alone in the process, on either
    CPU); a round's batches take ~0.4 s, so a ratio within a round compares like with like, where
    the ratio of two medians can pair a fast batch with a slow one."""
    return statistics.median(x / y for x, y in zip(a, b))


def fastest(times: dict[str, float], peers: Iterable[str]) -> str | None:
    """The peer with the smallest time (the first of ``peers`` on a tie), None if none was timed."""
    timed = [p for p in peers if p in times]
    return min(timed, key=times.__getitem__) if timed else None


class Paired:
    """A row's runners measured in one run: a base for a result class with ``samples`` (per-round
    seconds per call by runner) and ``times`` (their medians); ``peers`` names the other
    libraries' runners, in the order that breaks a tie."""

    peers: ClassVar[tuple[str, ...]] = ()
    samples: dict[str, list[float]]
    times: dict[str, float]

    @property
    def fastest(self) -> str | None:
        return fastest(self.times, self.peers)

    def paired(self, name: str, over: str | None) -> float | None:
        """``name``'s time / ``over``'s, paired by round (:func:`paired_ratio`); None unless both ran."""
        if over is None or name not in self.samples or over not in self.samples:
            return None
        return paired_ratio(self.samples[name], self.samples[over])

    def over_fastest(self, name: str) -> float | None:
        """``name``'s time / the fastest peer's (below 1: ``name`` is faster)."""
        return self.paired(name, self.fastest)


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


@dataclass(frozen=True)
class Spread:
    """One ratio over rows: the rows and their values, in row order."""

    rows: list[Any]
    values: list[float]

    @property
    def geomean(self) -> float:
        return geomean(self.values)

    @property
    def worst(self) -> float:
        return max(self.values)

    @property
    def worst_row(self) -> Any:
        """The first row with the largest value."""
        return self.rows[self.values.index(self.worst)]

    def over(self, limit: float) -> list[Any]:
        """The rows whose value exceeds ``limit``."""
        return [r for r, v in zip(self.rows, self.values) if v > limit]

    def text(self, label: Callable[[Any], str]) -> str:
        """``geometric mean G, worst W (row)``, the row named by ``label``."""
        return f"geometric mean {self.geomean:.2f}, worst {self.worst:.2f} ({label(self.worst_row)})"


def spread(rows: Iterable[Any], value: Callable[[Any], float | None]) -> Spread | None:
    """:class:`Spread` of ``value`` over the rows where it is not None (None if there are none)."""
    pairs = [(r, v) for r in rows if (v := value(r)) is not None]
    if not pairs:
        return None
    return Spread([r for r, _ in pairs], [v for _, v in pairs])


# --------------------------------------------------------------------------------------------- #
# Formatting
# --------------------------------------------------------------------------------------------- #


def fmt_time(s: float | None) -> str:
    """Seconds in s, ms or us, three significant digits (``56.9 us``, ``1.10 ms``); ``-`` for None."""
    if s is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            break
    v = s / scale
    return f"{v:.3g} {unit}" if v >= 10 else f"{v:.2f} {unit}"


def fmt_time_fixed(s: float | None) -> str:
    """Seconds in ms with three decimals from 1 ms, else in us with one (``3.024 ms``, ``741.2 us``)."""
    if s is None:
        return "-"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} us"


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}"


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """The lines of a markdown table."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(cells) + " |" for cells in rows]


def console_row(cells: Sequence[str], name_width: int, cell_width: int, sep: str = "") -> str:
    """A row of a console table: the first cell left-aligned, the others right-aligned, ``sep`` between."""
    return f"{cells[0]:<{name_width}}{sep}" + sep.join(f"{c:>{cell_width}}" for c in cells[1:])


def verdict(ok: bool | None, text: str) -> str:
    """A target's summary line: PASS, FAIL, or n/a when no row measured it."""
    return f"{'PASS' if ok else 'FAIL' if ok is not None else 'n/a '}  {text}"


# --------------------------------------------------------------------------------------------- #
# The run header
# --------------------------------------------------------------------------------------------- #


def select(items: Iterable[Any], only: str | None, name: Callable[[Any], str] = lambda w: w.name) -> list[Any]:
    """The items whose name contains ``only`` (case-insensitive); all of them for no ``only``."""
    return [w for w in items if not only or only.lower() in name(w).lower()]


def source_state() -> str:
    """The git commit of the avgpool being measured, and whether its src/ has uncommitted changes."""
    root = Path(avgpool.__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], check=True, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "src"], check=True, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    return f"git {head}{' + uncommitted src/ changes' if dirty else ''}"


def versions(modules: Iterable[str]) -> dict[str, str | None]:
    """Each module's ``__version__`` (else its distribution's), None where it does not import."""
    found: dict[str, str | None] = {}
    for module in modules:
        try:
            imported = __import__(module)
            found[module] = getattr(imported, "__version__", None) or importlib.metadata.version(module)
        except Exception:  # noqa: BLE001 - a missing peer is reported where it is used
            found[module] = None
    return found


def environment(threads: int | None, modules: Iterable[str] = ()) -> dict[str, Any]:
    """Python, platform, CPUs, threads per runtime (if given), numpy, avgpool, then ``modules``' versions."""
    env: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count()}
    if threads is not None:
        env["threads_per_runtime"] = threads
    env |= {"numpy": np.__version__, "avgpool": avgpool.__version__}
    return env | versions(modules)


def describe(env: dict[str, Any]) -> str:
    """``key value, key value, ...``: an :func:`environment` on one line."""
    return ", ".join(f"{k} {v}" for k, v in env.items())


def run_settings(rounds: int, batch_ms: float, quick: bool = False) -> str:
    """A :func:`measure` run's settings as the results files name them."""
    return f"{rounds} rounds, batches >= {batch_ms:g} ms" + (", --quick" if quick else "")


def load_average() -> float:
    """The one-minute load average (0.0 where the system has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def warn_if_loaded(limit: float = LOAD_LIMIT, end: str = "\n") -> None:
    """Print a warning when the load average is above ``limit``: on a 2-core machine where
    another process holds a core, every runtime that forks and joins threads per call (torch's
    OpenMP, numba's prange) can stall for milliseconds per call."""
    load = load_average()
    if load > limit:
        print(
            f"WARNING: load average {load:.1f} before starting: other processes share the cores, so expect "
            "noisy times (multi-threaded runtimes stall for milliseconds when a core is taken)",
            end=end,
        )


def write_results(path: Path, text: str, script: str, settings: str) -> None:
    """A results file the documentation embeds (docs/performance.md, the README): the script, its
    settings and the commit measured, then ``text``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    head = f"Written by `benchmarks/{script}` ({settings}) on avgpool {source_state()}.\n\n"
    path.write_text(head + text)
