"""avgpool.dask out of core: a zarr array larger than the memory a job may use, pooled to a new store.

Run on demand (not a test)::

    .venv/bin/python benchmarks/out_of_core.py                       # 1x6x16384x16384 float32 (6 GiB), 2 runs
    .venv/bin/python benchmarks/out_of_core.py --size 4096 --runs 1  # a small smoke run (384 MiB)
    .venv/bin/python benchmarks/out_of_core.py --compressed          # zarr's default codecs (zstd), in and out
    .venv/bin/python benchmarks/out_of_core.py --clean               # ... and delete --dir afterwards

It creates (if missing) ``<dir>/src-CxS.zarr``: float32, shape 1 x C x S x S, chunks 1 x 1 x 2048 x
2048, no compression (with ``--compressed``: ``<dir>/src-CxS-zstd.zarr``, zarr's default codecs,
zstd, and the outputs written with them too), filled chunk by chunk with seeded random values (never
the whole array in memory). Then it runs each job in a fresh Python process (peak RSS per job
from ``os.wait4``; the process's whole wall time, and the job's own time from building the graph
to the end of ``to_zarr``; the bytes the process read and wrote during the job, from
``/proc/self/io``), alternating, ``--runs`` times:

- ``floor``: ``da.from_zarr(src)[:, :, ::2, ::2].to_zarr(...)``, the issue's I/O floor (output
  chunks 1024 x 1024, as avgpool's). dask fuses the slice into zarr's read, and zarr copies only a
  quarter of each chunk's values into memory, but it reads every chunk's file whole: zarr 3's
  bytes codec does not decode part of a chunk (the job's bytes read are the store's size; an
  ``strace`` of it opens each chunk file once). So it does read every byte, once;
- ``read-all``: every value decoded into a chunk-sized array, as any computation on every value
  needs them (``da.from_zarr(src).map_blocks(lambda b: np.ascontiguousarray(b[:, :, ::2, ::2]))``),
  then a quarter copied and written as the floor: the floor plus the decoding copy (reference);
- ``avgpool``: ``avgpool.dask.average_pool(da.from_zarr(src), [3, 3], strides=[2, 2],
  pads=[1, 1, 1, 1]).to_zarr(...)``,

all with the threaded scheduler (``--threads``, default 2). The targets: avgpool's peak RSS under
1.5 GB, its wall time within 1.5x the floor's (the summary gives each run's ratio to the floor and
to read-all, and their medians). Before the first run, an untimed job calls avgpool once in a fresh
process, so that numba's cache holds the kernels (a stale cache would otherwise put a compilation
into the first avgpool job), and reports what loading them costs a fresh process.
The output stores are deleted (and the file system synced) before each job, so that no job
pays for writing back another's output. The page cache cannot be dropped here, so each job
gets the source cached instead: the script reads the source's files before each job (unless
``--cold``: then a job may find the source evicted by other processes' I/O) and prints how
much of it is resident when the job starts (``fincore``).

Finally it checks three windows of the last avgpool output bit for bit against
``avgpool.average_pool`` of the corresponding input region computed in numpy: the top-left corner
(512 x 512 outputs, the whole array's padding), an interior window across chunk seams and the
bottom-right corner.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHUNK = 2048
KERNEL, STRIDE, PADS = [3, 3], [2, 2], [1, 1, 1, 1]


# ----------------------------------------------------------------------------------------- jobs
# Each runs in its own process (python out_of_core.py --job NAME ...) and prints one JSON line.


def job_create(src: Path, channels: int, size: int, compressed: bool) -> dict:
    import numpy as np
    import zarr

    arr = zarr.create_array(
        store=str(src),
        shape=(1, channels, size, size),
        chunks=(1, 1, CHUNK, CHUNK),
        dtype="float32",
        compressors="auto" if compressed else None,
        fill_value=0.0,
        overwrite=True,
    )
    for c in range(channels):
        for i in range(0, size, CHUNK):
            for j in range(0, size, CHUNK):
                rng = np.random.default_rng([c, i // CHUNK, j // CHUNK])
                h, w = min(CHUNK, size - i), min(CHUNK, size - j)
                arr[0, c, i : i + h, j : j + w] = rng.random((h, w), dtype=np.float32)
    return {}


def _lazy(name: str, src: Path):
    import dask.array as da

    x = da.from_zarr(str(src))
    if name == "floor":
        return x[:, :, ::2, ::2]
    if name == "read-all":
        import numpy as np

        halves = tuple(c if axis < 2 else tuple((n + 1) // 2 for n in c) for axis, c in enumerate(x.chunks))
        return x.map_blocks(lambda block: np.ascontiguousarray(block[:, :, ::2, ::2]), chunks=halves)
    import avgpool.dask

    return avgpool.dask.average_pool(x, KERNEL, strides=STRIDE, pads=PADS)


def io_counters() -> dict:
    """This process's bytes read and written so far (any file, page cache or not), or {}."""
    try:
        with open("/proc/self/io") as f:
            return {k: int(v) for k, v in (line.split(": ") for line in f.read().splitlines())}
    except OSError:
        return {}


