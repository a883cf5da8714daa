#!/usr/bin/python3
"""fp32 ONNX model -> fp16 model, as fp16 converters write them: float initializers, Constant
values and value types become float16; graph inputs and outputs keep float32 and Casts at the
boundary convert them; Casts to float inside the graph cast to float16 instead. Inputs that
the schema types float32 whatever the data (Resize's scales) stay float32.

  /usr/bin/python3 bench/corpus/fp16_convert.py IN.onnx OUT.onnx
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _half_tensor(t):
    a = numpy_helper.to_array(t)
    if a.dtype != np.float32:
        return t
    h = numpy_helper.from_array(a.astype(np.float16), t.name)
    return h


# Inputs that the schema types float32 whatever the data's type: Resize's and Upsample's scales.
KEEP_FLOAT = {"Resize": (2,), "Upsample": (1,)}


def _convert_graph(g, boundary):
    keep = {n.input[i] for n in g.node for i in KEEP_FLOAT.get(n.op_type, ()) if i < len(n.input)}
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT and t.name not in keep:
            g.initializer[i].CopyFrom(_half_tensor(t))
    for vi in g.value_info:
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT and vi.name not in keep:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT16
    for n in g.node:
        if any(o in keep for o in n.output):
            continue
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(_half_tensor(a.t))
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16
            if a.type == onnx.AttributeProto.GRAPH:
                _convert_graph(a.g, False)
            if a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    _convert_graph(sub, False)
    if not boundary:
        for v in list(g.input) + list(g.output):
            if v.type.tensor_type.elem_type == TensorProto.FLOAT:
                v.type.tensor_type.elem_type = TensorProto.FLOAT16
        return

    def rename(old, new, outputs):
        for n in g.node:
            fields = (n.input, n.output) if outputs else (n.input,)
            for names in fields:
                for i, x in enumerate(names):
                    if x == old:
                        names[i] = new

    floats = lambda vs: [v for v in vs if v.type.tensor_type.elem_type == TensorProto.FLOAT]
    casts_in, casts_out = [], []
    for v in floats(g.input):
        rename(v.name, v.name + "_fp16", False)
        casts_in.append(helper.make_node("Cast", [v.name], [v.name + "_fp16"], to=TensorProto.FLOAT16,
                                         name=v.name + "_fp16"))
    for v in floats(g.output):
        rename(v.name, v.name + "_fp16", True)
        casts_out.append(helper.make_node("Cast", [v.name + "_fp16"], [v.name], to=TensorProto.FLOAT,
                                          name=v.name + "_cast"))
    nodes = casts_in + list(g.node) + casts_out
    del g.node[:]
    g.node.extend(nodes)


def convert(src, dst):
    m = onnx.load(src)
    m = onnx.shape_inference.infer_shapes(m)
    _convert_graph(m.graph, True)
    onnx.checker.check_model(m)
    onnx.save(m, dst)


if __name__ == "__main__":
    convert(sys.argv[1], sys.argv[2])
