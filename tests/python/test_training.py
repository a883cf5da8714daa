"""volt.Trainer from Python: loss falls, checkpoints are exact, export matches predict."""

import numpy as np
import pytest

import volt


def batch(n=64, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 784)).astype(np.float32)
    y = (x[:, :10].argmax(axis=1)).astype(np.int64)  # a learnable rule
    return {"x": x, "label": y}


def trainer(mlp_path, **extra):
    return volt.Trainer(mlp_path, loss="cross_entropy", optimizer="adam", learning_rate=1e-3,
                        seed=3, **extra)


def test_loss_falls(mlp_path):
    t = trainer(mlp_path)
    feed = batch()
    first = t.step(feed)
    for _ in range(30):
        last = t.step(feed)
    assert last < 0.5 * first
    assert t.steps == 31
    assert t.evaluate(feed) < first
    assert t.loss_scale == 1.0 and t.skipped_steps == 0
    assert t.trainable  # default: every weight a gradient reaches


def test_learning_rate_property(mlp_path):
    t = trainer(mlp_path)
    assert t.learning_rate == pytest.approx(1e-3)
    t.learning_rate = 5e-4
    assert t.learning_rate == pytest.approx(5e-4)


def test_checkpoint_round_trip_is_exact(mlp_path, tmp_path):
    feed = batch()
    a = trainer(mlp_path)
    for _ in range(3):
        a.step(feed)
    a.save_checkpoint(tmp_path / "a.ckpt")
    b = trainer(mlp_path)
    b.load_checkpoint(tmp_path / "a.ckpt")
    assert b.steps == a.steps
    for name in a.trainable:
        np.testing.assert_array_equal(a.weight(name), b.weight(name))
    # The optimizer state came too: the next steps are bit-identical.
    assert a.step(feed) == b.step(feed)
    np.testing.assert_array_equal(a.predict({"x": feed["x"]})[0], b.predict({"x": feed["x"]})[0])


def test_exported_model_gives_predicts_outputs(mlp_path, tmp_path):
    feed = batch()
    t = trainer(mlp_path)
    for _ in range(5):
        t.step(feed)
    t.export(tmp_path / "tuned.onnx")
    (tuned,) = volt.InferenceSession(str(tmp_path / "tuned.onnx")).run(None, {"x": feed["x"]})
    np.testing.assert_allclose(tuned, t.predict({"x": feed["x"]})[0], rtol=1e-5, atol=1e-5)


def test_trainable_list_and_bad_options(mlp_path):
    t = trainer(mlp_path, trainable=["fc2"])
    assert t.trainable and all(n.startswith("fc2") for n in t.trainable)
    with pytest.raises(volt.InvalidArgument, match="optimiser"):
        volt.Trainer(mlp_path, optimiser="adam")
    with pytest.raises(volt.InvalidArgument, match="beta1"):
        volt.Trainer(mlp_path, beta1=1.5)
    with pytest.raises(volt.InvalidArgument, match="label"):
        trainer(mlp_path).step({"x": batch()["x"]})


def test_nan_batch_is_refused_and_changes_nothing(mlp_path):
    t = trainer(mlp_path)
    feed = batch()
    t.step(feed)
    before = {n: t.weight(n) for n in t.trainable}
    bad = dict(feed, x=np.full_like(feed["x"], np.nan))
    with pytest.raises(volt.VoltError):
        t.step(bad)
    for n, w in before.items():
        np.testing.assert_array_equal(t.weight(n), w)


def test_csr_batches_train(mlp_path):
    feed = batch()
    x = feed["x"].copy()
    x[np.abs(x) < 1.0] = 0
    rows, cols = np.nonzero(x)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=x.shape[0]))])
    csr = volt.CsrTensor(x[rows, cols], cols, offsets, x.shape)
    a, b = trainer(mlp_path), trainer(mlp_path)
    loss_sparse = a.step({"x": csr, "label": feed["label"]})
    loss_dense = b.step({"x": x, "label": feed["label"]})
    assert loss_sparse == pytest.approx(loss_dense, rel=1e-5)


def test_accumulation_is_the_mean_of_micro_batches(mlp_path):
    # Two micro-batches of 32 with accumulate_steps=2 make one update, close to one step on the
    # 64 (the same mean gradient, summed in another order).
    def sgd(**extra):
        return volt.Trainer(mlp_path, optimizer="sgd", learning_rate=0.1, seed=3, **extra)

    whole, acc = sgd(), sgd(accumulate_steps=2)
    assert acc.rank == 0 and acc.world_size == 1 and acc.exchanged_bytes == 0
    feed = batch()
    halves = [{k: v[:32] for k, v in feed.items()}, {k: v[32:] for k, v in feed.items()}]
    whole.step(feed)
    acc.step(halves[0])
    assert acc.steps == 0
    acc.step(halves[1])
    assert acc.steps == 1
    name = whole.trainable[0]
    np.testing.assert_allclose(acc.weight(name), whole.weight(name), rtol=1e-5, atol=1e-6)
    with pytest.raises(volt.InvalidArgument, match="distributed"):
        sgd(distributed="sometimes")