def job_write(name: str, src: Path, dst: Path, threads: int, compressed: bool) -> dict:
    import dask
    import dask.array  # noqa: F401 - imported by both jobs before the clock starts; avgpool.dask is timed

    with dask.config.set(scheduler="threads", num_workers=threads):
        io0 = io_counters()
        t0 = time.perf_counter()
        lazy = _lazy(name, src)
        lazy.to_zarr(str(dst), **({} if compressed else {"compressors": None}))
        seconds = time.perf_counter() - t0
        io1 = io_counters()
    return {
        "seconds": seconds,
        "chunks": [len(c) for c in lazy.chunks],
        "out_chunk": [c[0] for c in lazy.chunks],
        "tasks": len(lazy.__dask_graph__()),
        "read": io1.get("rchar", 0) - io0.get("rchar", 0),
        "written": io1.get("wchar", 0) - io0.get("wchar", 0),
    }


def job_warmup() -> dict:
    """Loads avgpool's kernels in a fresh process (compiling them into numba's cache if it is
    stale), after dask: what the avgpool job pays for them."""
    import dask.array  # noqa: F401
    import numpy as np

    t0 = time.perf_counter()
    import avgpool

    avgpool.average_pool(np.zeros((1, 1, 64, 64), np.float32), KERNEL, strides=STRIDE, pads=PADS)
    return {"seconds": time.perf_counter() - t0}


def job_verify(src: Path, dst: Path) -> dict:
    import numpy as np
    import zarr

    import avgpool

    x = zarr.open_array(str(src), mode="r")
    y = zarr.open_array(str(dst), mode="r")
    size = x.shape[-1]
    out = y.shape[-1]
    checks = []
    # output window [a, b) x [c, d) reads input rows 2a-1 .. 2(b-1)+1: the whole array's pad only at index -1
    half, quarter = out // 2, out // 4  # multiples of 1024 for sizes of 8192 and more: chunk seams
    for a, b, c, d in [
        (0, 512, 0, 512),
        (half - 50, half + 50, quarter - 50, quarter + 50),
        (out - 512, out, out - 512, out),
    ]:
        r0, r1, c0, c1 = 2 * a - 1, 2 * (b - 1) + 2, 2 * c - 1, 2 * (d - 1) + 2
        pads = [int(r0 < 0), int(c0 < 0), int(r1 > size), int(c1 > size)]
        region = x[:, :, max(r0, 0) : min(r1, size), max(c0, 0) : min(c1, size)]
        expected = avgpool.average_pool(region, KERNEL, strides=STRIDE, pads=pads)
        got = y[:, :, a:b, c:d]
        checks.append(
            {
                "outputs": [[a, b], [c, d]],
                "pads": pads,
                "shape": list(got.shape),
                "bit_identical": bool(
                    expected.shape == got.shape and np.array_equal(expected.view(np.uint32), got.view(np.uint32))
                ),
            }
        )
    return {"checks": checks, "out_shape": list(y.shape), "out_chunks": list(y.chunks)}


# ---------------------------------------------------------------------------------------- driver


