#!/usr/bin/python3
"""Writes the real-model corpus into build/corpus/ (never committed): architectures of different
provenance and style, random weights from fixed seeds, no network. Each model gets a JSON recipe
beside it (inputs: name, shape per batch, dtype, value range; batches) that run_corpus.py reads.

  torchvision (python3-torchvision), exported by torch.onnx at opsets 11, 13 and 17;
  hand-written torch modules (U-Net with ConvTranspose decoders, LSTM/GRU speech model, log-mel
  front end, GPT-2-style decoder step with past key/values, scripted control flow, a text
  classifier with a dynamic sequence axis, a wav2vec2-style encoder of strided 1-D convolutions
  with a Conformer block);
  graphs written with python3-onnx in the styles other exporters produce (NHWC with Transposes
  around every convolution, decomposed HardSwish/HardSigmoid, Resize by scales, BatchNorm not
  folded, Pad before convolutions, opset 9 Upsample and attribute Slice);
  and fp16 variants of some of them (fp16_convert.py: weights and activations in float16,
  Casts at the boundary, as fp16 converters write them).

  /usr/bin/python3 bench/corpus/make_corpus.py [OUT_DIR] [--models a,b] [--list]
"""
import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)


def recipe(inputs, batches, note="", dynamic=None):
    """inputs: [(name, shape with 'B' for the batch, dtype, (lo, hi))]. dynamic: the model's
    variable axis, for dynamic_shapes.py: {"axis": [[input, axis], ...] (inputs that share it),
    "range": [lo, hi], "multiple": m} (sizes lo..hi, multiples of m)."""
    r = {"inputs": [{"name": n, "shape": s, "dtype": d, "range": r} for n, s, d, r in inputs],
         "batches": batches, "note": note}
    if dynamic:
        r["dynamic"] = dynamic
    return r


def image(size=224, channels=3, batches=(1, 8), name="input"):
    return recipe([(name, ["B", channels, size, size], "float32", (0, 1))], list(batches))


# --- torchvision --------------------------------------------------------------------------------

def torch_export(model, args, path, opset, input_names, output_names, dynamic_axes):
    import torch
    model.eval()
    # With gradients enabled: under no_grad, torch's attention modules take a fused fast path
    # (aten::_native_multi_head_attention) that the ONNX exporter cannot write.
    torch.onnx.export(model, args, path, opset_version=opset, input_names=input_names,
                      output_names=output_names, dynamic_axes=dynamic_axes, do_constant_folding=True)


def signal_carrying(model):
    """Convolution and linear weights drawn with He's fan-in scale. GoogLeNet's own
    initialization (a truncated normal of deviation 0.01) makes its deep activations vanish: its
    output was the classifier's bias for any input (two random images 6e-14 apart), so comparing
    runtimes' outputs on it proved nothing."""
    import torch
    for module in model.modules():
        if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
            torch.nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
    return model


