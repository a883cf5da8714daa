"""Shared fixtures: the bundled models and small ONNX models built with onnx.helper."""

import os
import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"


@pytest.fixture(scope="session")
def mlp_path():
    return str(MODELS / "mnist_mlp.onnx")


@pytest.fixture(scope="session")
def mlp_io():
    return np.load(MODELS / "mnist_mlp.input.npy"), np.load(MODELS / "mnist_mlp.output.npy")


def model_bytes(nodes, inputs, outputs, initializers=(), opset=17, **model_fields):
    graph = helper.make_graph(nodes, "test_graph", inputs, outputs, list(initializers))
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="volt-tests",
        **model_fields
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def identity_plus_model(elem_type, shape=("batch", 3)):
    """y = Identity(x) and a second output from an op on x, for a round trip of each dtype."""
    x = helper.make_tensor_value_info("x", elem_type, list(shape))
    y = helper.make_tensor_value_info("y", elem_type, list(shape))
    return model_bytes([helper.make_node("Identity", ["x"], ["y"])], [x], [y])


@pytest.fixture(scope="session")
def tmp_models(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return os.fspath(path)
