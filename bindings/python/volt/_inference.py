"""Inference with ONNX Runtime's Python interface: InferenceSession, SessionOptions, providers."""

import difflib
import enum
import os

from . import _volt
from ._errors import InvalidArgument, NotImplemented

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
_PROVIDERS = (CUDA_PROVIDER, CPU_PROVIDER)


def _closest(word, choices):
    match = difflib.get_close_matches(word, choices, n=1)
    return f"; did you mean '{match[0]}'?" if match else ""


class GraphOptimizationLevel(enum.IntEnum):
    """ONNX Runtime's levels; volt maps them onto its own 0 (none), 1 (basic), 2 (all)."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


_VOLT_LEVEL = {0: 0, 1: 1, 2: 2, 99: 2}


class ExecutionMode(enum.IntEnum):
    """Accepted for ONNX Runtime code; volt runs nodes in order, each on all intra-op threads."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


def _parse_bytes(text):
    units = {"": 0, "K": 10, "M": 20, "G": 30}
    digits = text.rstrip("KMG")
    if not digits.isdigit() or len(text) - len(digits) > 1:
        raise ValueError("not a byte count (like 536870912, 512M or 2G)")
    return int(digits) << units[text[len(digits):]]


def _parse_count(text):
    if not text.isdigit() or int(text) < 1:
        raise ValueError("not a positive integer")
    return int(text)


def _parse_switch(text):
    words = {"1": True, "true": True, "on": True, "0": False, "false": False, "off": False}
    if text.lower() not in words:
        raise ValueError("not one of 1/0, true/false, on/off")
    return words[text.lower()]


# volt's own session options, set with add_session_config_entry(key, value).
_CONFIG_KEYS = {
    "precision": str,  # fp32 | bf16 | int8 (cpu); fp32 | fp16 (cuda)
    "memory_limit": _parse_bytes,  # bytes one run may hold; 0: the machine's memory
    "plan_cache_size": _parse_count,  # execution plans kept, one per set of input shapes
    "winograd": _parse_switch,  # 3x3 convolutions by Winograd's algorithm
}
# ONNX Runtime's own keys ("session.intra_op.allow_spinning", ...): accepted so that code written
# for it runs; they tune ONNX Runtime's internals and change nothing here.
_FOREIGN_PREFIXES = ("session.", "ep.", "optimization.", "mlas.", "kernel.")


class SessionOptions:
    """Options of an InferenceSession, by ONNX Runtime's names.

    intra_op_num_threads (0: one per core) and graph_optimization_level take effect; volt's own
    options go through add_session_config_entry: precision, memory_limit, plan_cache_size,
    winograd. ``calibration`` (volt): a feed dict with which precision=int8 measures activation
    ranges once (static quantization). ONNX Runtime's logging and memory-arena attributes are
    accepted and have no effect.
    """

    def __init__(self):
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.enable_cpu_mem_arena = True
        self.use_deterministic_compute = False
        self.enable_profiling = False
        self.optimized_model_filepath = ""
        self.calibration = None
        self._config = {}

    def add_session_config_entry(self, key, value):
        key, value = str(key), str(value)
        if key in _CONFIG_KEYS:
            try:
                _CONFIG_KEYS[key](value)
            except ValueError as e:
                raise InvalidArgument(f"session config entry '{key}': '{value}' is {e}") from None
        elif not key.startswith(_FOREIGN_PREFIXES):
            raise InvalidArgument(
                f"unknown session config entry '{key}' (volt's are: {', '.join(_CONFIG_KEYS)})"
                + _closest(key, list(_CONFIG_KEYS))
            )
        self._config[key] = value

    def get_session_config_entry(self, key):
        if key not in self._config:
            raise InvalidArgument(f"session config entry '{key}' is not set")
        return self._config[key]

    def _native(self):
        """Keyword arguments of _volt.Session."""
        if self.enable_profiling:
            raise NotImplemented(
                "SessionOptions.enable_profiling: volt writes per-node profiles with "
                "`volt bench MODEL --profile FILE`, not from a session"
            )
        if self.optimized_model_filepath:
            raise NotImplemented(
                "SessionOptions.optimized_model_filepath: volt does not write its optimized graph"
            )
        threads = self.intra_op_num_threads
        if not isinstance(threads, int) or threads < 0:
            raise InvalidArgument(f"intra_op_num_threads must be an int >= 0, got {threads!r}")
        level = int(self.graph_optimization_level)
        if level not in _VOLT_LEVEL:
            raise InvalidArgument(f"graph_optimization_level {level} is not a GraphOptimizationLevel")
        kwargs = {"threads": threads, "optimization_level": _VOLT_LEVEL[level]}
        for key, parse in _CONFIG_KEYS.items():
            if key in self._config:
                kwargs[key] = parse(self._config[key])
        if self.calibration is not None:
            kwargs["calibration"] = dict(self.calibration)
        return kwargs


