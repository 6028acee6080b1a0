"""`import avgpool` stays fast: numba, onnx and the peers load only when used."""

import subprocess
import sys


def test_import_does_not_load_numba_or_onnx():
    code = (
        "import sys, avgpool; "
        "print(sorted(m for m in ('numba', 'onnx', 'onnxruntime', 'openvino') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_a_call_without_bfloat16_does_not_import_ml_dtypes():
    # importing ml_dtypes takes most of a second (src/avgpool/_ops/_dtypes.py): only a bfloat16
    # input, or the name "bfloat16", needs it
    code = """
import sys
import numpy as np
import avgpool, avgpool.torch
x = np.ones((1, 2, 4, 4), np.float32)
avgpool.average_pool(x, [2, 2])
avgpool.AveragePool([2, 2])(x)
avgpool.openvino.avg_pool(x, [2, 2], strides=[1, 1], pads_begin=[0, 0], pads_end=[0, 0], exclude_pad=True)
avgpool.onednn.avg_pool(x, [2, 2], strides=[1, 1], pads_begin=[0, 0], pads_end=[0, 0], exclude_pad=True)
avgpool.torch.avg_pool2d(x, 2)
avgpool.block_mean(np.ones((4, 4), np.uint16), 2)
avgpool.qlinear_average_pool(np.ones((1, 2, 4, 4), np.uint8), 0.1, 3, 0.2, 5, [2, 2])
print("ml_dtypes" in sys.modules)
avgpool.block_mean(np.ones((4, 4), np.uint16), 2, dtype="bfloat16")
print("ml_dtypes" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "True"], result.stderr
