"""InferenceSession as ONNX Runtime users write it: types, metadata, errors, threads."""

import gc
import pathlib
import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

import volt
from conftest import identity_plus_model, model_bytes, write


def test_bundled_model_matches_reference(mlp_path, mlp_io):
    x, expected = mlp_io
    sess = volt.InferenceSession(mlp_path, providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})
    assert y.dtype == np.float32 and y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


def test_path_and_bytes_models_agree(mlp_path, mlp_io):
    x, _ = mlp_io
    by_path = volt.InferenceSession(pathlib.Path(mlp_path)).run(None, {"x": x})[0]
    with open(mlp_path, "rb") as f:
        by_bytes = volt.InferenceSession(f.read()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(by_path, by_bytes)


@pytest.mark.parametrize(
    "elem_type,values",
    [
        (TensorProto.FLOAT, np.array([[1.5, -2.0, 3.25]], np.float32)),
        (TensorProto.FLOAT16, np.array([[1.5, -2.0, 65504.0]], np.float16)),
        (TensorProto.INT64, np.array([[1, -(2**40), 2**62]], np.int64)),
        (TensorProto.BOOL, np.array([[True, False, True]], np.bool_)),
        (TensorProto.STRING, np.array([["a", "héllo", ""]], object)),
        (TensorProto.DOUBLE, np.array([[1e300, -1e-300, 0.0]], np.float64)),
        (TensorProto.UINT8, np.array([[0, 255, 7]], np.uint8)),
        (TensorProto.INT32, np.array([[-(2**31), 2**31 - 1, 0]], np.int32)),
    ],
)
def test_round_trip_by_dtype(elem_type, values):
    sess = volt.InferenceSession(identity_plus_model(elem_type))
    (y,) = sess.run(None, {"x": values})
    assert y.shape == values.shape
    if elem_type == TensorProto.STRING:
        assert y.dtype == object and y.tolist() == values.tolist()
    else:
        assert y.dtype == values.dtype
        np.testing.assert_array_equal(y, values)
    assert sess.get_inputs()[0].type == "tensor(" + {
        TensorProto.FLOAT: "float", TensorProto.FLOAT16: "float16", TensorProto.INT64: "int64",
        TensorProto.BOOL: "bool", TensorProto.STRING: "string", TensorProto.DOUBLE: "double",
        TensorProto.UINT8: "uint8", TensorProto.INT32: "int32"}[elem_type] + ")"


def test_unicode_string_array_input():
    sess = volt.InferenceSession(identity_plus_model(TensorProto.STRING, shape=[2]))
    (y,) = sess.run(None, {"x": np.array(["ab", "ünï"])})
    assert y.tolist() == ["ab", "ünï"]


def test_output_does_not_alias_the_fed_array():
    sess = volt.InferenceSession(identity_plus_model(TensorProto.FLOAT))
    x = np.ones((2, 3), np.float32)
    (y,) = sess.run(None, {"x": x})
    x[:] = 7
    np.testing.assert_array_equal(y, np.ones((2, 3), np.float32))
    y[:] = 5  # outputs are writable arrays
    assert (x == 7).all()


def test_inputs_are_not_written(mlp_path, mlp_io):
    x, _ = mlp_io
    before = x.copy()
    x.setflags(write=False)  # a read-only array is read in place, never written
    volt.InferenceSession(mlp_path).run(None, {"x": x})
    np.testing.assert_array_equal(x, before)


def test_non_contiguous_input_gives_the_contiguous_result(mlp_path, mlp_io):
    x, _ = mlp_io
    sess = volt.InferenceSession(mlp_path)
    wide = np.zeros((x.shape[0], 2 * x.shape[1]), np.float32)
    wide[:, ::2] = x
    strided = wide[:, ::2]
    assert not strided.flags.c_contiguous
    np.testing.assert_array_equal(sess.run(None, {"x": strided})[0], sess.run(None, {"x": x})[0])


def two_output_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "features"])
    a = helper.make_tensor_value_info("double", TensorProto.FLOAT, ["batch", "features"])
    b = helper.make_tensor_value_info("total", TensorProto.FLOAT, [])
    c = helper.make_tensor_value_info("count", TensorProto.INT64, [1])
    nodes = [
        helper.make_node("Add", ["x", "x"], ["double"]),
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        helper.make_node("Size", ["x"], ["n"]),
        helper.make_node("Unsqueeze", ["n", "axes"], ["count"]),
    ]
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    return model_bytes(nodes, [x], [a, b, c], [axes], doc_string="two outputs",
                       domain="ai.volt.test", model_version=7,
                       )


