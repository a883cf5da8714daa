"""Fine-tuning from Python: volt's Trainer with the C API's option keys as keyword arguments."""

import os

from . import _volt
from ._errors import InvalidArgument


def _option_text(key, value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value) if not isinstance(value, float) else repr(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    raise InvalidArgument(f"Trainer option '{key}': {value!r} is not a str, number, bool or list of str")


class Trainer:
    """Fine-tunes an ONNX model in place of its weights.

        t = volt.Trainer("model.onnx", loss="cross_entropy", optimizer="adam", learning_rate=1e-3)
        loss = t.step({"x": x, "label": y})

    Options are the C API's keys (loss, prediction, label, optimizer, learning_rate, momentum,
    nesterov, beta1, beta2, epsilon, weight_decay, max_grad_norm, trainable, freeze, threads,
    device, precision, seed, sparse_gradients, lazy_update, accumulate_steps, distributed,
    sparse_allreduce_threshold); lists (trainable=[...]) are joined
    with commas, bools become true/false. An unknown key or a bad value is an InvalidArgument.
    """

    def __init__(self, model, **options):
        pairs = [(k, _option_text(k, v)) for k, v in options.items() if v is not None]
        self._t = _volt.Trainer(os.fspath(model), pairs)

    def step(self, feed):
        """One optimization step on a batch (the model's inputs and the label): the loss before
        the update. Releases the GIL."""
        return self._t.step(feed)

    def evaluate(self, feed):
        """The loss in evaluation mode; nothing changes."""
        return self._t.evaluate(feed)

    def predict(self, feed):
        """The model's outputs in evaluation mode with the current weights."""
        return self._t.predict(feed)

    @property
    def learning_rate(self):
        return self._t.learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        self._t.learning_rate = value

    @property
    def loss_scale(self):
        return self._t.loss_scale

    @property
    def skipped_steps(self):
        return self._t.skipped_steps

    @property
    def steps(self):
        return self._t.steps

    @property
    def rank(self):
        """This process's rank in a distributed job (0 alone)."""
        return self._t.rank

    @property
    def world_size(self):
        """The number of ranks (1 alone)."""
        return self._t.world_size

    @property
    def exchanged_bytes(self):
        """Bytes this rank handed to the gradient exchange in the last optimizer step."""
        return self._t.exchanged_bytes

    @property
    def trainable(self):
        """Names of the weights being trained."""
        return list(self._t.trainable)

    def weight(self, name):
        """A copy of a weight's current value."""
        return self._t.weight(name)

    def save_checkpoint(self, path):
        self._t.save_checkpoint(os.fspath(path))

    def load_checkpoint(self, path):
        self._t.load_checkpoint(os.fspath(path))

    def export(self, path):
        """Writes a plain inference model with the tuned weights."""
        self._t.export(os.fspath(path))
