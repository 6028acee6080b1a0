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
