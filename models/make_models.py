#!/usr/bin/python3
"""Writes the small models bundled with volt, with fixed seeds, and a reference input/output
pair for each computed here with numpy (independently of volt).

  mnist_mlp.onnx   x: float32[batch,784] -> Gemm 784x128 -> Relu -> Gemm 128x64 -> Relu -> Gemm 64x10 -> logits
  small_cnn.onnx   x: float32[batch,1,28,28] -> Conv 3x3 (8) -> BatchNorm -> Relu -> MaxPool 2 ->
                   Conv 3x3 (16) -> Relu -> GlobalAveragePool -> Flatten -> Gemm 16x10 -> Softmax

Run with Debian's python3-onnx:  /usr/bin/python3 models/make_models.py [OUT_DIR]
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13


def init(name, array):
    return numpy_helper.from_array(np.ascontiguousarray(array), name)


def kaiming(rng, shape, fan_in):
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def mlp(rng):
    sizes = [784, 128, 64, 10]
    weights, inits, nodes = [], [], []
    prev = "x"
    for i in range(3):
        w = kaiming(rng, (sizes[i + 1], sizes[i]), sizes[i])  # [out, in], as torch exports
        b = (rng.standard_normal(sizes[i + 1]) * 0.01).astype(np.float32)
        weights.append((w, b))
        inits += [init(f"fc{i + 1}.weight", w), init(f"fc{i + 1}.bias", b)]
        out = "logits" if i == 2 else f"fc{i + 1}_out"
        nodes.append(helper.make_node("Gemm", [prev, f"fc{i + 1}.weight", f"fc{i + 1}.bias"], [out], name=f"fc{i + 1}", transB=1))
        prev = out
        if i < 2:
            nodes.append(helper.make_node("Relu", [out], [f"relu{i + 1}"], name=f"relu{i + 1}"))
            prev = f"relu{i + 1}"
    graph = helper.make_graph(
        nodes, "mnist_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 784])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)

    def reference(x):
        h = x
        for i, (w, b) in enumerate(weights):
            h = h @ w.T + b
            if i < 2:
                h = np.maximum(h, 0)
        return h
    return graph, reference, (4, 784)


def conv2d(x, w, b, pad):
    n, c, hh, ww = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = hh + 2 * pad - kh + 1, ww + 2 * pad - kw + 1
    out = np.zeros((n, m, oh, ow), dtype=np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i:i + oh, j:j + ow]  # n c oh ow
            out += np.einsum("nchw,mc->nmhw", patch, w[:, :, i, j])
    return out + b.reshape(1, -1, 1, 1)


def cnn(rng):
    w1 = kaiming(rng, (8, 1, 3, 3), 9)
    b1 = (rng.standard_normal(8) * 0.01).astype(np.float32)
    gamma = (1 + 0.1 * rng.standard_normal(8)).astype(np.float32)
    beta = (0.1 * rng.standard_normal(8)).astype(np.float32)
    mean = (0.1 * rng.standard_normal(8)).astype(np.float32)
    var = (1 + 0.1 * rng.random(8)).astype(np.float32)
    w2 = kaiming(rng, (16, 8, 3, 3), 72)
    b2 = (rng.standard_normal(16) * 0.01).astype(np.float32)
    w3 = kaiming(rng, (10, 16), 16)
    b3 = (rng.standard_normal(10) * 0.01).astype(np.float32)
    inits = [init("conv1.weight", w1), init("conv1.bias", b1), init("bn1.weight", gamma), init("bn1.bias", beta),
             init("bn1.running_mean", mean), init("bn1.running_var", var), init("conv2.weight", w2),
             init("conv2.bias", b2), init("fc.weight", w3), init("fc.bias", b3)]
    nodes = [
        helper.make_node("Conv", ["x", "conv1.weight", "conv1.bias"], ["c1"], name="conv1", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["c1", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"], ["n1"],
                         name="bn1", epsilon=1e-5),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], name="conv2", kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["z"], name="fc", transB=1),
        helper.make_node("Softmax", ["z"], ["probs"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 28, 28])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10])], inits)

    def reference(x):
        x = x.astype(np.float64)
        h = conv2d(x, w1, b1, 1)
        h = (h - mean.reshape(1, -1, 1, 1)) / np.sqrt(var.reshape(1, -1, 1, 1) + 1e-5) * gamma.reshape(1, -1, 1, 1) + beta.reshape(1, -1, 1, 1)
        h = np.maximum(h, 0)
        n, c, hh, ww = h.shape
        h = h.reshape(n, c, hh // 2, 2, ww // 2, 2).max(axis=(3, 5))
        h = np.maximum(conv2d(h, w2, b2, 0), 0)
        h = h.mean(axis=(2, 3))
        z = h @ w3.T + b3
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)
    return graph, reference, (3, 1, 28, 28)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for name, build, seed in [("mnist_mlp", mlp, 1), ("small_cnn", cnn, 2)]:
        rng = np.random.default_rng(seed)
        graph, reference, in_shape = build(rng)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="volt/models/make_models.py")
        model.ir_version = 8
        onnx.checker.check_model(model)
        onnx.save(model, os.path.join(out_dir, f"{name}.onnx"))
        x = rng.random(in_shape, dtype=np.float32)
        np.save(os.path.join(out_dir, f"{name}.input.npy"), x)
        np.save(os.path.join(out_dir, f"{name}.output.npy"), reference(x).astype(np.float32))
        print(f"wrote {name}.onnx and its reference pair")


if __name__ == "__main__":
    main()
