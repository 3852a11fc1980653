"""A small image classifier, as a Keras user writes one: three convolution blocks and a dense head on 32x32 RGB
images in 10 classes (the shape of CIFAR-10). Benchmark it with

    stepwatch run --models examples/keras_cnn.py:cifar_cnn --xla off,on

Its function is the whole contract (docs/reference.md, "Your own model"): it builds the model with random
weights and says what one example and its label look like; stepwatch makes the batches, compiles it for `fit`
on the Keras backend the run names, and times it.
"""

import keras

WIDTHS = {"tiny": (16, 32, 64), "full": (64, 128, 256)}


def cifar_cnn(preset: str = "tiny") -> dict:
    inputs = keras.Input((32, 32, 3))
    x = inputs
    for width in WIDTHS[preset]:
        x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(10, dtype="float32")(x)  # logits in float32 under mixed precision
    return {
        "model": keras.Model(inputs, outputs, name="cifar_cnn"),
        "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        "inputs": {"shape": (32, 32, 3), "dtype": "float32"},
        "labels": {"shape": (), "dtype": "int32", "high": 10},
    }