def set_default_logger_severity(level):
    """Accepted for ONNX Runtime code: volt logs nothing; its errors are exceptions."""
    if not isinstance(level, int) or not 0 <= level <= 4:
        raise InvalidArgument(f"logger severity must be 0..4, got {level!r}")


def get_available_providers():
    """The providers usable here, preferred first: CUDA where a GPU and the backend are."""
    return [CUDA_PROVIDER, CPU_PROVIDER] if _volt.device_count("cuda") > 0 else [CPU_PROVIDER]


def get_device():
    return "GPU" if _volt.device_count("cuda") > 0 else "CPU"


def _resolve_providers(providers, provider_options):
    """(volt device, providers, their options). The first provider listed decides the device;
    asking for CUDA where it is not usable is the session's DeviceError, not a fallback."""
    if providers is None:
        providers = [CPU_PROVIDER]
    names, options = [], []
    for i, entry in enumerate(providers):
        name, opts = (entry, {}) if isinstance(entry, str) else tuple(entry)
        if provider_options is not None:
            if len(provider_options) != len(providers):
                raise InvalidArgument("provider_options must have one entry per provider")
            opts = provider_options[i]
        if name not in _PROVIDERS:
            raise InvalidArgument(
                f"unknown execution provider '{name}' (volt has {', '.join(_PROVIDERS)})"
                + _closest(name, list(_PROVIDERS))
            )
        names.append(name)
        options.append({str(k): str(v) for k, v in dict(opts).items()})
    if not names:
        raise InvalidArgument("providers is empty")
    if names[0] == CUDA_PROVIDER:
        device_id = options[0].get("device_id", "0")
        if not device_id.isdigit():
            raise InvalidArgument(f"CUDAExecutionProvider: device_id '{device_id}' is not a number")
        cuda_options = dict(options[0], device_id=device_id)
        return f"cuda:{device_id}", [CUDA_PROVIDER, CPU_PROVIDER], [cuda_options, {}]
    return "cpu", [CPU_PROVIDER], [{}]


class NodeArg:
    """A graph input or output: name, shape (ints, strs for symbolic dims, None for unknown
    ones; None when even the rank is unknown) and type ("tensor(float)", "seq(tensor(int64))")."""

    __slots__ = ("name", "type", "shape")

    def __init__(self, name, type, shape):  # noqa: A002 (ONNX Runtime's name)
        self.name, self.type, self.shape = name, type, shape

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


class ModelMetadata:
    """What the model file says about itself (ONNX Runtime's fields, plus ir_version,
    producer_version and opsets: domain -> version)."""

    def __init__(self, fields):
        self.producer_name = fields["producer_name"]
        self.producer_version = fields["producer_version"]
        self.graph_name = fields["graph_name"]
        self.graph_description = fields["graph_description"]
        self.domain = fields["domain"]
        self.description = fields["description"]
        self.version = fields["version"]
        self.custom_metadata_map = fields["custom_metadata_map"]
        self.ir_version = fields["ir_version"]
        self.opsets = fields["opsets"]

    def __repr__(self):
        return f"ModelMetadata(producer={self.producer_name!r}, opsets={self.opsets!r})"


class InferenceSession:
    """An ONNX model loaded for inference: ``InferenceSession(path_or_bytes, sess_options=None,
    providers=None)``; ``run(output_names, input_feed, run_options=None)`` returns numpy arrays.

    Inputs that are C-contiguous arrays of the declared dtype are read in place; a wrong dtype
    is an InvalidArgument naming the input (no casts). Outputs own their buffers. ``run`` may be
    called from several threads at once; it releases the GIL.
    """

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None):
        self._options = sess_options if sess_options is not None else SessionOptions()
        device, self._providers, self._provider_options = _resolve_providers(
            providers, provider_options
        )
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            model, self._model_path = bytes(path_or_bytes), None
        else:
            model = self._model_path = os.fspath(path_or_bytes)
            if isinstance(model, bytes):
                model = self._model_path = os.fsdecode(model)
        self._sess = _volt.Session(model, device=device, **self._options._native())
        self._inputs = [NodeArg(*v) for v in self._sess.inputs()]
        self._outputs = [NodeArg(*v) for v in self._sess.outputs()]
        # The compiled method itself, same signature: no Python frame per call.
        self.run = self._sess.run

    def run(self, output_names, input_feed, run_options=None):  # replaced per instance above
        return self._sess.run(output_names, input_feed, run_options)

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_overridable_initializers(self):
        return []  # initializers are constants once loaded: volt folds them into its plans

    def get_providers(self):
        return list(self._providers)

    def get_provider_options(self):
        return {p: dict(o) for p, o in zip(self._providers, self._provider_options)}

    def get_session_options(self):
        return self._options

    def get_modelmeta(self):
        return ModelMetadata(self._sess.metadata())