def test_metadata_and_symbolic_dims():
    sess = volt.InferenceSession(two_output_model())
    (inp,) = sess.get_inputs()
    assert (inp.name, inp.type, inp.shape) == ("x", "tensor(float)", ["batch", "features"])
    outs = sess.get_outputs()
    assert [o.name for o in outs] == ["double", "total", "count"]
    assert outs[1].shape == [] and outs[2].shape == [1] and outs[2].type == "tensor(int64)"
    meta = sess.get_modelmeta()
    assert meta.producer_name == "volt-tests"
    assert meta.opsets == {"ai.onnx": 17}
    assert meta.graph_name == "test_graph" and meta.description == "two outputs"
    assert meta.domain == "ai.volt.test" and meta.version == 7
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert "NodeArg(name='x'" in repr(inp)


def test_output_subsets_in_the_order_asked():
    sess = volt.InferenceSession(two_output_model())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    total, double = sess.run(["total", "double"], {"x": x})
    assert total.shape == () and total == 15
    np.testing.assert_array_equal(double, 2 * x)
    assert len(sess.run(None, {"x": x})) == 3
    with pytest.raises(volt.InvalidArgument, match="unknown output 'nope'"):
        sess.run(["nope"], {"x": x})


def test_missing_input_wrong_dtype_wrong_rank(mlp_path, mlp_io):
    x, _ = mlp_io
    sess = volt.InferenceSession(mlp_path)
    with pytest.raises(volt.InvalidArgument, match="input 'x'.*missing"):
        sess.run(None, {})
    with pytest.raises(volt.InvalidArgument, match="input 'x' must be float32, got float64"):
        sess.run(None, {"x": x.astype(np.float64)})
    with pytest.raises(ValueError, match="input 'x' must have shape"):  # also a ValueError
        sess.run(None, {"x": x.reshape(-1)})
    with pytest.raises(volt.InvalidArgument, match="unknown input 'y'"):
        sess.run(None, {"x": x, "y": x})
    with pytest.raises(volt.InvalidArgument, match="output_names must be a list"):
        sess.run("logits", {"x": x})


def test_python_lists_take_the_declared_type_of_their_kind(mlp_path, mlp_io):
    x, _ = mlp_io
    sess = volt.InferenceSession(mlp_path)
    np.testing.assert_array_equal(sess.run(None, {"x": x[:1].tolist()})[0],
                                  sess.run(None, {"x": x[:1]})[0])
    ints = volt.InferenceSession(identity_plus_model(TensorProto.INT64))
    with pytest.raises(volt.InvalidArgument, match="must be int64, got float64"):
        ints.run(None, {"x": [[1.5, 2.0, 3.0]]})  # floats are not truncated into integers


def test_corrupt_and_missing_models():
    with pytest.raises(volt.InvalidModel):
        volt.InferenceSession(b"\x08\x07this is not protobuf\xff\xff")
    good = identity_plus_model(TensorProto.FLOAT)
    with pytest.raises(volt.InvalidModel):
        volt.InferenceSession(good[: len(good) // 2])
    with pytest.raises(volt.IOError) as e:
        volt.InferenceSession("/nonexistent/model.onnx")
    assert isinstance(e.value, OSError) and isinstance(e.value, volt.VoltError)


def test_providers_and_options(mlp_path, mlp_io):
    x, expected = mlp_io
    assert "CPUExecutionProvider" in volt.get_available_providers()
    so = volt.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = volt.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_session_config_entry("plan_cache_size", "2")
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")  # ONNX Runtime's: accepted
    so.log_severity_level = 3
    sess = volt.InferenceSession(mlp_path, so, providers=[("CPUExecutionProvider", {})])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], expected, rtol=1e-4, atol=1e-5)
    assert sess.get_session_options() is so
    with pytest.raises(volt.InvalidArgument, match="did you mean 'precision'"):
        so.add_session_config_entry("precison", "int8")
    with pytest.raises(volt.InvalidArgument, match="memory_limit"):
        so.add_session_config_entry("memory_limit", "lots")
    with pytest.raises(volt.InvalidArgument, match="did you mean 'CPUExecutionProvider'"):
        volt.InferenceSession(mlp_path, providers=["CPUExecutionProvidr"])
    bad = volt.SessionOptions()
    bad.add_session_config_entry("precision", "fp64")
    with pytest.raises(volt.NotImplemented, match="precision 'fp64'"):
        volt.InferenceSession(mlp_path, bad)