def torchvision_model(name, opset, size=224, builder=None, batches=(1, 8), out_key=None):
    def make(path):
        import torch
        import torchvision
        torch.manual_seed(0)
        m = builder() if builder else getattr(torchvision.models, name)(weights=None)
        if out_key:  # segmentation models return a dict
            inner = m

            class Out(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.m = inner

                def forward(self, x):
                    return self.m(x)[out_key]
            m = Out()
        torch_export(m, torch.rand(1, 3, size, size), path, opset, ["input"], ["output"],
                     {"input": {0: "B"}, "output": {0: "B"}})
        return image(size, batches=batches)
    return make


def video_r3d(path):
    import torch
    import torchvision
    torch.manual_seed(0)
    m = torchvision.models.video.r3d_18(weights=None)
    torch_export(m, torch.rand(1, 3, 8, 112, 112), path, 13, ["input"], ["output"],
                 {"input": {0: "B"}, "output": {0: "B"}})
    return recipe([("input", ["B", 3, 8, 112, 112], "float32", (0, 1))], [1, 2])


def ssdlite(path):
    """SSDLite's detection post-processing: per-class TopK over 90 classes, then torchvision's
    batched NMS (every class shifted to a region of its own) on ~27000 candidates, inside an If.
    Weights drawn with He's fan-in scale: with torchvision's initialization every class scores
    1/91 and the selection is decided by ties."""
    import torch
    import torchvision
    torch.manual_seed(0)
    m = signal_carrying(torchvision.models.detection.ssdlite320_mobilenet_v3_large(
        weights=None, weights_backbone=None))
    m.eval()
    # (The model takes a list of images: the list is the one positional argument.)
    torch_export(m, ([torch.rand(3, 320, 320)],), path, 13, ["input"], ["boxes", "scores", "labels"], None)
    return recipe([("input", [3, 320, 320], "float32", (0, 1))], [1], "detection post-processing")


# --- hand-written torch -------------------------------------------------------------------------

def unet(path, size=128, c=(16, 32, 64, 128)):
    import torch
    from torch import nn
    torch.manual_seed(0)

    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(),
                             nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.down = nn.ModuleList()
            prev = 3
            for ch in c:
                self.down.append(block(prev, ch))
                prev = ch
            self.up = nn.ModuleList()
            self.dec = nn.ModuleList()
            for i, ch in enumerate(reversed(c[:-1])):
                # stride 2 with output_padding, and one grouped transposed convolution
                if i == 1:
                    self.up.append(nn.ConvTranspose2d(prev, ch, 3, stride=2, padding=1, output_padding=1, groups=2))
                else:
                    self.up.append(nn.ConvTranspose2d(prev, ch, 2, stride=2))
                self.dec.append(block(ch * 2, ch))
                prev = ch
            self.head = nn.Conv2d(prev, 2, 1)

        def forward(self, x):
            skips = []
            for i, d in enumerate(self.down):
                x = d(x)
                if i < len(self.down) - 1:
                    skips.append(x)
                    x = nn.functional.max_pool2d(x, 2)
            for up, dec in zip(self.up, self.dec):
                x = up(x)
                x = dec(torch.cat([x, skips.pop()], 1))
            return torch.sigmoid(self.head(x))

    torch_export(UNet(), torch.rand(1, 3, size, size), path, 13, ["input"], ["output"],
                 {"input": {0: "B"}, "output": {0: "B"}})
    return image(size)


def speech_rnn(path):
    import torch
    from torch import nn
    torch.manual_seed(0)

    class Speech(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(40, 128, num_layers=2, bidirectional=True)
            self.gru = nn.GRU(256, 96)
            self.out = nn.Linear(96, 30)

        def forward(self, x, h0, c0):
            y, _ = self.lstm(x, (h0, c0))
            y, _ = self.gru(y)
            return self.out(y).log_softmax(-1)

    args = (torch.randn(50, 1, 40), torch.zeros(4, 1, 128), torch.zeros(4, 1, 128))
    torch_export(Speech(), args, path, 13, ["x", "h0", "c0"], ["logp"],
                 {"x": {0: "T", 1: "B"}, "h0": {1: "B"}, "c0": {1: "B"}, "logp": {0: "T", 1: "B"}})
    return recipe([("x", [50, "B", 40], "float32", (-1, 1)), ("h0", [4, "B", 128], "float32", (-0.1, 0.1)),
                   ("c0", [4, "B", 128], "float32", (-0.1, 0.1))], [1, 8], "LSTM and GRU",
                  {"axis": [["x", 0]], "range": [10, 200], "multiple": 1})


def logmel(path):
    import math

    import torch
    from torch import nn
    torch.manual_seed(0)
    n_fft, hop, mels = 400, 160, 64

    class LogMel(nn.Module):
        """A conv front end computing a log-mel spectrogram (DFT as a strided Conv1d)."""

        def __init__(self):
            super().__init__()
            t = torch.arange(n_fft)
            window = 0.5 - 0.5 * torch.cos(2 * math.pi * t / n_fft)
            k = torch.arange(n_fft // 2 + 1)[:, None]
            re = torch.cos(2 * math.pi * k * t / n_fft) * window
            im = -torch.sin(2 * math.pi * k * t / n_fft) * window
            self.dft = nn.Conv1d(1, 2 * (n_fft // 2 + 1), n_fft, stride=hop, bias=False)
            self.dft.weight.data = torch.cat([re, im])[:, None, :]
            self.mel = nn.Parameter(torch.rand(mels, n_fft // 2 + 1) / 10)
            self.conv = nn.Sequential(nn.Conv2d(1, 16, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU())

        def forward(self, wav):
            s = self.dft(wav.unsqueeze(1))
            re, im = s.chunk(2, dim=1)
            power = re * re + im * im
            mel = torch.matmul(self.mel, power)
            return self.conv(torch.log(mel + 1e-6).unsqueeze(1))

    torch_export(LogMel(), torch.randn(1, 16000), path, 13, ["wav"], ["features"],
                 {"wav": {0: "B"}, "features": {0: "B"}})
    return recipe([("wav", ["B", 16000], "float32", (-1, 1))], [1, 8], "audio-like signal")


def gpt2_step(path):
    import torch
    from torch import nn
    torch.manual_seed(0)
    layers, hidden, heads, vocab = 4, 256, 4, 8000

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.fc, self.out = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def forward(self, x, past_k, past_v):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(hidden, dim=-1)
            shape = lambda t: t.view(b, s, heads, hidden // heads).transpose(1, 2)
            q, k, v = shape(q), torch.cat([past_k, shape(k)], 2), torch.cat([past_v, shape(v)], 2)
            a = torch.softmax(q @ k.transpose(-1, -2) / (hidden // heads) ** 0.5, -1) @ v
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, hidden))
            return x + self.out(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh")), k, v

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(1024, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(hidden)

        def forward(self, ids, past):
            pos = torch.arange(past.shape[3], past.shape[3] + ids.shape[1]).unsqueeze(0)
            x = self.wte(ids) + self.wpe(pos)
            presents = []
            for i, blk in enumerate(self.blocks):
                x, k, v = blk(x, past[i, 0], past[i, 1])
                presents.append(torch.stack([k, v]))
            return self.ln(x) @ self.wte.weight.t(), torch.stack(presents)

    past = torch.randn(layers, 2, 1, heads, 16, hidden // heads)
    torch_export(Decoder(), (torch.zeros(1, 1, dtype=torch.long), past), path, 13, ["ids", "past"],
                 ["logits", "present"], {"ids": {0: "B"}, "past": {2: "B", 4: "P"}, "logits": {0: "B"},
                                         "present": {2: "B", 4: "P1"}})
    return recipe([("ids", ["B", 1], "int64", (0, vocab)),
                   ("past", [layers, 2, "B", heads, 32, hidden // heads], "float32", (-1, 1))], [1, 8],
                  "decoder step, past key/values of length 32",
                  {"axis": [["past", 4]], "range": [1, 256], "multiple": 1})


def control_flow(path):
    import torch
    from torch import nn
    torch.manual_seed(0)

    class Body(nn.Module):
        """A branch on the data and a loop whose trip count is the batch: If and Loop bodies."""

        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(64, 64), nn.Linear(64, 64)

        def forward(self, x):
            if bool(x.sum() > 0):
                x = torch.relu(self.a(x))
            else:
                x = torch.tanh(self.b(x))
            for _ in range(x.size(0)):
                x = torch.relu(self.a(x)) * 0.5 + x
            return x

    # A ScriptModule exported as it is (wrapped in a traced module the exporter fails).
    torch_export(torch.jit.script(Body()), (torch.randn(4, 64),), path, 13, ["x"], ["y"],
                 {"x": {0: "B"}, "y": {0: "B"}})
    return recipe([("x", ["B", 64], "float32", (-1, 1))], [1, 8], "If and Loop with real subgraphs")


def text_classifier(path):
    import torch
    from torch import nn
    torch.manual_seed(0)

    class Text(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(20000, 128)
            layer = nn.TransformerEncoderLayer(128, 4, 512, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, 2)
            self.cls = nn.Linear(128, 5)

        def forward(self, ids):
            return self.cls(self.enc(self.emb(ids)).mean(1))

    torch_export(Text(), torch.zeros(1, 64, dtype=torch.long), path, 13, ["ids"], ["logits"],
                 {"ids": {0: "B", 1: "S"}, "logits": {0: "B"}})
    return recipe([("ids", ["B", 64], "int64", (0, 20000))], [1, 8], "dynamic sequence axis",
                  {"axis": [["ids", 1]], "range": [4, 256], "multiple": 1})


def bag_recommender(path):
    """A recommender with torch's EmbeddingBag, which torch.onnx writes as a Loop with one
    iteration per bag: 8 sparse features of 4 ids a sample (sum and mean bags), a bottom MLP over 13
    dense features, a top MLP over both."""
    import torch
    from torch import nn
    torch.manual_seed(0)

    class Bags(nn.Module):
        def __init__(self):
            super().__init__()
            self.bags = nn.ModuleList([nn.EmbeddingBag(5000, 32, mode="sum" if f % 2 else "mean")
                                       for f in range(8)])
            self.bottom = nn.Sequential(nn.Linear(13, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())
            self.top = nn.Sequential(nn.Linear(32 + 8 * 32, 256), nn.ReLU(), nn.Linear(256, 1))

        def forward(self, dense, ids):
            feats = [self.bottom(dense)] + [bag(ids[:, f]) for f, bag in enumerate(self.bags)]
            return torch.sigmoid(self.top(torch.cat(feats, 1)))

    torch_export(Bags(), (torch.rand(2, 13), torch.zeros(2, 8, 4, dtype=torch.long)), path, 13,
                 ["dense", "ids"], ["ctr"], {"dense": {0: "B"}, "ids": {0: "B"}, "ctr": {0: "B"}})
    return recipe([("dense", ["B", 13], "float32", (0, 1)), ("ids", ["B", 8, 4], "int64", (0, 5000))],
                  [1, 256], "torch EmbeddingBags (Loops in the export)")


def crnn_recognizer(path):
    """A text-line recognizer (CRNN): a conv stack over a 32-pixel-high crop of any width, the
    columns read by a bidirectional LSTM, per-column character scores. Crops vary in width."""
    import torch
    from torch import nn
    torch.manual_seed(0)

    def conv(i, o, pool):
        return [nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU()] + ([nn.MaxPool2d(*pool)] if pool else [])

    class Crnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn = nn.Sequential(*conv(1, 32, (2, 2)), *conv(32, 64, (2, 2)), *conv(64, 128, None),
                                     *conv(128, 128, ((2, 1), (2, 1))), *conv(128, 192, None),
                                     *conv(192, 192, ((2, 1), (2, 1))), nn.Conv2d(192, 192, (2, 1)))
            self.rnn = nn.LSTM(192, 128, bidirectional=True)
            self.out = nn.Linear(256, 80)

        def forward(self, x):
            f = self.cnn(x).squeeze(2).permute(2, 0, 1)  # [W/4, B, C]
            y, _ = self.rnn(f)
            return self.out(y).log_softmax(-1)

    torch_export(Crnn(), torch.rand(1, 1, 32, 128), path, 13, ["image"], ["logp"],
                 {"image": {0: "B", 3: "W"}, "logp": {0: "T", 1: "B"}})
    return recipe([("image", ["B", 1, 32, 160], "float32", (0, 1))], [1, 8], "text-line crops of any width",
                  {"axis": [["image", 3]], "range": [32, 512], "multiple": 4})


def wav2vec_conformer(path):
    """A speech encoder over a raw waveform, as wav2vec2 / HuBERT and Conformer ASR models have
    it: a feature encoder of strided 1-D convolutions (512 channels, 10 taps stride 5, then 3 and
    2 taps stride 2; GroupNorm, GELU), a projection, and a Conformer block (macaron feed-forwards
    with SiLU, self-attention, and a convolution module: pointwise, GLU, depthwise 1-D over 31
    steps, BatchNorm, SiLU, pointwise)."""
    import torch
    from torch import nn
    torch.manual_seed(0)
    dim = 256

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.SiLU(), nn.Linear(4 * dim, dim))

        def forward(self, x):
            return x + 0.5 * self.net(x)

    class ConvModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(dim)
            self.pw1 = nn.Conv1d(dim, 2 * dim, 1)
            self.dw = nn.Conv1d(dim, dim, 31, padding=15, groups=dim)
            self.bn = nn.BatchNorm1d(dim)
            self.pw2 = nn.Conv1d(dim, dim, 1)

        def forward(self, x):  # [B, T, dim]
            y = nn.functional.glu(self.pw1(self.norm(x).transpose(1, 2)), dim=1)
            y = self.pw2(nn.functional.silu(self.bn(self.dw(y))))
            return x + y.transpose(1, 2)

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            layers = [nn.Conv1d(1, 512, 10, stride=5, bias=False), nn.GroupNorm(512, 512), nn.GELU()]
            for k in (3, 3, 3, 3, 2, 2):
                layers += [nn.Conv1d(512, 512, k, stride=2, bias=False), nn.GELU()]
            self.features = nn.Sequential(*layers)
            self.project = nn.Sequential(nn.LayerNorm(512), nn.Linear(512, dim))
            self.ff1, self.ff2 = FeedForward(), FeedForward()
            self.attn_norm = nn.LayerNorm(dim)
            self.attn = nn.MultiheadAttention(dim, 4, batch_first=True)
            self.conv = ConvModule()
            self.out = nn.LayerNorm(dim)

        def forward(self, wav):
            x = self.project(self.features(wav.unsqueeze(1)).transpose(1, 2))
            x = self.ff1(x)
            a = self.attn_norm(x)
            x = x + self.attn(a, a, a, need_weights=False)[0]
            return self.out(self.ff2(self.conv(x)))

    torch_export(Encoder(), torch.randn(1, 16000), path, 13, ["wav"], ["hidden"],
                 {"wav": {0: "B"}, "hidden": {0: "B"}})
    return recipe([("wav", ["B", 16000], "float32", (-1, 1))], [1, 4], "raw waveform, one second")


# --- written with python3-onnx, in other exporters' styles --------------------------------------

def onnx_styles():
    import onnx_styles as s
    return {"keras_nhwc": s.keras_nhwc, "decomposed_activations": s.decomposed_activations,
            "resize_scales": s.resize_scales, "unfolded_bn_pad": s.unfolded_bn_pad,
            "opset9_upsample": s.opset9_upsample, "tiny_op_chain": s.tiny_op_chain}


def fp16_of(base):
    def make(path, out_dir):
        import fp16_convert
        src = os.path.join(out_dir, base + ".onnx")
        if not os.path.exists(src):
            make_one(base, out_dir)
        fp16_convert.convert(src, path)
        with open(os.path.join(out_dir, base + ".json")) as f:
            r = json.load(f)
        r["note"] = f"fp16 weights and activations of {base}, Casts at the boundary"
        return r
    make.needs_dir = True
    return make


MODELS = {
    "resnet18_op11": torchvision_model("resnet18", 11),
    "mobilenet_v3_small_op13": torchvision_model("mobilenet_v3_small", 13),
    "mobilenet_v3_large_op17": torchvision_model("mobilenet_v3_large", 17),
    "efficientnet_b0_op13": torchvision_model("efficientnet_b0", 13),
    "convnext_tiny_op17": torchvision_model("convnext_tiny", 17),
    "regnet_y_400mf_op13": torchvision_model("regnet_y_400mf", 13),
    "squeezenet1_1_op11": torchvision_model("squeezenet1_1", 11),
    "shufflenet_v2_x1_0_op13": torchvision_model("shufflenet_v2_x1_0", 13),
    "densenet121_op13": torchvision_model("densenet121", 13),
    "googlenet_op13": torchvision_model("googlenet", 13, builder=lambda: signal_carrying(
        __import__("torchvision").models.googlenet(weights=None, aux_logits=False,
                                                   init_weights=True))),
    "mnasnet1_0_op11": torchvision_model("mnasnet1_0", 11),
    "vit_b_16_op17": torchvision_model("vit_b_16", 17, batches=(1, 2)),
    "swin_t_op17": torchvision_model("swin_t", 17, batches=(1, 2)),
    "fcn_resnet50_op13": torchvision_model(
        "fcn_resnet50", 13, builder=lambda: __import__("torchvision").models.segmentation.fcn_resnet50(
            weights=None, weights_backbone=None, aux_loss=False), batches=(1,), out_key="out"),
    "deeplabv3_mbv3_op13": torchvision_model(
        "deeplabv3", 13, builder=lambda: __import__("torchvision").models.segmentation.deeplabv3_mobilenet_v3_large(
            weights=None, weights_backbone=None, aux_loss=False), batches=(1, 8), out_key="out"),
    "lraspp_mbv3_op11": torchvision_model(
        "lraspp", 11, builder=lambda: __import__("torchvision").models.segmentation.lraspp_mobilenet_v3_large(
            weights=None, weights_backbone=None), batches=(1, 8), out_key="out"),
    "ssdlite320_op13": ssdlite,
    "r3d_18_op13": video_r3d,
    "unet_convtranspose": unet,
    "speech_lstm_gru": speech_rnn,
    "logmel_frontend": logmel,
    "gpt2_step": gpt2_step,
    "scripted_control_flow": control_flow,
    "text_classifier": text_classifier,
    "crnn_recognizer": crnn_recognizer,
    "wav2vec_conformer": wav2vec_conformer,
    "bag_recommender": bag_recommender,
    "keras_nhwc": None, "decomposed_activations": None, "resize_scales": None, "unfolded_bn_pad": None,
    "opset9_upsample": None, "tiny_op_chain": None,
    "resnet18_fp16": fp16_of("resnet18_op11"),
    "unet_fp16": fp16_of("unet_convtranspose"),
    "mobilenet_v3_large_fp16": fp16_of("mobilenet_v3_large_op17"),
}


def make_one(name, out_dir):
    path = os.path.join(out_dir, name + ".onnx")
    maker = MODELS[name] or onnx_styles()[name]
    r = maker(path, out_dir) if getattr(maker, "needs_dir", False) else maker(path)
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(r, f, indent=1)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=os.path.join(ROOT, "build", "corpus"))
    ap.add_argument("--models", help="comma-separated names (default: all)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--force", action="store_true", help="write models that exist already again")
    args = ap.parse_args()
    if args.list:
        print("\n".join(MODELS))
        return
    os.makedirs(args.out, exist_ok=True)
    failed = []
    for name in (args.models.split(",") if args.models else MODELS):
        path = os.path.join(args.out, name + ".onnx")
        if os.path.exists(path) and os.path.exists(path[:-5] + ".json") and not args.force:
            continue
        try:
            make_one(name, args.out)
            print(f"wrote {path}", flush=True)
        except Exception as e:  # one architecture the exporter cannot write does not stop the rest
            print(f"{name}: not written: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                  file=sys.stderr, flush=True)
            failed.append(name)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
