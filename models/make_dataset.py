#!/usr/bin/python3
"""Writes a synthetic, separable 10-class dataset shaped like MNIST (784 features) for the
README's fine-tuning demo: class centers plus Gaussian noise, fixed seed.

  /usr/bin/python3 models/make_dataset.py OUT_DIR [N]   -> OUT_DIR/x.npy (float32), OUT_DIR/y.npy (int64)
"""
import os
import sys

import numpy as np


def main():
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((10, 784)).astype(np.float32) * 0.5
    y = rng.integers(0, 10, n).astype(np.int64)
    x = centers[y] + 0.6 * rng.standard_normal((n, 784)).astype(np.float32)
    np.save(os.path.join(out, "x.npy"), x.astype(np.float32))
    np.save(os.path.join(out, "y.npy"), y)
    print(f"wrote {n} samples to {out}")


if __name__ == "__main__":
    main()
