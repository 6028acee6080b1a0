"""The command line never loses a file, ends cleanly on Ctrl-C and keeps untrusted files harmless.

Interrupts and write failures are real: the CLI runs in a subprocess (``python -m avgpool``), gets a
SIGINT while it is blocked writing to a full pipe (its progress line on stderr, or its stdout), or
runs under ``RLIMIT_FSIZE`` so that the output write fails part way. Each time the file that was
there before must be byte-identical and no temporary file may be left behind.
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
import tracemalloc
import zipfile

import numpy as np
import pytest

import avgpool
import avgpool.cli.files
from avgpool.cli import main

OLD = b"the user's previous result, which must survive\n"
#: A compile or a cache load in the child can take this long before it reaches the point under test.
STARTUP_TIMEOUT = 300


def run(argv: list) -> tuple[int, str]:
    out = io.StringIO()
    return main([str(a) for a in argv], stdout=out), out.getvalue()


@pytest.fixture(scope="module", autouse=True)
def compiled():
    """Compile (or load) the kernels the subprocesses use before they start, so that they only read
    the on-disk cache and never write it under a file-size limit."""
    avgpool.average_pool(np.ones((2, 1, 8, 8), np.float32), [1, 1])
    avgpool.average_pool(np.ones((2, 1, 8, 8), np.float32), [2, 2])


def _existing(path) -> None:
    path.write_bytes(OLD)


def _listing(directory) -> list[str]:
    return sorted(os.listdir(directory))


def _cli(*argv) -> list[str]:
    return [sys.executable, "-m", "avgpool", *map(str, argv)]


# ---------------------------------------------------------------- SIGINT, deterministically


def _full_pipe() -> tuple[int, int]:
    """A pipe whose buffer is full: a child's first write to it blocks until the test reads."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    for size in (65536, 4096, 1):
        with contextlib.suppress(BlockingIOError):
            while True:
                os.write(write_end, bytes(size))
    os.set_blocking(write_end, True)
    return read_end, write_end


