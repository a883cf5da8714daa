"""volt: an ONNX runtime. Inference as ONNX Runtime spells it, fine-tuning, sparse inputs.

    import volt as ort
    sess = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})
"""

from . import _volt
from ._errors import (
    Cancelled,
    DeviceError,
    InvalidArgument,
    InvalidModel,
    IOError,
    NotImplemented,
    OutOfMemory,
    RuntimeError,
    Timeout,
    VoltError,
)
from ._inference import (
    ExecutionMode,
    GraphOptimizationLevel,
    InferenceSession,
    ModelMetadata,
    NodeArg,
    SessionOptions,
    get_available_providers,
    get_device,
    set_default_logger_severity,
)
from ._training import Trainer

CsrTensor = _volt.CsrTensor
RunOptions = _volt.RunOptions
__version__ = _volt.version()

__all__ = [
    "Cancelled",
    "CsrTensor",
    "DeviceError",
    "ExecutionMode",
    "GraphOptimizationLevel",
    "IOError",
    "InferenceSession",
    "InvalidArgument",
    "InvalidModel",
    "ModelMetadata",
    "NodeArg",
    "NotImplemented",
    "OutOfMemory",
    "RunOptions",
    "RuntimeError",
    "SessionOptions",
    "Timeout",
    "Trainer",
    "VoltError",
    "get_available_providers",
    "get_device",
    "set_default_logger_severity",
]
