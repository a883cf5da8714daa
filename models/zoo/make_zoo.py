#!/usr/bin/python3
"""Writes the benchmark models into build/zoo/ (never committed), random weights, fixed seeds:

  resnet50.onnx      torchvision ResNet-50, input [N,3,224,224]        (needs python3-torchvision)
  mobilenetv2.onnx   torchvision MobileNetV2, input [N,3,224,224]       (needs python3-torchvision)
  bert.onnx          a BERT-base encoder: 12 layers, hidden 768, 12 heads, FFN 3072, GELU,
                     LayerNorm; inputs input_ids and attention_mask, int64 [N,128]
  dlrm.onnx          a DLRM-style recommender: 13 dense features through a 512-256-64 MLP,
                     8 embedding tables of 100,000 x 64 (Gather), concatenation, a 512-256-1
                     MLP; inputs dense float [N,13] and sparse int64 [N,8] (one id per table)

Exported with Debian's python3-torch (opset 13, dynamic batch), as users' models usually are.

  /usr/bin/python3 models/zoo/make_zoo.py [OUT_DIR] [--models resnet50,mobilenetv2]
"""
import argparse
import os

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def export(model, path, shape):
    model.eval()
    torch.onnx.export(model, torch.randn(*shape), path, input_names=["input"], output_names=["output"], opset_version=13,
                      dynamic_axes={"input": {0: "N"}, "output": {0: "N"}}, do_constant_folding=True)
    print(f"wrote {path}")


class BertLayer(torch.nn.Module):
    """One post-norm encoder layer as BERT has it (the ops an exported Hugging Face BERT has)."""

    def __init__(self, hidden=768, heads=12, ffn=3072):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q, self.k, self.v = (torch.nn.Linear(hidden, hidden) for _ in range(3))
        self.out = torch.nn.Linear(hidden, hidden)
        self.norm1, self.norm2 = torch.nn.LayerNorm(hidden, eps=1e-12), torch.nn.LayerNorm(hidden, eps=1e-12)
        self.up, self.down = torch.nn.Linear(hidden, ffn), torch.nn.Linear(ffn, hidden)

    def split(self, x):
        n, s, _ = x.shape
        return x.view(n, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, mask_bias):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / (self.head_dim ** 0.5) + mask_bias
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2)
        ctx = ctx.reshape(x.shape[0], x.shape[1], -1)
        x = self.norm1(x + self.out(ctx))
        return self.norm2(x + self.down(torch.nn.functional.gelu(self.up(x))))


class Bert(torch.nn.Module):
    def __init__(self, vocab=30522, hidden=768, layers=12, max_len=512):
        super().__init__()
        self.words, self.positions = torch.nn.Embedding(vocab, hidden), torch.nn.Embedding(max_len, hidden)
        self.norm = torch.nn.LayerNorm(hidden, eps=1e-12)
        self.layers = torch.nn.ModuleList(BertLayer(hidden) for _ in range(layers))

    def forward(self, input_ids, attention_mask):
        pos = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.norm(self.words(input_ids) + self.positions(pos))
        mask_bias = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        return x


class Dlrm(torch.nn.Module):
    def __init__(self, dense=13, tables=8, rows=100000, dim=64):
        super().__init__()
        mlp = lambda sizes: torch.nn.Sequential(*[m for a, b in zip(sizes, sizes[1:]) for m in (torch.nn.Linear(a, b), torch.nn.ReLU())])
        self.bottom = mlp([dense, 512, 256, dim])
        self.tables = torch.nn.ModuleList(torch.nn.Embedding(rows, dim) for _ in range(tables))
        self.top = torch.nn.Sequential(*list(mlp([dim * (tables + 1), 512, 256]).children()), torch.nn.Linear(256, 1))

    def forward(self, dense, sparse):
        parts = [self.bottom(dense)] + [t(sparse[:, i]) for i, t in enumerate(self.tables)]
        return torch.sigmoid(self.top(torch.cat(parts, dim=1)))


def export_bert(path):
    model = Bert().eval()
    ids, mask = torch.randint(0, 30522, (1, 128)), torch.ones(1, 128, dtype=torch.int64)
    torch.onnx.export(model, (ids, mask), path, input_names=["input_ids", "attention_mask"], output_names=["output"],
                      opset_version=13, do_constant_folding=True,
                      dynamic_axes={"input_ids": {0: "N"}, "attention_mask": {0: "N"}, "output": {0: "N"}})
    print(f"wrote {path}")


def export_dlrm(path):
    model = Dlrm().eval()
    dense, sparse = torch.randn(2, 13), torch.randint(0, 100000, (2, 8))
    torch.onnx.export(model, (dense, sparse), path, input_names=["dense", "sparse"], output_names=["output"],
                      opset_version=13, do_constant_folding=True,
                      dynamic_axes={"dense": {0: "N"}, "sparse": {0: "N"}, "output": {0: "N"}})
    print(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=os.path.join(ROOT, "build", "zoo"))
    ap.add_argument("--models", default="resnet50,mobilenetv2,bert,dlrm")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    for name in args.models.split(","):
        torch.manual_seed(0)
        if name in ("resnet50", "mobilenetv2"):
            import torchvision  # Debian's python3-torchvision
        if name == "resnet50":
            export(torchvision.models.resnet50(), os.path.join(args.out, "resnet50.onnx"), (1, 3, 224, 224))
        elif name == "mobilenetv2":
            export(torchvision.models.mobilenet_v2(), os.path.join(args.out, "mobilenetv2.onnx"), (1, 3, 224, 224))
        elif name == "bert":
            export_bert(os.path.join(args.out, "bert.onnx"))
        elif name == "dlrm":
            export_dlrm(os.path.join(args.out, "dlrm.onnx"))
        else:
            raise SystemExit(f"unknown model {name}")


if __name__ == "__main__":
    main()