def test_cuda_where_none_is_usable_raises(mlp_path):
    if "CUDAExecutionProvider" in volt.get_available_providers():
        pytest.skip("this machine has a usable GPU")
    with pytest.raises(volt.DeviceError):
        volt.InferenceSession(mlp_path, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])


def test_memory_limit_is_an_out_of_memory_error(mlp_path, mlp_io):
    x, _ = mlp_io
    so = volt.SessionOptions()
    so.add_session_config_entry("memory_limit", "1K")
    with pytest.raises(volt.OutOfMemory) as e:
        volt.InferenceSession(mlp_path, so).run(None, {"x": np.repeat(x, 64, axis=0)})
    assert isinstance(e.value, MemoryError)


def test_int8_precision_with_calibration(mlp_path, mlp_io):
    x, expected = mlp_io
    so = volt.SessionOptions()
    so.add_session_config_entry("precision", "int8")
    so.calibration = {"x": x}
    (y,) = volt.InferenceSession(mlp_path, so).run(None, {"x": x})
    # 8-bit weights and activations: within a few percent of the float logits (rel. L2).
    assert np.linalg.norm(y - expected) / np.linalg.norm(expected) < 0.05


def test_outputs_outlive_the_session(mlp_path, mlp_io):
    x, expected = mlp_io
    sess = volt.InferenceSession(mlp_path)
    (y,) = sess.run(None, {"x": x})
    del sess
    gc.collect()
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
    assert y.base is not None  # the runtime's tensor owns the buffer: no copy was made


def test_four_threads_share_a_session(mlp_path):
    sess = volt.InferenceSession(mlp_path)
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((8, 784)).astype(np.float32) for _ in range(8)]
    serial = [sess.run(None, {"x": b})[0] for b in batches]
    results = [[None] * len(batches) for _ in range(4)]

    def work(t):
        for _ in range(5):
            for i, b in enumerate(batches):
                results[t][i] = sess.run(None, {"x": b})[0]

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for per_thread in results:
        for got, want in zip(per_thread, serial):
            np.testing.assert_array_equal(got, want)


def slow_model(iterations):
    """A Loop of `iterations` small matrix products: long enough to cancel mid-run."""
    body_in = [
        helper.make_tensor_value_info("i", TensorProto.INT64, []),
        helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        helper.make_tensor_value_info("s", TensorProto.FLOAT, [64, 64]),
    ]
    body_out = [
        helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
        helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [64, 64]),
    ]
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("MatMul", ["s", "s"], ["m"]),
         helper.make_node("Tanh", ["m"], ["s_out"])],
        "body", body_in, body_out)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])
    n = helper.make_tensor("n", TensorProto.INT64, [], [iterations])
    cond = helper.make_tensor("cond", TensorProto.BOOL, [], [True])
    loop = helper.make_node("Loop", ["n", "cond", "x"], ["y"], body=body)
    return model_bytes([loop], [x], [y], [n, cond])


def test_run_cancelled_from_another_thread():
    sess = volt.InferenceSession(slow_model(10_000_000))
    x = np.full((64, 64), 0.01, np.float32)
    opts = volt.RunOptions()
    timer = threading.Timer(0.2, lambda: setattr(opts, "terminate", True))
    timer.start()
    start = time.monotonic()
    with pytest.raises(volt.Cancelled):
        sess.run(None, {"x": x}, opts)
    assert time.monotonic() - start < 30
    timer.join()
    assert opts.terminate
    opts.terminate = False  # usable again
    short = volt.InferenceSession(slow_model(3))
    assert short.run(None, {"x": x}, opts)[0].shape == (64, 64)


