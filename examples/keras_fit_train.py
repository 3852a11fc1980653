"""A Keras training script, as a team writes one: a ``tf.data`` pipeline that decodes, augments, shuffles,
batches and prefetches text-classification examples it first writes to a TFRecord file, and ``model.fit`` on a
small embedding-and-convolution classifier. One callback makes it a stepwatch benchmark; run on its own, it
trains as before:

    python examples/keras_fit_train.py --epochs 1                                          # on its own
    stepwatch run --script examples/keras_fit_train.py -- --batch 32

TensorFlow is the Keras backend here (``tf.data`` feeds ``fit``); ``--keras-backend`` of a script sets
KERAS_BACKEND for it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

import stepwatch

VOCAB, LENGTH, CLASSES = 2000, 64, 4


def write_records(path: Path, examples: int, seed: int) -> Path:
    """Random token sequences of varying length and their labels, as serialised tf.train.Examples."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    temporary = path.with_suffix(".tmp")
    with tf.io.TFRecordWriter(str(temporary)) as writer:
        for _ in range(examples):
            tokens = rng.integers(1, VOCAB, size=rng.integers(LENGTH // 2, LENGTH + 1))
            features = {
                "tokens": tf.train.Feature(int64_list=tf.train.Int64List(value=tokens)),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(rng.integers(CLASSES))])),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())
    os.replace(temporary, path)
    return path


def dataset(path: Path, batch: int) -> tf.data.Dataset:
    spec = {"tokens": tf.io.VarLenFeature(tf.int64), "label": tf.io.FixedLenFeature([1], tf.int64)}

    def decode(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        parsed = tf.io.parse_single_example(record, spec)
        tokens = tf.sparse.to_dense(parsed["tokens"])
        keep = tf.random.uniform(tf.shape(tokens)) > 0.1  # augmentation: drop a tenth of the tokens
        tokens = tf.boolean_mask(tokens, keep)[:LENGTH]
        tokens = tf.pad(tokens, [[0, LENGTH - tf.shape(tokens)[0]]])
        return tf.cast(tokens, tf.int32), tf.cast(parsed["label"][0], tf.int32)

    return (
        tf.data.TFRecordDataset(str(path))
        .map(decode, num_parallel_calls=tf.data.AUTOTUNE)
        .cache()
        .shuffle(1024, seed=0)
        .repeat()
        .batch(batch, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def model(width: int) -> keras.Model:
    inputs = keras.Input((LENGTH,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, width)(inputs)
    x = keras.layers.Conv1D(width, 5, activation="relu")(x)
    x = keras.layers.GlobalMaxPooling1D()(x)
    outputs = keras.layers.Dense(CLASSES)(x)
    return keras.Model(inputs, outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--steps-per-epoch", type=int, default=50)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--records", type=Path, default=Path(tempfile.gettempdir()) / "stepwatch-example.tfrecord")
    args = parser.parse_args()

    keras.utils.set_random_seed(0)
    data = dataset(write_records(args.records, examples=2048, seed=0), args.batch)
    classifier = model(args.width)
    classifier.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    classifier.fit(
        data,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        verbose=2,
        callbacks=[stepwatch.keras_callback(examples_per_step=args.batch)],
    )


if __name__ == "__main__":
    main()
