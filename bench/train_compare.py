#!/usr/bin/python3
"""Training-step time, volt vs PyTorch CPU, side by side in one run.

A step is forward, backward and an SGD-with-momentum update (lr 0.01, momentum 0.9) with
softmax cross-entropy, on random data, for the same weights and threads:
  mlp     784-512-256-10 MLP (Gemm + Relu), batch 64
  lenet   LeNet-5 style CNN on 1x28x28 (Conv5-Relu-MaxPool x2, then 120-84-10), batch 32
  resnet18  torchvision ResNet-18 on 3x224x224 (10 classes), batch 32 (not in the default list:
          about 2 s a step on two cores; run it with --models resnet18 --iterations 3)
  lstm    2-layer bidirectional LSTM, hidden 256, 100 steps of 80 features, batch 32, last step
          into a 10-way Linear (not in the default list either: --models lstm --iterations 3)
Runs alternate (volt, torch, volt, torch ...) and each side reports the median of its rounds'
medians. Needs Debian's python3-torch and python3-onnx; PyTorch runs on OpenBLAS (OpenMP).

  /usr/bin/python3 bench/train_compare.py [--threads 2] [--rounds 3] [--iterations 20] [--models mlp,lenet]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
if os.path.isdir(OPENBLAS) and OPENBLAS not in os.environ.get("LD_LIBRARY_PATH", ""):
    os.environ["LD_LIBRARY_PATH"] = OPENBLAS + ":" + os.environ.get("LD_LIBRARY_PATH", "")
    os.execv(sys.executable, [sys.executable] + sys.argv)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mlp(rng):
    sizes = [784, 512, 256, 10]
    layers, inits, nodes, prev = [], [], [], "x"
    for i in range(3):
        w = (rng.standard_normal((sizes[i + 1], sizes[i])) * np.sqrt(2 / sizes[i])).astype(np.float32)
        b = np.zeros(sizes[i + 1], np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        out = "y" if i == 2 else f"h{i}"
        nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [out], transB=1))
        if i < 2:
            nodes.append(helper.make_node("Relu", [out], [f"r{i}"]))
            prev = f"r{i}"
        lin = torch.nn.Linear(sizes[i], sizes[i + 1])
        lin.weight.data = torch.from_numpy(w.copy())
        lin.bias.data = torch.from_numpy(b.copy())
        layers += [lin] + ([torch.nn.ReLU()] if i < 2 else [])
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 784])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    return graph, torch.nn.Sequential(*layers), [64, 784]


def lenet(rng):
    def conv(cin, cout, k, name):
        w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2 / (cin * k * k))).astype(np.float32)
        b = np.zeros(cout, np.float32)
        m = torch.nn.Conv2d(cin, cout, k)
        m.weight.data, m.bias.data = torch.from_numpy(w.copy()), torch.from_numpy(b.copy())
        return [numpy_helper.from_array(w, name + ".w"), numpy_helper.from_array(b, name + ".b")], m

    def fc(cin, cout, name):
        w = (rng.standard_normal((cout, cin)) * np.sqrt(2 / cin)).astype(np.float32)
        b = np.zeros(cout, np.float32)
        m = torch.nn.Linear(cin, cout)
        m.weight.data, m.bias.data = torch.from_numpy(w.copy()), torch.from_numpy(b.copy())
        return [numpy_helper.from_array(w, name + ".w"), numpy_helper.from_array(b, name + ".b")], m

    i1, c1 = conv(1, 6, 5, "c1")
    i2, c2 = conv(6, 16, 5, "c2")
    i3, f1 = fc(256, 120, "f1")
    i4, f2 = fc(120, 84, "f2")
    i5, f3 = fc(84, 10, "f3")
    pool = dict(kernel_shape=[2, 2], strides=[2, 2])
    nodes = [
        helper.make_node("Conv", ["x", "c1.w", "c1.b"], ["a1"]), helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], **pool),
        helper.make_node("Conv", ["p1", "c2.w", "c2.b"], ["a2"]), helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p2"], **pool), helper.make_node("Flatten", ["p2"], ["f"]),
        helper.make_node("Gemm", ["f", "f1.w", "f1.b"], ["g1"], transB=1), helper.make_node("Relu", ["g1"], ["q1"]),
        helper.make_node("Gemm", ["q1", "f2.w", "f2.b"], ["g2"], transB=1), helper.make_node("Relu", ["g2"], ["q2"]),
        helper.make_node("Gemm", ["q2", "f3.w", "f3.b"], ["y"], transB=1),
    ]
    graph = helper.make_graph(nodes, "lenet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 28, 28])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], i1 + i2 + i3 + i4 + i5)
    net = torch.nn.Sequential(c1, torch.nn.ReLU(), torch.nn.MaxPool2d(2), c2, torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Flatten(), f1, torch.nn.ReLU(), f2, torch.nn.ReLU(), f3)
    return graph, net, [32, 1, 28, 28]


def torch_step_ms(net, shape, iterations, warmup=3):
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(*shape)
    y = torch.randint(0, 10, (shape[0],))
    times = []
    for i in range(warmup + iterations):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def resnet18(rng):
    """torchvision's ResNet-18 (10 classes) at batch 32, 3x224x224: exported in evaluation form
    (BatchNormalization with running statistics); volt's trainer, like torch's train(), uses batch
    statistics in training."""
    import io
    import torchvision  # Debian's python3-torchvision
    torch.manual_seed(int(rng.integers(1 << 30)))
    net = torchvision.models.resnet18(num_classes=10)
    buf = io.BytesIO()
    torch.onnx.export(net.eval(), torch.randn(1, 3, 224, 224), buf, opset_version=13,
                      do_constant_folding=False, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    return onnx.load_from_string(buf.getvalue()).graph, net.train(), [32, 3, 224, 224]


def lstm(rng):
    """A speech-style recurrent classifier: a 2-layer bidirectional LSTM (hidden 256) over 100
    steps of 80 features, batch 32, its last step into a 10-way linear layer."""
    import io
    torch.manual_seed(int(rng.integers(1 << 30)))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.LSTM(80, 256, num_layers=2, bidirectional=True, batch_first=True)
            self.out = torch.nn.Linear(512, 10)

        def forward(self, x):
            return self.out(self.rnn(x)[0][:, -1])

    net = Net()
    buf = io.BytesIO()
    torch.onnx.export(net.eval(), torch.randn(32, 100, 80), buf, opset_version=13,
                      input_names=["x"], output_names=["y"])
    return onnx.load_from_string(buf.getvalue()).graph, net.train(), [32, 100, 80]


def volt_step_ms(binary, model_path, shape, threads, iterations):
    out = subprocess.run([binary, model_path, "x".join(map(str, shape)), "10", "--optimizer", "sgd", "--momentum", "0.9",
                          "--learning-rate", "0.01", "--threads", str(threads), "--iterations", str(iterations)],
                         check=True, capture_output=True, text=True).stdout
    return float(out.split("median=")[1].split()[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--models", default="mlp,lenet")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bin", "volt_train_step"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    builders = {"mlp": mlp, "lenet": lenet, "resnet18": resnet18, "lstm": lstm}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            graph, net, shape = builders[name](np.random.default_rng(0))
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
            model.ir_version = 8
            path = os.path.join(tmp, name + ".onnx")
            onnx.save(model, path)
            v, t = [], []
            for _ in range(args.rounds):
                v.append(volt_step_ms(args.binary, path, shape, args.threads, args.iterations))
                t.append(torch_step_ms(net, shape, args.iterations))
            rows.append((name, shape[0], statistics.median(v), statistics.median(t)))
    print(f"training step, SGD momentum 0.9, {args.threads} threads, median of {args.rounds} alternating rounds x {args.iterations} steps")
    print(f"{'model':<8} {'batch':>5} {'volt ms':>10} {'torch ms':>10} {'volt/torch':>11}")
    for name, batch, v, t in rows:
        print(f"{name:<8} {batch:>5} {v:>10.3f} {t:>10.3f} {v / t:>11.2f}")


if __name__ == "__main__":
    main()
