"""Ctrl-C at any moment of a command: one line on stderr and exit 130 (or, once the output is in
place, a normal end), never a traceback, never death by the signal, never a file lost.

tests/test_robustness_files.py holds a command at one known point (a full pipe); here the signal
comes while modules load, while the output is being written, after it is in place, twice, and
where the KeyboardInterrupt it raises is swallowed. The commands run as users run them: the
console script next to sys.executable and ``python -m avgpool``, each child with SIGINT's default
action (a shell gives the commands it starts in the background SIGINT ignored). A moment inside
an import is chosen by a sitecustomize module only the child loads: it raises SIGINT in the child
when that module starts loading.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import avgpool

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX signals")

OLD = b"the user's previous result, which must survive\n"
#: A compile or a cache load in the child can take this long before it reaches the point under test.
STARTUP_TIMEOUT = 300
SCRIPT = Path(sys.executable).with_name("avgpool")
ENTRIES = {"console script": [str(SCRIPT)], "python -m avgpool": [sys.executable, "-m", "avgpool"]}
SHAPE = (24, 4, 256, 256)  # 25 MB of float32, written one sample at a time (--batch-size 1): ~0.2 s
POOL = ["pool", "x.npy", "y.npy", "-k", "3,3", "--batch-size", "1", "-q"]

SITECUSTOMIZE = """
import os, signal, sys

class _SigintWhenLoading:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["SIGINT_WHEN_LOADING"]:
            sys.meta_path.remove(self)
            open(os.environ["SIGINT_SENT"], "w").close()
            signal.raise_signal(signal.SIGINT)
        return None

sys.meta_path.insert(0, _SigintWhenLoading())
"""

SWALLOWED = """
import ctypes, signal, sys
import avgpool.cli.files
from avgpool.cli import main

write = avgpool.cli.files.write_npy_batches

def interrupted():
    signal.raise_signal(signal.SIGINT)  # the KeyboardInterrupt is raised in this function

def in_a_callback(*args):  # as llvmlite calls back into Python while numba compiles
    ctypes.CFUNCTYPE(None)(interrupted)()
    write(*args)

def in_an_except_clause(*args):  # as a library that catches it, or an import that makes it an ImportError
    try:
        interrupted()
    except KeyboardInterrupt:
        pass
    write(*args)

avgpool.cli.files.write_npy_batches = {"callback": in_a_callback, "except": in_an_except_clause}[sys.argv.pop(1)]
sys.exit(main())
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """x.npy and the pooled result; the kernels the children use are compiled (or loaded) first,
    so that they only read the on-disk cache."""
    folder = tmp_path_factory.mktemp("interrupts")
    x = np.random.default_rng(0).random(SHAPE, np.float32)
    np.save(folder / "x.npy", x)
    avgpool.average_pool(x[:1], [3, 3])
    return folder, avgpool.average_pool(x, [3, 3])


@pytest.fixture
def work(tmp_path, data):
    """A folder with x.npy and an existing y.npy, and the expected result."""
    folder, expected = data
    os.symlink(folder / "x.npy", tmp_path / "x.npy")
    (tmp_path / "y.npy").write_bytes(OLD)
    return tmp_path, expected


def _entry(name: str) -> list[str]:
    if not SCRIPT.exists() and name == "console script":
        pytest.skip(f"no console script at {SCRIPT}")
    return ENTRIES[name]


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(entry: list[str], argv: list[str], cwd: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*entry, *argv],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **env},
        preexec_fn=_sigint_default,
    )


