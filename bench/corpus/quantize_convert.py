#!/usr/bin/python3
"""fp32 ONNX model -> 8-bit model, in the forms quantization tools write (no quantization
package is available here, so this is the converter):

  dynamic   DynamicQuantizeLinear before each Conv / MatMul / Gemm with constant weights, then
            ConvInteger (uint8 weights, zero point 128: ONNX Runtime's ConvInteger takes no int8
            weights) or MatMulInteger (int8 weights), Cast, Mul by x_scale * w_scale, Add bias.
  qdq       static: QuantizeLinear/DequantizeLinear pairs on the activations that feed Conv,
            MatMul, Gemm and Add (and on Add's output), int8 weights per output channel with a
            DequantizeLinear, int32 biases; activation ranges calibrated on the given inputs.
  qlinear   static, operator form: QLinearConv (the Relu or Clip after it folded into its output
            range) and QLinearMatMul, QuantizeLinear/DequantizeLinear where float ops meet them.

Weights are symmetric int8 per output channel (scale = max|w| / 127). Activation ranges are
min/max over the calibration batch, widened to include 0, uint8 with a zero point.

  /usr/bin/python3 bench/corpus/quantize_convert.py IN.onnx OUT.onnx --mode dynamic
  /usr/bin/python3 bench/corpus/quantize_convert.py IN.onnx OUT.onnx --mode qdq --calibrate NAME=FILE.npy ...
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


class Graph:
    """The main graph with lookups: constants, producers, consumers; fresh names."""

    def __init__(self, model):
        self.model = model
        self.g = model.graph
        self.inits = {t.name: t for t in self.g.initializer}
        self.counter = 0

    def const(self, name):
        t = self.inits.get(name)
        if t is not None:
            return numpy_helper.to_array(t)
        for n in self.g.node:
            if n.op_type == "Constant" and n.output[0] == name:
                for a in n.attribute:
                    if a.name == "value":
                        return numpy_helper.to_array(a.t)
        return None

    def fresh(self, base):
        self.counter += 1
        return f"{base}_q{self.counter}"

    def add_init(self, base, array):
        name = self.fresh(base)
        self.g.initializer.append(numpy_helper.from_array(array, name))
        self.inits[name] = self.g.initializer[-1]
        return name

    def consumers(self):
        c = {}
        for n in self.g.node:
            for i in n.input:
                c.setdefault(i, []).append(n)
        return c


def weight_scales(w, axis):
    """Symmetric int8 per channel along `axis`."""
    other = tuple(d for d in range(w.ndim) if d != axis)
    amax = np.max(np.abs(w), axis=other) if other else np.abs(w)
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


def activation_params(lo, hi):
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = (hi - lo) / 255.0 if hi > lo else 1.0
    zp = int(np.clip(np.rint(-lo / scale), 0, 255))
    return np.float32(scale), np.uint8(zp)


def linear_weights(q, n):
    """(W [K, N] float, bias or None) of a MatMul / Gemm with constant weights; None otherwise."""
    if n.op_type == "MatMul":
        w = q.const(n.input[1])
        return (w, None) if w is not None and w.dtype == np.float32 and w.ndim == 2 else None
    if n.op_type == "Gemm":
        a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
        if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
            return None
        w = q.const(n.input[1])
        if w is None or w.dtype != np.float32 or w.ndim != 2:
            return None
        if a.get("transB", 0):
            w = w.T
        b = q.const(n.input[2]) if len(n.input) > 2 and n.input[2] else None
        if len(n.input) > 2 and n.input[2] and (b is None or b.ndim != 1):
            return None
        return np.ascontiguousarray(w), b
    return None


def conv_weights(q, n):
    if n.op_type != "Conv":
        return None
    w = q.const(n.input[1])
    if w is None or w.dtype != np.float32 or w.ndim < 3:
        return None
    b = q.const(n.input[2]) if len(n.input) > 2 and n.input[2] else None
    return w, b


# --- dynamic ---------------------------------------------------------------------------------

def to_dynamic(model):
    q = Graph(model)
    out_nodes, dql = [], {}

    def quantized_input(x):
        if x not in dql:
            names = (q.fresh(x + "_quant"), q.fresh(x + "_scale"), q.fresh(x + "_zp"))
            out_nodes.append(helper.make_node("DynamicQuantizeLinear", [x], list(names)))
            dql[x] = names
        return dql[x]

    for n in q.g.node:
        cw, lw = conv_weights(q, n), linear_weights(q, n)
        if cw is None and lw is None:
            out_nodes.append(n)
            continue
        xq, xs, xz = quantized_input(n.input[0])
        if cw is not None:
            w, b = cw
            wq, ws = weight_scales(w, 0)
            w_name = q.add_init(n.name + "_w", (wq.astype(np.int16) + 128).astype(np.uint8))
            wz = q.add_init(n.name + "_wz", np.array(128, np.uint8))
            acc = q.fresh(n.output[0] + "_acc")
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            out_nodes.append(helper.make_node("ConvInteger", [xq, w_name, xz, wz], [acc], **attrs))
            shape = [1, -1] + [1] * (w.ndim - 2)
        else:
            w, b = lw
            wq, ws = weight_scales(w, 1)
            w_name = q.add_init(n.name + "_w", wq)
            acc = q.fresh(n.output[0] + "_acc")
            out_nodes.append(helper.make_node("MatMulInteger", [xq, w_name, xz], [acc]))
            shape = [-1]
        accf, scale, scaled = q.fresh(acc + "_f"), q.fresh(acc + "_scale"), q.fresh(acc + "_scaled")
        out_nodes.append(helper.make_node("Cast", [acc], [accf], to=TensorProto.FLOAT))
        ws_name = q.add_init(n.name + "_ws", ws.reshape(shape))
        out_nodes.append(helper.make_node("Mul", [xs, ws_name], [scale]))
        if b is None:
            out_nodes.append(helper.make_node("Mul", [accf, scale], [n.output[0]]))
        else:
            out_nodes.append(helper.make_node("Mul", [accf, scale], [scaled]))
            b_name = q.add_init(n.name + "_b", b.astype(np.float32).reshape(shape))
            out_nodes.append(helper.make_node("Add", [scaled, b_name], [n.output[0]]))
    del q.g.node[:]
    q.g.node.extend(out_nodes)
    return model


# --- calibration -----------------------------------------------------------------------------

def calibrate(model, names, feeds):
    """min/max of each tensor in `names` over the calibration inputs, by ONNX Runtime."""
    import compare
    module = compare.ensure_ort()
    m = onnx.ModelProto()
    m.CopyFrom(model)
    names = [x for x in names if x not in {o.name for o in m.graph.output}] + [o.name for o in m.graph.output]
    del m.graph.output[:]
    exposed = {}
    for i, x in enumerate(names):
        out = f"calib_{i}"
        m.graph.node.append(helper.make_node("Identity", [x], [out]))
        m.graph.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, None))
        exposed[x] = out
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "calib.onnx")
        onnx.save(m, path, save_as_external_data=m.ByteSize() > 1.8e9)
        out_dir = os.path.join(tmp, "out")
        os.makedirs(out_dir)
        compare.ort_run(module, path, {k: (v, None, None) for k, v in feeds.items()}, 2, 1, out_dir)
        ranges = {}
        for x, out in exposed.items():
            f = os.path.join(out_dir, out + ".npy")
            if os.path.exists(f):
                a = np.load(f)
                ranges[x] = (float(a.min()), float(a.max())) if a.size else (0.0, 0.0)
    return ranges


# --- static ----------------------------------------------------------------------------------

def activation_inputs(q):
    """The float activations static quantization needs ranges for."""
    names = []
    for n in q.g.node:
        if conv_weights(q, n) is not None or linear_weights(q, n) is not None:
            names.append(n.input[0])
            names.append(n.output[0])
        elif n.op_type == "Add" and all(q.const(i) is None for i in n.input):
            names.extend(list(n.input) + [n.output[0]])
        elif n.op_type in ("Relu", "Clip"):
            names.append(n.output[0])
    return list(dict.fromkeys(names))


def to_qdq(model, feeds):
    q = Graph(model)
    ranges = calibrate(model, activation_inputs(q), feeds)
    out_nodes, qdq = [], {}

    def dq_of(x):
        """x through a Q/DQ pair (one per tensor); x itself if it has no range."""
        if x not in ranges:
            return x, None
        if x not in qdq:
            s, z = activation_params(*ranges[x])
            sn, zn = q.add_init(x + "_s", np.array(s)), q.add_init(x + "_z", np.array(z))
            xq, xd = q.fresh(x + "_quant"), q.fresh(x + "_dequant")
            out_nodes.append(helper.make_node("QuantizeLinear", [x, sn, zn], [xq]))
            out_nodes.append(helper.make_node("DequantizeLinear", [xq, sn, zn], [xd]))
            qdq[x] = (xd, s)
        return qdq[x]

    for n in q.g.node:
        cw, lw = conv_weights(q, n), linear_weights(q, n)
        if cw is None and lw is None:
            if n.op_type == "Add" and all(q.const(i) is None for i in n.input) and n.output[0] in ranges:
                ins = [dq_of(i)[0] for i in n.input]
                raw = q.fresh(n.output[0] + "_raw")
                out_nodes.append(helper.make_node("Add", ins, [raw], name=n.name))
                ranges[raw] = ranges[n.output[0]]
                xd, _ = dq_of(raw)
                out_nodes.append(helper.make_node("Identity", [xd], [n.output[0]]))
                continue
            # Readers of quantized tensors that are float ops read the tensor itself.
            out_nodes.append(n)
            continue
        x = n.input[0]
        xd, xs = dq_of(x)
        if xs is None:
            out_nodes.append(n)
            continue
        w, b = cw if cw is not None else lw
        axis = 0 if cw is not None else 1
        wq, ws = weight_scales(w, axis)
        wn = q.add_init(n.name + "_w", wq)
        wsn = q.add_init(n.name + "_ws", ws)
        wzn = q.add_init(n.name + "_wz", np.zeros(ws.shape, np.int8))
        wd = q.fresh(n.name + "_wd")
        out_nodes.append(helper.make_node("DequantizeLinear", [wn, wsn, wzn], [wd], axis=axis))
        ins = [xd, wd]
        if b is not None:
            bs = (xs * ws).astype(np.float32)
            bq = np.rint(b / bs).astype(np.int32)
            bn, bsn = q.add_init(n.name + "_b", bq), q.add_init(n.name + "_bs", bs)
            bd = q.fresh(n.name + "_bd")
            out_nodes.append(helper.make_node("DequantizeLinear", [bn, bsn], [bd], axis=0))
            ins.append(bd)
        if cw is not None:
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            out_nodes.append(helper.make_node("Conv", ins, list(n.output), name=n.name, **attrs))
        elif b is None:
            out_nodes.append(helper.make_node("MatMul", ins, list(n.output), name=n.name))
        else:
            out_nodes.append(helper.make_node("Gemm", ins, list(n.output), name=n.name))
    del q.g.node[:]
    q.g.node.extend(out_nodes)
    return model


def to_qlinear(model, feeds):
    q = Graph(model)
    ranges = calibrate(model, activation_inputs(q), feeds)
    consumers = q.consumers()
    out_nodes, quant, params = [], {}, {}
    taken = set()

    def params_of(x):
        if x not in params:
            s, z = activation_params(*ranges[x])
            params[x] = (q.add_init(x + "_s", np.array(s)), q.add_init(x + "_z", np.array(z)), s)
        return params[x]

    def quantized(x):
        if x not in quant:
            sn, zn, _ = params_of(x)
            xq = q.fresh(x + "_quant")
            out_nodes.append(helper.make_node("QuantizeLinear", [x, sn, zn], [xq]))
            quant[x] = xq
        return quant[x]

    for n in q.g.node:
        if n.name and n.name in taken:
            continue
        cw = conv_weights(q, n)
        lw = linear_weights(q, n) if n.op_type == "MatMul" else None
        if (cw is None and lw is None) or n.input[0] not in ranges:
            out_nodes.append(n)
            continue
        # The Relu or Clip after it becomes its output range (uint8 saturates at 0 and at the
        # range's top).
        y = n.output[0]
        follow = consumers.get(y, [])
        fused = None
        if len(follow) == 1 and follow[0].op_type in ("Relu", "Clip") and follow[0].output[0] in ranges:
            fused = follow[0]
            y = fused.output[0]
        if y not in ranges:
            out_nodes.append(n)
            continue
        xs = params_of(n.input[0])[2]
        xq = quantized(n.input[0])
        w, b = cw if cw is not None else lw
        axis = 0 if cw is not None else 1
        wq, ws = weight_scales(w, axis)
        if lw is not None:  # QLinearMatMul: one scale for B
            wq, ws1 = weight_scales(w.reshape(1, -1), 0)
            wq, ws = wq.reshape(w.shape), ws1
        ysn, yzn, _ = params_of(y)
        wn, wsn = q.add_init(n.name + "_w", wq), q.add_init(n.name + "_ws", ws)
        wzn = q.add_init(n.name + "_wz", np.zeros(ws.shape, np.int8))
        sn, zn, _ = params_of(n.input[0])
        yq = q.fresh(y + "_quant")
        ins = [xq, sn, zn, wn, wsn, wzn, ysn, yzn]
        if cw is not None:
            if b is not None:
                ins.append(q.add_init(n.name + "_b", np.rint(b / (xs * ws)).astype(np.int32)))
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            out_nodes.append(helper.make_node("QLinearConv", ins, [yq], name=n.name, **attrs))
        else:
            out_nodes.append(helper.make_node("QLinearMatMul", ins, [yq], name=n.name))
        quant[y] = yq
        if fused is not None and fused.name:
            taken.add(fused.name)
        elif fused is not None:
            fused.name = q.fresh("fused")
            taken.add(fused.name)
        # Float readers read it dequantized.
        out_nodes.append(helper.make_node("DequantizeLinear", [yq, ysn, yzn], [y]))
    del q.g.node[:]
    q.g.node.extend(out_nodes)
    return model


def drop_unread(model):
    """Initializers no node reads any more (the float weights that were quantized)."""
    read = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    for a in [n for n in model.graph.node]:
        for attr in a.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                read |= {i for n in attr.g.node for i in n.input}
    kept = [t for t in model.graph.initializer if t.name in read]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)


def convert(src, dst, mode, feeds=None):
    model = onnx.load(src)
    if mode == "dynamic":
        model = to_dynamic(model)
    elif mode == "qdq":
        model = to_qdq(model, feeds)
    elif mode == "qlinear":
        model = to_qlinear(model, feeds)
    else:
        raise ValueError(mode)
    drop_unread(model)
    onnx.save(model, dst)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--mode", choices=("dynamic", "qdq", "qlinear"), required=True)
    ap.add_argument("--calibrate", action="append", default=[], metavar="NAME=FILE.npy")
    a = ap.parse_args()
    feeds = dict(spec.split("=", 1) for spec in a.calibrate)
    if a.mode != "dynamic" and not feeds:
        ap.error("static modes need --calibrate inputs")
    convert(a.src, a.dst, a.mode, feeds)


if __name__ == "__main__":
    main()
