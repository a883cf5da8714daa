#!/usr/bin/python3
"""Writes the benchmark models into build/zoo/ (never committed), random weights, fixed seeds:

  resnet50.onnx      torchvision ResNet-50, input [N,3,224,224]        (needs python3-torchvision)
  mobilenetv2.onnx   torchvision MobileNetV2, input [N,3,224,224]       (needs python3-torchvision)

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=os.path.join(ROOT, "build", "zoo"))
    ap.add_argument("--models", default="resnet50,mobilenetv2")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    import torchvision  # Debian's python3-torchvision
    for name in args.models.split(","):
        if name == "resnet50":
            export(torchvision.models.resnet50(), os.path.join(args.out, "resnet50.onnx"), (1, 3, 224, 224))
        elif name == "mobilenetv2":
            export(torchvision.models.mobilenet_v2(), os.path.join(args.out, "mobilenetv2.onnx"), (1, 3, 224, 224))
        else:
            raise SystemExit(f"unknown model {name}")


if __name__ == "__main__":
    main()
