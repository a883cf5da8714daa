"""volt's exceptions: one base class, one subclass per error code of the C++ API.

Each also derives from the built-in exception a Python caller would expect to catch
(``InvalidArgument`` is a ``ValueError``, ``IOError`` an ``OSError``, ...).
"""

import builtins


class VoltError(Exception):
    """Base class of every error volt raises."""


class InvalidArgument(VoltError, ValueError):
    """Bad input to a call: wrong name, shape, dtype or option."""


class InvalidModel(VoltError):
    """The model is malformed or inconsistent."""


class NotImplemented(VoltError, NotImplementedError):  # noqa: A001 (volt's name for the code)
    """Valid ONNX that volt does not run (yet)."""


class IOError(VoltError, OSError):  # noqa: A001
    """A file could not be read or written."""


class OutOfMemory(VoltError, MemoryError):
    """An allocation failed or would pass a configured limit."""


class RuntimeError(VoltError, builtins.RuntimeError):  # noqa: A001
    """A failure while running (numerical, internal)."""


class DeviceError(VoltError):
    """An accelerator error, or a device that is not there."""


class Cancelled(VoltError):
    """The run was cancelled (RunOptions.terminate)."""


class Timeout(VoltError):
    """The run passed its deadline (RunOptions.timeout_ms)."""
