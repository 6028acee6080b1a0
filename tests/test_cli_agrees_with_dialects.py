"""`avgpool shape`, `avgpool explain` and the zarr path of `avgpool pool` agree with the public
functions of ONNX, OpenVINO and oneDNN: the same output shape, or a refusal by both.

The configurations are drawn at random, each written twice: once as the CLI's flags (any
dialect's auto_pad spelling), once as the public function's own keywords, mapped here
independently of avgpool.cli.settings so that a wrong mapping there cannot hide itself.
Before the registry took each dialect's translation from one place, the CLI disagreed, e.g.
`avgpool shape 1x1x5 -k 2 -d 1 --dialect openvino --version 1` printed 1x1x4 where
`avgpool.openvino.avg_pool(..., dilations=[1], version=1)` refuses (no dilations before AvgPool-16).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import pytest

import avgpool
import avgpool.onednn
import avgpool.openvino
from avgpool import cli
from avgpool.cli import chunked as cli_chunked
from avgpool.cli.flags import UsageError
from avgpool.cli.settings import DIALECTS, Settings

# every spelling the CLI accepts, and each dialect's own
_AUTO_PAD_FLAGS = {
    "NOTSET": ["NOTSET", "explicit", "None", ""],
    "SAME_UPPER": ["SAME_UPPER", "same_upper"],
    "SAME_LOWER": ["SAME_LOWER", "same_lower"],
    "VALID": ["VALID", "valid"],
}
_OPENVINO_AUTO_PAD = {"NOTSET": "explicit", "SAME_UPPER": "same_upper", "SAME_LOWER": "same_lower", "VALID": "valid"}
_ONEDNN_AUTO_PAD = {"NOTSET": "None", "SAME_UPPER": "SAME_UPPER", "SAME_LOWER": "SAME_LOWER", "VALID": "VALID"}


@dataclass(frozen=True)
class Config:
    dialect: str
    shape: tuple[int, ...]
    kernel: list[int]
    strides: list[int] | None
    dilations: list[int] | None
    pads: tuple[list[int], list[int]] | None
    auto_pad: str  # ONNX spelling
    auto_pad_flag: str  # as given to the CLI
    rounding: str
    include_pad: bool
    opset: int
    version: int
    channels_last: bool

    def flags(self) -> list[str]:
        args = [
            "--dialect",
            self.dialect,
            "-k",
            _csv(self.kernel),
            f"--auto-pad={self.auto_pad_flag}",
            "--layout",
            "NXC" if self.channels_last else "NCX",
        ]
        args += ["-s", _csv(self.strides)] if self.strides else []
        args += ["-d", _csv(self.dilations)] if self.dilations else []
        args += ["--pads-begin", _csv(self.pads[0]), "--pads-end", _csv(self.pads[1])] if self.pads else []
        if self.dialect == "onnx":
            args += ["--opset", str(self.opset)] + ["--ceil-mode"] * (self.rounding == "ceil")
            return args + ["--count-include-pad"] * self.include_pad
        args += ["--version", str(self.version)] * (self.dialect == "openvino")
        return args + ["--rounding-type", self.rounding, "--exclude-pad", str(not self.include_pad).lower()]

    def call(self, x: np.ndarray) -> np.ndarray:
        """The public function, with its own spelling of the attributes."""
        begin, end = self.pads or (None, None)
        if self.dialect == "onnx":
            return avgpool.average_pool(
                x,
                self.kernel,
                strides=self.strides,
                pads=None if self.pads is None else begin + end,
                auto_pad=self.auto_pad,
                ceil_mode=self.rounding == "ceil",
                count_include_pad=self.include_pad,
                dilations=self.dilations,
                opset=self.opset,
                layout="NXC" if self.channels_last else "NCX",
            )
        if self.dialect == "openvino":
            return avgpool.openvino.avg_pool(
                x,
                self.kernel,
                exclude_pad=not self.include_pad,
                strides=self.strides,
                pads_begin=begin,
                pads_end=end,
                rounding_type=self.rounding,
                auto_pad=_OPENVINO_AUTO_PAD[self.auto_pad],
                dilations=self.dilations,
                version=self.version,
            )
        n = len(self.kernel)  # oneDNN's strides and pads are required attributes
        return avgpool.onednn.avg_pool(
            x,
            self.kernel,
            strides=self.strides or [1] * n,
            pads_begin=begin or [0] * n,
            pads_end=end or [0] * n,
            exclude_pad=not self.include_pad,
            rounding_type=self.rounding,
            auto_pad=_ONEDNN_AUTO_PAD[self.auto_pad],
            data_format="NXC" if self.channels_last else "NCX",
        )


def _csv(values) -> str:
    return ",".join(map(str, values))


def _maybe(rng, chance: float, make):
    return make() if rng.random() < chance else None


def _config(rng) -> Config:
    dialect = str(rng.choice(["onnx", "openvino", "onednn"]))
    n = int(rng.choice([1, 1, 2, 3], p=[0.45, 0.2, 0.3, 0.05]))
    spatial = [int(rng.integers(1, 10)) for _ in range(n)]
    batch, channels = (int(rng.choice([0, 1, 2], p=[0.04, 0.6, 0.36])) for _ in range(2))
    channels_last = dialect != "openvino" and bool(rng.integers(0, 2)) or rng.random() < 0.03
    shape = (batch, *spatial, channels) if channels_last else (batch, channels, *spatial)
    auto_pad = str(rng.choice(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    return Config(
        dialect,
        shape,
        kernel=[int(rng.integers(1, 5)) for _ in range(n)],
        strides=_maybe(rng, 0.8, lambda: [int(rng.integers(1, 4)) for _ in range(n)]),
        # all-ones dilations too: given is not absent where the attribute does not exist
        dilations=_maybe(rng, 0.4, lambda: [int(rng.choice([1, 1, 2, 3])) for _ in range(n)]),
        pads=_maybe(
            rng,
            0.6 if auto_pad == "NOTSET" else 0.15,
            lambda: tuple([int(rng.integers(0, 4)) for _ in range(n)] for _ in range(2)),
        ),
        auto_pad=auto_pad,
        auto_pad_flag=str(rng.choice(_AUTO_PAD_FLAGS[auto_pad])),
        rounding=str(rng.choice(["floor", "ceil"] if dialect != "openvino" else ["floor", "ceil", "ceil_torch"])),
        include_pad=bool(rng.integers(0, 2)),
        opset=int(rng.choice([1, 7, 10, 11, 13, 19, 22])),
        version=int(rng.choice([1, 14, 16])),
        channels_last=channels_last,
    )


def _configs(count: int, seed: int) -> list[Config]:
    rng = np.random.default_rng(seed)
    return [_config(rng) for _ in range(count)]


def _function_shape(config: Config) -> tuple[int, ...] | None:
    """The shape the public function returns on a random input, None where it refuses."""
    if config.dialect == "openvino" and config.channels_last:
        return None  # avg_pool has no layout: N x C x D1 .. only
    if config.dialect == "onednn" and config.dilations and set(config.dilations) != {1}:
        return None  # oneDNN has no dilations: all ones is the only dilation it computes
    x = np.random.default_rng(0).standard_normal(config.shape).astype(np.float32)
    try:
        return config.call(x).shape
    except avgpool.AvgPoolError:
        return None


def _cli(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return cli.main(argv, stdout=out), out.getvalue()


def _cli_shape(config: Config) -> tuple[int, ...] | None:
    code, text = _cli(["shape", "x".join(map(str, config.shape))] + config.flags())
    assert code in (0, 2)
    return tuple(int(v) for v in text.strip().split("x")) if code == 0 else None


def _explained_shape(config: Config) -> tuple[int, ...] | None:
    code, text = _cli(
        ["explain", "x".join(map(str, config.shape)), "--no-compare", "--max-windows", "2"] + config.flags()
    )
    assert code in (0, 2)
    if code:
        return None
    line = next(line for line in text.splitlines() if line.startswith("output shape: "))
    return tuple(int(v) for v in line.removeprefix("output shape: ").split("x"))


@pytest.mark.parametrize("config", _configs(400, 2026), ids=lambda c: f"{c.dialect}-{c.shape}")
def test_shape_prints_what_the_function_returns(config):
    assert _cli_shape(config) == _function_shape(config), config.flags()


@pytest.mark.parametrize("config", _configs(80, 7), ids=lambda c: f"{c.dialect}-{c.shape}")
def test_explain_shows_what_the_function_returns(config):
    assert _explained_shape(config) == _function_shape(config), config.flags()


@pytest.mark.parametrize(
    "config", [c for c in _configs(300, 11) if c.dialect != "onnx"][:60], ids=lambda c: f"{c.dialect}-{c.shape}"
)
def test_chunked_pool_builds_the_functions_spec(config):
    """The zarr path pools with the registry's spec: the same shape or a refusal (an OpenVINO window
    with no input value is the whole-array function's alone, refused by the CLI with a usage error)."""
    from avgpool._core.shape import infer_output_shape

    begin, end = config.pads or (None, None)
    settings = Settings(
        kernel=tuple(config.kernel),
        strides=config.strides and tuple(config.strides),
        dilations=config.dilations and tuple(config.dilations),
        pads_begin=begin and tuple(begin),
        pads_end=end and tuple(end),
        auto_pad=config.auto_pad,
        rounding=config.rounding,
        include_pad=config.include_pad,
        version=config.version,
        channels_last=config.channels_last,
    )
    expected = _function_shape(config)
    try:
        spec, layout = cli_chunked._dialect_spec(config.dialect, settings, config.shape, np.dtype(np.float32))
        shape = infer_output_shape(spec, config.shape, layout)
    except avgpool.AvgPoolError:
        assert expected is None
        return
    except UsageError:
        assert config.dialect == "openvino" and expected is not None
        return
    assert shape == expected