def test_run_timeout():
    sess = volt.InferenceSession(slow_model(10_000_000))
    opts = volt.RunOptions()
    opts.timeout_ms = 100
    with pytest.raises(volt.Timeout):
        sess.run(None, {"x": np.zeros((64, 64), np.float32)}, opts)


def sequence_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])
    s = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    out = helper.make_tensor_sequence_value_info("out", TensorProto.FLOAT, None)
    n = helper.make_tensor_value_info("n", TensorProto.INT64, [])
    nodes = [helper.make_node("SequenceInsert", ["s", "x"], ["out"]),
             helper.make_node("SequenceLength", ["out"], ["n"])]
    return model_bytes(nodes, [s, x], [out, n])


def test_sequences_are_lists():
    sess = volt.InferenceSession(sequence_model())
    assert sess.get_inputs()[0].type == "seq(tensor(float))"
    a, b = np.array([1, 2], np.float32), np.array([3], np.float32)
    out, n = sess.run(None, {"s": [a], "x": b})
    assert isinstance(out, list) and n == 2
    np.testing.assert_array_equal(out[0], a)
    np.testing.assert_array_equal(out[1], b)


def optional_model():
    x = helper.make_value_info("x", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))
    out = helper.make_value_info("y", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))
    has = helper.make_tensor_value_info("has", TensorProto.BOOL, [])
    nodes = [helper.make_node("Identity", ["x"], ["y"]),
             helper.make_node("OptionalHasElement", ["x"], ["has"])]
    return model_bytes(nodes, [x], [out, has], opset=18)


def test_empty_optionals_are_none():
    sess = volt.InferenceSession(optional_model())
    y, has = sess.run(None, {"x": None})
    assert y is None and not has
    y, has = sess.run(None, {"x": np.array([1, 2], np.float32)})
    assert has and y.tolist() == [1, 2]


def test_error_classes():
    assert issubclass(volt.InvalidArgument, ValueError)
    assert issubclass(volt.OutOfMemory, MemoryError)
    assert issubclass(volt.IOError, OSError)
    for cls in (volt.InvalidArgument, volt.InvalidModel, volt.NotImplemented, volt.IOError,
                volt.OutOfMemory, volt.Timeout, volt.Cancelled, volt.RuntimeError,
                volt.DeviceError):
        assert issubclass(cls, volt.VoltError)


def test_unsupported_op_is_not_implemented(tmp_models):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")],
                              "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 1)])
    path = write(tmp_models / "unknown_op.onnx", model.SerializeToString())
    with pytest.raises(volt.VoltError, match="Frobnicate"):
        volt.InferenceSession(path)


def test_cuda_provider_matches_cpu(mlp_path, mlp_io):
    if "CUDAExecutionProvider" not in volt.get_available_providers():
        pytest.skip("no usable GPU here (test_cuda_where_none_is_usable_raises covers that)")
    x, expected = mlp_io
    sess = volt.InferenceSession(mlp_path, providers=[("CUDAExecutionProvider", {"device_id": 0})])
    assert sess.get_providers() == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], expected, rtol=1e-3, atol=1e-4)


def test_hostile_feeds_are_volt_errors(mlp_path):
    sess = volt.InferenceSession(mlp_path)
    with pytest.raises(volt.InvalidArgument, match="input 'x' cannot be read as an array"):
        sess.run(None, {"x": [[1.0, 2.0], [3.0]]})  # ragged
    with pytest.raises(volt.InvalidArgument, match="input names must be str"):
        sess.run(None, {1: np.zeros((1, 784), np.float32)})
    with pytest.raises(volt.InvalidArgument, match="input 'x'"):
        sess.run(None, {"x": object()})
    with pytest.raises(volt.InvalidArgument, match="input 'x' is empty, but it is not optional"):
        sess.run(None, {"x": None})
    with pytest.raises(TypeError):
        sess.run(None, [("x", np.zeros((1, 784), np.float32))])  # not a dict