def _drain(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _blocked_in_pipe_write(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/wchan") as wchan:
            return "pipe_write" in wchan.read()
    except OSError:  # pragma: no cover - Linux only; the tests below skip elsewhere
        return False


def _sigint_default() -> None:
    """In the child: SIGINT's default action, which a shell gives up for commands it starts in the
    background (they inherit SIGINT ignored, and Python then installs no KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt_when_blocked(child: subprocess.Popen, ready=lambda: True, signum: int = signal.SIGINT) -> None:
    """SIGINT (or ``signum``) once the child is blocked writing to its full pipe (and ``ready()``):
    it can get no further until the test drains the pipe, so the signal lands at a known point."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not (_blocked_in_pipe_write(child.pid) and ready()):
        assert child.poll() is None, "the command ended before it could be interrupted"
        assert time.monotonic() < deadline, "the command never blocked on its output"
        time.sleep(0.01)
    child.send_signal(signum)


needs_proc = pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/wchan"), reason="needs Linux /proc/PID/wchan")


def _assert_interrupted(code: int, stderr: str, command: str) -> None:
    assert code == 130, stderr
    assert "Traceback" not in stderr, stderr
    assert stderr.splitlines()[-1] == f"avgpool {command}: interrupted", stderr
    assert stderr.count("interrupted") == 1, stderr


def _signal_mid_write(folder, suffix: str, signum: int, start, wait_for_temporary: bool) -> tuple[int, str, list]:
    """``pool`` into an existing y{suffix}, held in its progress line (stderr is a full pipe) once
    its temporary output exists (if ``wait_for_temporary``), then sent ``signum``: its exit code,
    its stderr after the bytes that filled the pipe, and the folder's listing before."""
    np.save(folder / "x.npy", np.random.default_rng(0).random((4, 1, 64, 64), np.float32))
    target = folder / f"y{suffix}"
    _existing(target)
    before = _listing(folder)
    read_end, write_end = _full_pipe()
    child = subprocess.Popen(
        _cli("pool", "x.npy", target.name, "-k", "1,1", "--batch-size", "1", "--progress", "-q"),
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=write_end,
        preexec_fn=start,
    )
    os.close(write_end)
    try:

        def writing() -> bool:
            return any(name.startswith(f".{target.name}.") for name in os.listdir(folder))

        _interrupt_when_blocked(child, writing if wait_for_temporary else lambda: True, signum)
    finally:
        output = _drain(read_end)
        code = child.wait(timeout=60)
    return code, output.lstrip(b"\0").decode(), before


@needs_proc
@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_sigint_mid_write_keeps_the_old_file(tmp_path, suffix):
    """The child has opened its temporary output and written the first batch; it is then held in
    its progress line (stderr is a full pipe) while the signal arrives."""
    code, stderr, before = _signal_mid_write(tmp_path, suffix, signal.SIGINT, _sigint_default, suffix == ".npy")
    _assert_interrupted(code, stderr, "pool")
    # (no check that the first progress line got out: the child is blocked writing it to the full
    # pipe when the signal lands, and the KeyboardInterrupt cuts that write short; for .npy the
    # temporary output existed by then, which is what makes this a mid-write interrupt)
    assert (tmp_path / f"y{suffix}").read_bytes() == OLD
    assert _listing(tmp_path) == before


def _sigint_ignored() -> None:
    """In the child: SIGINT ignored, as a shell starts a command in the background."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@needs_proc
@pytest.mark.parametrize("start", [_sigint_default, _sigint_ignored], ids=["foreground", "background"])
def test_sigterm_mid_write_keeps_the_old_file_and_leaves_nothing(tmp_path, start):
    """SIGTERM (kill, timeout, a job scheduler's cancel) as Ctrl-C: the temporary output removed,
    the old file kept, exit 143; also for a background job, whose SIGINT is ignored."""
    code, stderr, before = _signal_mid_write(tmp_path, ".npy", signal.SIGTERM, start, True)
    assert code == 143 and "Traceback" not in stderr, stderr
    assert stderr.splitlines()[-1] == "avgpool pool: terminated", stderr
    assert (tmp_path / "y.npy").read_bytes() == OLD
    assert _listing(tmp_path) == before


@needs_proc
@pytest.mark.parametrize(
    "command",
    [
        ["demo"],
        ["shape", "1x3x8x8", "-k", "2,2"],
        ["explain", "1x1x4", "-k", "3"],
        ["run", "model.onnx", "--output-dir", "out"],
    ],
)
def test_sigint_in_any_command_prints_one_line_and_exits_130(tmp_path, command):
    """Each command is held at its first line of output (stdout is a full pipe) and interrupted."""
    if command[0] == "run":
        pytest.importorskip("onnx")
        import onnx

        onnx.save(_model((1, 1, 4, 4), {"a": 1, "b": 2}), tmp_path / "model.onnx")
        (tmp_path / "out").mkdir()
        for name in ("a", "b"):
            _existing(tmp_path / "out" / f"{name}.npy")
    before = _listing(tmp_path), _listing(tmp_path / "out") if command[0] == "run" else None
    read_end, write_end = _full_pipe()
    child = subprocess.Popen(
        _cli(*command), cwd=tmp_path, stdout=write_end, stderr=subprocess.PIPE, preexec_fn=_sigint_default
    )
    os.close(write_end)
    try:
        _interrupt_when_blocked(child)
    finally:
        _drain(read_end)
        _, stderr = child.communicate(timeout=60)
    _assert_interrupted(child.returncode, stderr.decode(), command[0])
    if command[0] == "run":
        assert (_listing(tmp_path), _listing(tmp_path / "out")) == before
        assert all((tmp_path / "out" / f"{name}.npy").read_bytes() == OLD for name in ("a", "b"))


# ---------------------------------------------------------------- a write that fails part way


def _file_size_limit(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


LIMIT = 48 * 1024


def _compiled_ahead(folder, argv: list[str]) -> None:
    """Run the command once without the limit and remove what it wrote, so that the kernels it
    needs are in the cache: a process under the limit cannot save the kernels it compiles, and
    says so, whichever test ran before."""
    ahead = folder / "ahead"
    ahead.mkdir()
    for path in folder.iterdir():
        if path.is_file():
            shutil.copy2(path, ahead / path.name)
    if argv[0] == "run":
        (ahead / "out").mkdir()
    subprocess.run(_cli(*argv), cwd=ahead, capture_output=True, timeout=STARTUP_TIMEOUT, check=True)
    shutil.rmtree(ahead)


@pytest.mark.parametrize("suffix, batch", [(".npy", None), (".npy", "2"), (".npz", "2"), (".png", None)])
def test_file_size_limit_keeps_the_old_file_and_names_it(tmp_path, suffix, batch):
    """RLIMIT_FSIZE makes the write fail with EFBIG part way through the output (128 KiB)."""
    shape = (1, 3, 128, 128) if suffix == ".png" else (8, 1, 64, 64)
    values = np.random.default_rng(1).random(shape, np.float32) * (255 if suffix == ".png" else 1)
    np.save(tmp_path / "x.npy", values)
    target = tmp_path / f"y{suffix}"
    argv = ["pool", "x.npy", target.name, "-k", "1,1", "-q"] + (["--batch-size", batch] if batch else [])
    _compiled_ahead(tmp_path, argv)
    _existing(target)
    before = _listing(tmp_path)
    done = subprocess.run(
        _cli(*argv),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT,
        preexec_fn=_file_size_limit(LIMIT),
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"avgpool pool: error: {target.name}: cannot write: File too large"), done.stderr
    assert target.read_bytes() == OLD
    assert _listing(tmp_path) == before


def test_file_size_limit_in_run_keeps_the_old_outputs(tmp_path):
    pytest.importorskip("onnx")
    import onnx

    onnx.save(_model((1, 1, 128, 128), {"small": 128, "large": 1}), tmp_path / "model.onnx")
    out = tmp_path / "out"
    out.mkdir()
    _compiled_ahead(tmp_path, ["run", "model.onnx", "--output-dir", "out"])
    for name in ("small", "large"):
        _existing(out / f"{name}.npy")
    done = subprocess.run(
        _cli("run", "model.onnx", "--output-dir", "out"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT,
        preexec_fn=_file_size_limit(LIMIT),
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(
        f"avgpool run: error: {os.path.join('out', 'large.npy')}: cannot write: File too large"
    ), done.stderr
    assert (out / "large.npy").read_bytes() == OLD  # the failed one: untouched
    assert np.load(out / "small.npy").shape == (1, 1, 1, 1)  # written before, complete
    assert _listing(out) == ["large.npy", "small.npy"]


# ---------------------------------------------------------------- onto its own input


def test_pool_refuses_to_write_over_its_input(tmp_path):
    x = np.random.default_rng(2).random((1, 1, 4, 4), np.float32)
    np.save(tmp_path / "x.npy", x)
    original = (tmp_path / "x.npy").read_bytes()
    os.symlink(tmp_path / "x.npy", tmp_path / "link.npy")
    os.link(tmp_path / "x.npy", tmp_path / "hard.npy")
    for output in ("x.npy", "link.npy", "hard.npy", "./x.npy"):
        code = main(["pool", str(tmp_path / "x.npy"), str(tmp_path / output), "-k", "2,2", "-q"])
        assert code == 2, output
        assert (tmp_path / "x.npy").read_bytes() == original
    assert sorted(os.listdir(tmp_path)) == ["hard.npy", "link.npy", "x.npy"]


def test_pool_refusal_says_why(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.ones((1, 1, 4, 4), np.float32))
    assert main(["pool", str(tmp_path / "x.npy"), str(tmp_path / "x.npy"), "-k", "2,2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is the input file" in err and "x.npy" in err


def test_run_refuses_to_write_over_its_input(tmp_path):
    pytest.importorskip("onnx")
    import onnx

    onnx.save(_model((1, 1, 4, 4), {"a": 1, "b": 2}), tmp_path / "model.onnx")
    np.save(tmp_path / "a.npy", np.ones((1, 1, 4, 4), np.float32))
    original = (tmp_path / "a.npy").read_bytes()
    code, _ = run(["run", tmp_path / "model.onnx", "--input", f"x={tmp_path / 'a.npy'}", "--output-dir", tmp_path])
    assert code == 2
    assert (tmp_path / "a.npy").read_bytes() == original
    assert not (tmp_path / "b.npy").exists()  # refused before any work


# ---------------------------------------------------------------- output names


def _model(shape: tuple[int, ...], kernels: dict[str, int]):
    """x of ``shape`` -> one AveragePool per output, with a k x k kernel and stride k."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("AveragePool", ["x"], [name], kernel_shape=[k, k], strides=[k, k])
        for name, k in kernels.items()
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in kernels],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=8)


def test_run_outputs_whose_safe_names_collide_get_distinct_files(tmp_path):
    pytest.importorskip("onnx")
    import onnx

    kernels = {"a/b": 4, "a_b": 1, "A_B": 2, "../a_b": 1}
    onnx.save(_model((1, 1, 4, 4), kernels), tmp_path / "model.onnx")
    x = np.random.default_rng(3).random((1, 1, 4, 4), np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    code, text = run(["run", tmp_path / "model.onnx", "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", out])
    assert code == 0, text
    written = {
        line.split(":")[0].removeprefix("output "): line.rsplit(" -> ", 1)[1]
        for line in text.splitlines()
        if line.startswith("output ")
    }
    # names that need no change come first (a_b keeps its file; A_B is the same file on a
    # case-insensitive file system), then the others in the model's order
    assert written == {
        "a_b": str(out / "a_b.npy"),
        "A_B": str(out / "A_B_2.npy"),
        "a/b": str(out / "a_b_3.npy"),
        "../a_b": str(out / "_a_b.npy"),
    }
    assert sorted(os.listdir(out)) == sorted(os.path.basename(path) for path in written.values())
    assert sorted(os.listdir(tmp_path)) == ["model.onnx", "out", "x.npy"]
    for name, k in kernels.items():
        np.testing.assert_array_equal(np.load(written[name]), avgpool.average_pool(x, [k, k], strides=[k, k]))


# ---------------------------------------------------------------- untrusted .npz


def test_npz_member_names_never_become_paths(tmp_path):
    x = np.ones((1, 1, 4, 4), np.float32)
    with zipfile.ZipFile(tmp_path / "evil.npz", "w") as archive, archive.open("../../escaped.npy", "w") as member:
        np.save(member, x)
    assert run(["pool", tmp_path / "evil.npz", tmp_path / "y.npz", "-k", "2,2", "-q"])[0] == 0
    with zipfile.ZipFile(tmp_path / "y.npz") as archive:
        assert archive.namelist() == ["_.._escaped.npy"]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npz")["_.._escaped"], avgpool.average_pool(x, [2, 2]))


def test_output_key_that_is_a_path_is_refused(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.ones((1, 1, 4, 4), np.float32))
    code, _ = run(["pool", tmp_path / "x.npy", tmp_path / "y.npz", "-k", "2,2", "--output-key", "../../x"])
    assert code == 2
    assert "'../../x' is not a plain file name" in capsys.readouterr().err
    assert not (tmp_path / "y.npz").exists()


def test_zip_bomb_is_refused_before_it_is_inflated(tmp_path, monkeypatch, capsys):
    """16 MiB of zeros deflate to 16 KiB; with 1 MiB of memory "available" the member is refused
    from its declared size, and nothing near its size is ever allocated."""
    with (
        zipfile.ZipFile(tmp_path / "bomb.npz", "w", compression=zipfile.ZIP_DEFLATED) as archive,
        archive.open("x.npy", "w") as member,
    ):
        np.save(member, np.zeros((1, 1, 2048, 2048), np.float32))
    assert os.path.getsize(tmp_path / "bomb.npz") < 100_000
    monkeypatch.setattr(avgpool.cli.files, "available_memory", lambda: 2**20, raising=False)
    tracemalloc.start()
    try:
        code, _ = run(["pool", tmp_path / "bomb.npz", tmp_path / "y.npy", "-k", "2,2"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err
    assert code == 2, err
    assert "bomb.npz[x] would take 16777344 bytes of memory once read" in err and "more than the 1048576" in err
    assert peak < 4 * 2**20
    assert not (tmp_path / "y.npy").exists()


def test_available_memory_is_plausible():
    assert 2**20 < avgpool.cli.files.available_memory() <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


# ---------------------------------------------------------------- absurd pads: one line, bounded memory

ABSURD = str(10**12)


def test_explain_with_absurd_pads_exits_2_with_one_line(capsys):
    assert main(["explain", "1x1x4", "-k", "3", "-p", f"{ABSURD},{ABSURD}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has 2000000000002 windows, too many to compare" in err and "--no-compare" in err
    assert main(["explain", "1x1x4", "-k", "3", "-p", f"{ABSURD},{ABSURD}", "--no-compare", "--max-windows", "0"]) == 2
    assert "too many to list" in capsys.readouterr().err


def test_explain_picture_with_absurd_pads_exits_2_and_writes_nothing(tmp_path, capsys):
    code, text = run(
        ["explain", "1x1x4", "-k", "3", "-p", f"{ABSURD},{ABSURD}", "--no-compare", "--svg", tmp_path / "w.svg"]
    )
    assert code == 2 and text == ""
    assert "2000000000004 input columns, too many to draw" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_explain_builds_only_the_windows_it_shows():
    """--no-compare with absurd pads answers; and 200000 windows cost no more memory than 4."""
    code, text = run(["explain", "1x1x4", "-k", "3", "-p", f"{ABSURD},{ABSURD}", "--no-compare", "--max-windows", "2"])
    assert code == 0
    assert "output shape: 1x1x2000000000002" in text and "... 2000000000000 more windows" in text
    assert "       1  -999999999999              0 /          3 /            0        0" in text
    tracemalloc.start()
    try:
        code, text = run(["explain", "1x1x200000", "-k", "3", "--no-compare", "--max-windows", "4"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 0 and "... 199994 more windows" in text
    assert peak < 2**20


def test_pool_with_absurd_pads_exits_2_with_one_line(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.ones((1, 1, 4, 4), np.float32))
    _existing(tmp_path / "y.npy")
    code = main(["pool", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "-k", "3,3", "-p", f"{ABSURD},0,{ABSURD},0"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("avgpool pool: error: AveragePool-22: the attributes give"), err
    assert "must fit in memory" in err
    assert (tmp_path / "y.npy").read_bytes() == OLD
    assert sorted(os.listdir(tmp_path)) == ["x.npy", "y.npy"]


@pytest.mark.parametrize("dialect", ["onnx", "openvino", "qlinear"])
@pytest.mark.parametrize(
    "flags",
    [
        ["-k", "3,2", "-s", "2,3", "-p", "1,0,2,1", "--ceil-mode"],
        ["-k", "2,3", "-d", "2,1", "--auto-pad", "SAME_LOWER"],
        ["-k", "3,5", "-s", "3,1", "-p", "0,4,3,4", "--count-include-pad"],
        ["-k", "2,2", "-s", "2,2"],
    ],
)
def test_explained_windows_are_the_engines_tables(dialect, flags):
    """explain computes each window on demand: the counts and divisors are the engine's plan's."""
    from avgpool._core.plan import make_plan
    from avgpool.cli import build_parser
    from avgpool.cli.flags import settings_from_args
    from avgpool.cli.settings import DIALECTS
    from avgpool.cli.windows import describe

    args = build_parser().parse_args(["explain", "1x1x7x9", *flags, "--dialect", dialect])
    spatial = (7, 9)
    try:
        spec = DIALECTS[dialect].spec(settings_from_args(args), spatial)
    except avgpool.AvgPoolError:
        pytest.skip("not expressible in this dialect")
    for axis, plan in zip(describe(spec, spatial), make_plan(spec, spatial)):
        windows = list(axis.windows)
        assert [w.in_input for w in windows] == plan.count.tolist()
        assert [w.divisor for w in windows] == plan.divisor.tolist()
        assert axis.windows.divisors().tolist() == plan.divisor.tolist()
        assert [w.in_input + w.in_padding + w.past_padding for w in windows] == [axis.geometry.kernel] * len(windows)


def test_a_long_output_name_still_gets_its_temporary_file(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((1, 1, 4, 4), np.float32))
    name = "y" * 250 + ".npy"  # 254 characters: a temporary name built on it must stay under NAME_MAX
    assert run(["pool", tmp_path / "x.npy", tmp_path / name, "-k", "2,2", "-q"])[0] == 0
    assert sorted(os.listdir(tmp_path)) == sorted(["x.npy", name])


def test_an_output_that_is_not_a_regular_file_is_refused_and_kept(tmp_path, capsys):
    # a new file renamed over a FIFO or a device would delete it (a character device became an SVG)
    np.save(tmp_path / "x.npy", np.ones((1, 1, 4, 4), np.float32))
    os.mkfifo(tmp_path / "fifo.npy")
    os.mkfifo(tmp_path / "fifo.svg")
    os.symlink(tmp_path / "fifo.npy", tmp_path / "link.npy")
    for argv in (
        ["pool", tmp_path / "x.npy", tmp_path / "fifo.npy", "-k", "2,2"],
        ["pool", tmp_path / "x.npy", tmp_path / "link.npy", "-k", "2,2"],
        ["explain", "1x1x4", "-k", "3", "--svg", tmp_path / "fifo.svg"],
    ):
        code, _ = run(argv)
        err = capsys.readouterr().err
        assert code == 2 and "is not a regular file (a device, a FIFO or a socket)" in err and err.count("\n") == 1
    assert all(stat.S_ISFIFO(os.stat(tmp_path / name).st_mode) for name in ("fifo.npy", "fifo.svg", "link.npy"))
    assert sorted(os.listdir(tmp_path)) == ["fifo.npy", "fifo.svg", "link.npy", "x.npy"]


def test_explain_pictures_refused_before_anything_is_written(tmp_path, capsys):
    code, text = run(["explain", "1x1x4", "-k", "3", "--svg", tmp_path / "d.svg", "--png", tmp_path / "d.svg"])
    assert code == 2 and text == "" and "--svg and --png name the same file" in capsys.readouterr().err
    # a PNG as wide as 20000 input positions: refused by its size, not drawn in gigabytes
    code, text = run(["explain", "1x1x20000", "-k", "3", "--no-compare", "--png", tmp_path / "w.png"])
    assert code == 2 and text == "" and "the PNG would be" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_an_interrupt_during_the_clean_up_still_leaves_no_temporary_file(tmp_path, monkeypatch, capsys):
    # a write fails; an interrupt then lands in replacing()'s clean-up before the temporary file is
    # removed (as the interrupt machinery's re-sent one can): main() removes it once the command ends
    np.save(tmp_path / "x.npy", np.ones((2, 1, 4, 4), np.float32))
    _existing(tmp_path / "y.npy")

    def failing_write(*args):
        raise OSError(28, "No space left on device")

    real_remove, calls = os.remove, []

    def remove_interrupted_once(path):
        calls.append(path)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real_remove(path)

    monkeypatch.setattr(avgpool.cli.files, "write_npy_batches", failing_write)
    monkeypatch.setattr(avgpool.cli.files.os, "remove", remove_interrupted_once)
    code, _ = run(["pool", tmp_path / "x.npy", tmp_path / "y.npy", "-k", "2,2"])
    assert code == 130 and len(calls) == 2 and calls[0] == calls[1] and calls[0].endswith(".partial")
    assert (tmp_path / "y.npy").read_bytes() == OLD
    assert _listing(tmp_path) == ["x.npy", "y.npy"] and not avgpool.cli.files.PENDING