def _wait(child: subprocess.Popen, condition) -> bool:
    """Poll ``condition`` (every 0.5 ms) until it holds, True, or the child has ended, False."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not condition():
        if child.poll() is not None:
            return False
        assert time.monotonic() < deadline, "the command never got there"
        time.sleep(0.0005)
    return True


def _writing(folder: Path) -> bool:
    return any(name.endswith(".partial") for name in os.listdir(folder))


def _interrupt_until_it_ends(child: subprocess.Popen) -> tuple[str, str]:
    while child.poll() is None:
        child.send_signal(signal.SIGINT)
        time.sleep(0.002)
    out, err = child.communicate(timeout=60)
    return out.decode(), err.decode()


def _assert_outcome(code: int, out: str, err: str, folder: Path, expected: np.ndarray, command: str = "pool") -> None:
    """130 and one line with y.npy as it was, or (the signal came once the output was in place)
    0 and the complete output; never a traceback, never a temporary file left."""
    assert "Traceback" not in err, err
    if code == 130:
        assert err == f"avgpool {command}: interrupted\n"
        if command == "pool":
            assert (folder / "y.npy").read_bytes() == OLD
    else:
        assert code == 0, (code, err)  # not -2: killed by the signal
        assert err == ""
        np.testing.assert_array_equal(np.load(folder / "y.npy"), expected, strict=True)
    assert sorted(os.listdir(folder)) == ["x.npy", "y.npy"]


def test_the_command_line_module_imports_nothing_heavy():
    """The console script imports avgpool.cli before main() can handle Ctrl-C: it may add a few
    small standard modules to what ``import avgpool`` has loaded, nothing more."""
    code = (
        "import sys, avgpool; before = set(sys.modules); import avgpool.cli; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    heavy = {"avgpool", "numpy", "numba", "llvmlite", "scipy", "argparse", "zipfile", "shutil", "secrets"}
    loaded = [name for name in done.stdout.split() if name.split(".")[0] in heavy]
    # the latter imports only the standard library
    assert loaded == ["avgpool.cli", "avgpool.cli.interrupts"], done.stdout


@pytest.mark.parametrize(
    "entry, module, command",
    [
        ("console script", "argparse", "shape"),
        ("python -m avgpool", "argparse", "shape"),
        ("console script", "numpy", "shape"),
        ("python -m avgpool", "numpy", "shape"),
        ("console script", "numba", "pool"),
        ("python -m avgpool", "llvmlite.binding", "pool"),
    ],
)
def test_sigint_while_modules_load(work, entry, module, command):
    """argparse and the rest load in main(); numba and llvmlite once the pooling starts; numpy
    wherever avgpool first imports it."""
    folder, expected = work
    site = folder / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    argv = ["shape", "1x4x256x256", "-k", "3,3"] if command == "shape" else POOL
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    child = _start(
        _entry(entry), argv, folder, PYTHONPATH=path, SIGINT_WHEN_LOADING=module, SIGINT_SENT=str(site / "sent")
    )
    out, err = child.communicate(timeout=STARTUP_TIMEOUT)
    assert (site / "sent").exists(), f"{module} was never loaded"
    (site / "sitecustomize.py").unlink()
    (site / "sent").unlink()
    site.rmdir()
    assert child.returncode == 130, err.decode()
    assert out.decode() == ""
    _assert_outcome(child.returncode, out.decode(), err.decode(), folder, expected, command)


@pytest.mark.parametrize("entry, delay, repeat", [("console script", 0.0, False), ("python -m avgpool", 0.05, True)])
def test_sigint_while_the_output_is_written(work, entry, delay, repeat):
    """Once the temporary output exists (and ``delay`` later); with ``repeat``, SIGINT again every
    2 ms until the command has ended, as a second Ctrl-C or a tool that signals the child and its
    group: the later ones come while the command cleans up and while Python tears down numba, with
    SIGINT's default action back (which would end the process by the signal, exit status -2). If
    the command is done by the time the signal comes, its output must be complete."""
    folder, expected = work
    child = _start(_entry(entry), POOL, folder)
    if _wait(child, lambda: _writing(folder)):
        time.sleep(delay)
        child.send_signal(signal.SIGINT)
    if repeat:
        out, err = _interrupt_until_it_ends(child)
    else:
        out, err = (stream.decode() for stream in child.communicate(timeout=60))
    _assert_outcome(child.returncode, out, err, folder, expected)


def test_sigint_once_the_output_is_in_place_ends_normally(work):
    """Ctrl-C after the rename, while the command finishes and Python tears down numba (Python
    puts SIGINT's default action back before that): the command has done its work, exit 0."""
    folder, expected = work
    old = os.stat(folder / "y.npy").st_ino
    child = _start(_entry("console script"), POOL, folder)
    _wait(child, lambda: os.stat(folder / "y.npy").st_ino != old)
    out, err = _interrupt_until_it_ends(child)
    assert child.returncode == 0, (child.returncode, err)
    _assert_outcome(child.returncode, out, err, folder, expected)


@pytest.mark.parametrize("where", ["callback", "except"])
def test_swallowed_keyboard_interrupt_still_stops_the_command(work, where):
    """Python raises the KeyboardInterrupt wherever the main thread is: in a function that ctypes
    calls back (llvmlite's, while numba compiles), which prints it and drops it, or in code that
    catches it. The command must stop all the same, before its output replaces the old file."""
    folder, expected = work
    child = _start([sys.executable, "-c", SWALLOWED, where], POOL, folder)
    out, err = child.communicate(timeout=STARTUP_TIMEOUT)
    assert child.returncode == 130, err.decode()
    _assert_outcome(child.returncode, out.decode(), err.decode(), folder, expected)