@pytest.mark.parametrize(
    ("argv", "printed"),
    [
        # AvgPool-1 and -14 have no dilations, not even all ones (the function refuses [1])
        ("1x1x5 -k 2 -d 1 --dialect openvino --version 1", None),
        ("1x1x5 -k 2 -d 1 --dialect openvino --version 14", None),
        ("1x1x5 -k 2 -d 1 --dialect openvino --version 16", "1x1x4"),
        ("1x1x7 -k 2 -d 3 --dialect openvino --version 16 --auto-pad same_upper", "1x1x7"),
        ("1x1x5 -k 2 --dialect openvino --version 15", None),  # no AvgPool-15
        ("0x1x5 -k 2 --dialect openvino", None),  # OpenVINO refuses N = 0
        ("1x5x1 -k 2 --dialect openvino --layout NXC", None),  # NCX only
        ("1x1x4 -k 2 --opset 1 --count-include-pad", None),  # count_include_pad arrived in opset 7
        ("1x1x4 -k 2 --opset 7 --count-include-pad", "1x1x3"),
        ("1x1x5 -k 2 -d 2 --opset 18", None),  # dilations arrived in opset 19
        ("1x4x1 -k 2 -d 1 --dialect onednn", "1x3x1"),
        ("1x4x1 -k 2 -d 2 --dialect onednn", None),
        ("1x5x1 -k 2 -s 2 --dialect onednn --rounding-type ceil --exclude-pad false", None),
        ("1x5x1 -k 2 -s 2 --dialect onednn --rounding-type ceil_torch", None),
        ("1x0x4 -k 2 --dialect qlinear", None),  # onnxruntime refuses C = 0
    ],
)
def test_cli_runs(argv, printed, capsys):
    code, text = _cli(["shape"] + argv.split())
    assert (code, text) == ((0, printed + "\n") if printed else (2, "")), capsys.readouterr().err


def test_every_pooling_dialect_but_qlinear_is_covered():
    covered = {"onnx", "openvino", "onednn", "qlinear"}  # qlinear: test_cli_agrees_with_qlinear.py
    assert {name for name, d in DIALECTS.items() if d.call is not None} <= covered
