"""CSR inputs from Python: volt.CsrTensor and scipy.sparse matrices equal their dense twins."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import volt
from conftest import model_bytes


def sparse_batch(rows=16, cols=784, density=0.05, seed=1):
    rng = np.random.default_rng(seed)
    dense = rng.standard_normal((rows, cols)).astype(np.float32)
    dense[rng.random((rows, cols)) > density] = 0
    return dense


def csr_arrays(dense):
    rows, cols = np.nonzero(dense)
    offsets = np.zeros(dense.shape[0] + 1, np.int64)
    np.add.at(offsets, rows + 1, 1)
    return dense[rows, cols], cols.astype(np.int64), np.cumsum(offsets)


def test_csr_tensor_equals_dense_twin(mlp_path):
    sess = volt.InferenceSession(mlp_path)
    dense = sparse_batch()
    values, cols, offsets = csr_arrays(dense)
    csr = volt.CsrTensor(values, cols, offsets, dense.shape)
    assert csr.shape == dense.shape and csr.nnz == len(values)
    np.testing.assert_array_equal(csr.to_dense(), dense)
    (from_csr,) = sess.run(None, {"x": csr})
    (from_dense,) = sess.run(None, {"x": dense})
    np.testing.assert_allclose(from_csr, from_dense, rtol=1e-5, atol=1e-5)


def test_scipy_csr_matrix_is_fed_sparse(mlp_path):
    sp = pytest.importorskip("scipy.sparse")
    sess = volt.InferenceSession(mlp_path)
    dense = sparse_batch(seed=2)
    matrix = sp.csr_matrix(dense)  # int32 indices: widened to int64
    (from_scipy,) = sess.run(None, {"x": matrix})
    (from_dense,) = sess.run(None, {"x": dense})
    np.testing.assert_allclose(from_scipy, from_dense, rtol=1e-5, atol=1e-5)


def test_bad_csr_is_refused():
    with pytest.raises(volt.InvalidArgument, match="col"):
        volt.CsrTensor(np.ones(2, np.float32), [0, 9], [0, 1, 2], (2, 3))
    with pytest.raises(volt.InvalidArgument):
        volt.CsrTensor(np.ones(2, np.float32), [0, 1], [0, 2], (2, 3))


def test_csr_into_a_non_2d_input_is_refused():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])
    sess = volt.InferenceSession(model_bytes([helper.make_node("Relu", ["x"], ["y"])], [x], [y]))
    with pytest.raises(volt.InvalidArgument, match="CSR"):
        sess.run(None, {"x": volt.CsrTensor(np.ones(1, np.float32), [0], [0, 1], (1, 4))})
