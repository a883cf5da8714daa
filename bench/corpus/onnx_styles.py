"""Corpus models written with python3-onnx in the styles exporters other than torch.onnx
produce. Each function writes the model to `path` and returns its recipe (make_corpus.recipe)."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(0)


def _w(name, *shape, scale=None):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    scale = scale or (2.0 / fan_in) ** 0.5
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def _c(name, values, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def _save(path, nodes, inputs, outputs, inits, opset=13):
    g = helper.make_graph(nodes, "corpus", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="volt-corpus")
    m.ir_version = 7
    onnx.checker.check_model(m)
    onnx.save(m, path)


def _recipe(inputs, batches, note):
    return {"inputs": [{"name": n, "shape": s, "dtype": d, "range": r} for n, s, d, r in inputs],
            "batches": batches, "note": note}


def keras_nhwc(path):
    """tf2onnx/keras style: NHWC input, a Transpose before and after every convolution."""
    nodes, inits = [], []
    x, c = "input", 3
    for i, (co, stride) in enumerate([(32, 2), (64, 1), (64, 2), (128, 1), (128, 2), (256, 1)]):
        nodes.append(helper.make_node("Transpose", [x], [f"t{i}"], perm=[0, 3, 1, 2]))
        inits += [_w(f"w{i}", co, c, 3, 3), _c(f"b{i}", np.zeros(co))]
        nodes.append(helper.make_node("Conv", [f"t{i}", f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1],
                                      strides=[stride, stride]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        nodes.append(helper.make_node("Transpose", [f"r{i}"], [f"x{i}"], perm=[0, 2, 3, 1]))
        x, c = f"x{i}", co
    nodes.append(helper.make_node("ReduceMean", [x], ["pooled"], axes=[1, 2], keepdims=0))
    inits += [_w("fc", c, 10), _c("fcb", np.zeros(10))]
    nodes.append(helper.make_node("MatMul", ["pooled", "fc"], ["logits0"]))
    nodes.append(helper.make_node("Add", ["logits0", "fcb"], ["logits"]))
    _save(path, nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["B", 224, 224, 3])],
          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", 10])], inits)
    return _recipe([("input", ["B", 224, 224, 3], "float32", (0, 1))], [1, 8], "NHWC, Transposes around convs")


def decomposed_activations(path):
    """HardSwish as x * Clip(x + 3, 0, 6) / 6, HardSigmoid as Clip(x / 6 + 0.5), SiLU as
    x * Sigmoid(x): the elementwise chains converters write for them."""
    nodes, inits = [], [_c("three", 3.0), _c("six", 6.0), _c("zero", 0.0), _c("half", 0.5), _c("one", 1.0)]
    x, c = "input", 3
    for i, co in enumerate([16, 32, 64, 96]):
        inits += [_w(f"w{i}", co, c, 3, 3), _c(f"b{i}", np.zeros(co))]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1], strides=[2, 2]))
        if i % 3 == 0:  # HardSwish
            nodes += [helper.make_node("Add", [f"c{i}", "three"], [f"a{i}"]),
                      helper.make_node("Clip", [f"a{i}", "zero", "six"], [f"k{i}"]),
                      helper.make_node("Mul", [f"c{i}", f"k{i}"], [f"m{i}"]),
                      helper.make_node("Div", [f"m{i}", "six"], [f"y{i}"])]
        elif i % 3 == 1:  # SiLU
            nodes += [helper.make_node("Sigmoid", [f"c{i}"], [f"s{i}"]),
                      helper.make_node("Mul", [f"c{i}", f"s{i}"], [f"y{i}"])]
        else:  # HardSigmoid gate
            nodes += [helper.make_node("Div", [f"c{i}", "six"], [f"d{i}"]),
                      helper.make_node("Add", [f"d{i}", "half"], [f"e{i}"]),
                      helper.make_node("Clip", [f"e{i}", "zero", "one"], [f"g{i}"]),
                      helper.make_node("Mul", [f"c{i}", f"g{i}"], [f"y{i}"])]
        x, c = f"y{i}", co
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["output"]))
    _save(path, nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["B", 3, 224, 224])],
          [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["B", c, 1, 1])], inits)
    return _recipe([("input", ["B", 3, 224, 224], "float32", (-1, 1))], [1, 8], "elementwise chains")


def resize_scales(path):
    """A small decoder upsampling with Resize by scales: nearest, then linear (half_pixel)."""
    nodes, inits = [], [_c("roi", []), _c("s2", [1, 1, 2, 2])]
    x, c = "input", 64
    for i, (co, mode) in enumerate([(64, "nearest"), (32, "linear"), (16, "linear"), (8, "nearest")]):
        nodes.append(helper.make_node("Resize", [x, "roi", "s2"], [f"u{i}"], mode=mode,
                                      coordinate_transformation_mode="half_pixel" if mode == "linear" else "asymmetric",
                                      nearest_mode="floor"))
        inits += [_w(f"w{i}", co, c, 3, 3), _c(f"b{i}", np.zeros(co))]
        nodes.append(helper.make_node("Conv", [f"u{i}", f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        x, c = f"r{i}", co
    _save(path, nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["B", 64, 14, 14])],
          [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["B", c, 224, 224])], inits)
    return _recipe([("input", ["B", 64, 14, 14], "float32", (0, 1))], [1, 8], "Resize by scales")


def unfolded_bn_pad(path):
    """BatchNormalization left unfolded after each convolution, and an explicit Pad before it."""
    nodes, inits = [], []
    x, c = "input", 3
    for i, co in enumerate([32, 64, 128, 128]):
        inits += [_c(f"pads{i}", [0, 0, 1, 1, 0, 0, 1, 1], np.int64)]
        nodes.append(helper.make_node("Pad", [x, f"pads{i}"], [f"p{i}"], mode="constant"))
        inits += [_w(f"w{i}", co, c, 3, 3), _c(f"sc{i}", RNG.uniform(0.5, 1.5, co)), _c(f"bi{i}", RNG.uniform(-.1, .1, co)),
                  _c(f"mu{i}", RNG.uniform(-.1, .1, co)), _c(f"var{i}", RNG.uniform(0.5, 1.5, co))]
        nodes.append(helper.make_node("Conv", [f"p{i}", f"w{i}"], [f"c{i}"], strides=[2, 2]))
        nodes.append(helper.make_node("BatchNormalization", [f"c{i}", f"sc{i}", f"bi{i}", f"mu{i}", f"var{i}"], [f"n{i}"]))
        nodes.append(helper.make_node("Relu", [f"n{i}"], [f"r{i}"]))
        x, c = f"r{i}", co
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["output"]))
    _save(path, nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["B", 3, 224, 224])],
          [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["B", c, 1, 1])], inits)
    return _recipe([("input", ["B", 3, 224, 224], "float32", (0, 1))], [1, 8], "BatchNorm unfolded, Pad nodes")


def opset9_upsample(path):
    """Opset 9 forms: Upsample with a scales input, Slice with attributes, Flatten, Gemm."""
    nodes, inits = [], [_c("scales", [1, 1, 2, 2])]
    inits += [_w("w0", 32, 3, 3, 3), _c("b0", np.zeros(32)), _w("w1", 16, 32, 3, 3), _c("b1", np.zeros(16))]
    nodes += [helper.make_node("Conv", ["input", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1], strides=[2, 2]),
              helper.make_node("Relu", ["c0"], ["r0"]),
              helper.make_node("Upsample", ["r0", "scales"], ["u0"], mode="nearest"),
              helper.make_node("Slice", ["u0"], ["s0"], starts=[8, 8], ends=[120, 120], axes=[2, 3]),
              helper.make_node("Conv", ["s0", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[4, 4]),
              helper.make_node("Relu", ["c1"], ["r1"]),
              helper.make_node("MaxPool", ["r1"], ["m1"], kernel_shape=[2, 2], strides=[2, 2]),
              helper.make_node("Flatten", ["m1"], ["f"], axis=1)]
    inits += [_w("fc", 10, 16 * 14 * 14), _c("fcb", np.zeros(10))]
    nodes.append(helper.make_node("Gemm", ["f", "fc", "fcb"], ["output"], transB=1))
    _save(path, nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["B", 3, 128, 128])],
          [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["B", 10])], inits, opset=9)
    return _recipe([("input", ["B", 3, 128, 128], "float32", (0, 1))], [1, 8], "opset 9")


def tiny_op_chain(path):
    """500 tiny nodes (Add and Mul by constants on [1, 16]): per-node overhead, not arithmetic."""
    nodes, inits = [], [_c("a", RNG.uniform(-0.01, 0.01, 16)), _c("m", RNG.uniform(0.99, 1.01, 16))]
    x = "input"
    for i in range(500):
        op, c = ("Add", "a") if i % 2 == 0 else ("Mul", "m")
        nodes.append(helper.make_node(op, [x, c], [f"v{i}"]))
        x = f"v{i}"
    nodes.append(helper.make_node("Identity", [x], ["output"]))
    _save(path, nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 16])],
          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 16])], inits)
    return _recipe([("input", [1, 16], "float32", (-1, 1))], [1], "per-node overhead")