def run_child(args: list[str]) -> dict:
    """Run ``python this_file ARGS`` and return its JSON line with the process's wall time and peak RSS."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, stderr=err, text=True)
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        err.seek(0)
        messages = err.read()
    sys.stderr.write(messages)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"job {args} failed with exit status {proc.returncode}")
    result = json.loads(out.strip().splitlines()[-1])
    # a kernel compiled in the job (its source changed since the warm-up): not a measurement of the code
    result.update(
        wall=wall,
        peak_rss=usage.ru_maxrss * 1024,
        user=usage.ru_utime,
        sys=usage.ru_stime,
        compiled="avgpool: compiling" in messages,
    )
    return result


def resident_bytes(store: Path) -> int | None:
    """How many bytes of the store's chunk files are in the page cache (fincore), or None."""
    files = [str(p) for p in store.rglob("*") if p.is_file()]
    if not files or shutil.which("fincore") is None:
        return None
    total = 0
    for i in range(0, len(files), 256):
        done = subprocess.run(
            ["fincore", "--bytes", "--noheadings", "--output", "RES", *files[i : i + 256]],
            check=False,
            capture_output=True,
            text=True,
        )
        total += sum(int(v) for v in done.stdout.split())
    return total


def warm(store: Path) -> None:
    """Read every file of the store once (into the page cache, if memory allows)."""
    buffer = bytearray(1 << 24)
    for path in store.rglob("*"):
        if path.is_file():
            with open(path, "rb", buffering=0) as f:
                while f.readinto(buffer):
                    pass


def store_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in store.rglob("*") if p.is_file())


def gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/avgpool-ooc"), help="where the stores go")
    parser.add_argument("--size", type=int, default=16384, help="H = W of the source (default 16384)")
    parser.add_argument("--channels", type=int, default=6, help="C of the source (default 6)")
    parser.add_argument("--runs", type=int, default=2, help="runs of each job, alternating (default 2)")
    parser.add_argument("--threads", type=int, default=2, help="threads of the threaded scheduler (default 2)")
    parser.add_argument(
        "--cold", action="store_true", help="do not read the source into the page cache before each job"
    )
    parser.add_argument(
        "--compressed",
        action="store_true",
        help="a source compressed with zarr's default codecs (zstd), outputs written with them",
    )
    parser.add_argument("--clean", action="store_true", help="delete --dir at the end")
    parser.add_argument("--job", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    suffix = "-zstd" if args.compressed else ""
    src = args.dir / f"src-{args.channels}x{args.size}{suffix}.zarr"
    common = ["--dir", str(args.dir), "--size", str(args.size), "--channels", str(args.channels)]
    common += ["--compressed"] if args.compressed else []
    if args.job:
        dst = args.dir / f"out-{args.job}.zarr"
        if args.job == "create":
            result = job_create(src, args.channels, args.size, args.compressed)
        elif args.job == "warmup":
            result = job_warmup()
        elif args.job == "verify":
            result = job_verify(src, args.dir / "out-avgpool.zarr")
        else:
            result = job_write(args.job, src, dst, args.threads, args.compressed)
        print(json.dumps(result))
        return 0

    # only the driver imports harness (and avgpool with it): a job process imports what it measures
    import dask
    import numpy as np
    import zarr
    from harness import source_state

    args.dir.mkdir(parents=True, exist_ok=True)
    nbytes = args.channels * args.size * args.size * 4
    codecs = "zarr's default codecs (zstd)" if args.compressed else "uncompressed"
    print(
        f"# numpy {np.__version__}, dask {dask.__version__}, zarr {zarr.__version__}; {os.cpu_count()} CPUs; "
        f"avgpool {source_state()}; threaded scheduler, {args.threads} threads; {codecs}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    if not (src / "zarr.json").exists() or (not args.compressed and store_bytes(src) < nbytes):
        print(
            f"creating {src}: float32 1x{args.channels}x{args.size}x{args.size} ({nbytes / 2**30:.2f} GiB), "
            f"chunks 1x1x{CHUNK}x{CHUNK}, {codecs} ...",
            flush=True,
        )
        r = run_child(["--job", "create", *common])
        print(f"  created in {r['wall']:.1f} s, peak RSS {gb(r['peak_rss'])}")
    source_bytes = store_bytes(src)
    print(f"source {src}: {gb(source_bytes)} on disk ({nbytes / source_bytes:.2f}x compressed)", flush=True)
    w = run_child(["--job", "warmup", *common])
    print(
        f"avgpool's import and first call in a fresh process (dask imported): {w['seconds']:.2f} s "
        f"(untimed warm-up: numba's cache now holds the kernels)",
        flush=True,
    )

    names = ("floor", "read-all", "avgpool")
    rows = []
    for run in range(1, args.runs + 1):
        for name in names:
            dst = args.dir / f"out-{name}.zarr"
            shutil.rmtree(dst, ignore_errors=True)
            os.sync()
            if not args.cold:
                warm(src)
            cached = resident_bytes(src)
            r = run_child(["--job", name, *common, "--threads", str(args.threads)])
            r.update(run=run, job=name, cached=cached, load=os.getloadavg()[0])
            rows.append(r)
            if r["compiled"]:
                print(
                    f"run {run} {name}: a kernel was compiled in the job (avgpool's source changed during the "
                    "benchmark): left out of the medians",
                    flush=True,
                )
            print(
                f"run {run} {name:<8} job {r['seconds']:7.2f} s  process {r['wall']:7.2f} s  "
                f"peak RSS {gb(r['peak_rss'])}  cpu {r['user'] + r['sys']:6.1f} s  read {gb(r['read'])}  "
                f"written {gb(r['written'])}  tasks {r['tasks']}  "
                f"source cached {'?' if cached is None else gb(cached)}  load {r['load']:.2f}",
                flush=True,
            )

    print()
    print("| run | job | job s | process s | peak RSS | user+sys s | read | written | source in page cache |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cached = "?" if r["cached"] is None else f"{r['cached'] / source_bytes:.0%}"
        print(
            f"| {r['run']} | {r['job']} | {r['seconds']:.2f} | {r['wall']:.2f} | {gb(r['peak_rss'])} "
            f"| {r['user'] + r['sys']:.1f} | {gb(r['read'])} | {gb(r['written'])} | {cached} |"
        )
    print()
    ok = True
    ratios: dict = {"floor": [], "read-all": []}
    for run in range(1, args.runs + 1):
        got = {r["job"]: r for r in rows if r["run"] == run}
        b = got["avgpool"]
        rss_ok = b["peak_rss"] < 1.5e9
        ok &= rss_ok
        parts = []
        for base in ("floor", "read-all"):
            ratio = b["seconds"] / got[base]["seconds"]
            ratios[base].append(ratio)
            parts.append(f"avgpool/{base} {ratio:.2f} (process {b['wall'] / got[base]['wall']:.2f})")
        print(
            f"run {run}: {', '.join(parts)}; avgpool peak RSS {gb(b['peak_rss'])} "
            f"[target < 1.5 GB: {'met' if rss_ok else 'MISSED'}]"
        )
    valid = [run for run in range(1, args.runs + 1) if not any(r["compiled"] for r in rows if r["run"] == run)]
    if not valid:
        print("no run without a kernel compilation: no medians")
        return 1
    medians = {
        name: statistics.median(r["seconds"] for r in rows if r["job"] == name and r["run"] in valid) for name in names
    }
    ratios = {base: [ratios[base][run - 1] for run in valid] for base in ratios}
    floor_ratio = statistics.median(ratios["floor"])
    ok &= floor_ratio <= 1.5
    print(
        f"medians over {len(valid)} runs: job s "
        + ", ".join(f"{n} {medians[n]:.2f}" for n in names)
        + f"; avgpool/floor {floor_ratio:.2f} [target <= 1.5: {'met' if floor_ratio <= 1.5 else 'MISSED'}], "
        f"avgpool/read-all {statistics.median(ratios['read-all']):.2f}"
    )

    v = run_child(["--job", "verify", *common])
    print(f"\nverify: output {v['out_shape']} in chunks {v['out_chunks']}")
    for c in v["checks"]:
        print(
            f"  outputs {c['outputs']} (region pads {c['pads']}, {c['shape']}): "
            f"{'bit-identical' if c['bit_identical'] else 'DIFFERENT'} to avgpool.average_pool in numpy"
        )
        ok &= c["bit_identical"]
    if args.clean:
        shutil.rmtree(args.dir)
        print(f"deleted {args.dir}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
