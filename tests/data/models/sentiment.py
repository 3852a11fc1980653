"""A model written from docs/reference.md ("Your own model") alone, as a new user would: a bag-of-embeddings
sentiment classifier whose one input is named, given as a dict, with its FLOPs declared."""

import keras

SIZES = {"tiny": (2000, 32, 64), "small": (20000, 128, 256)}


def sentiment(preset):
    vocab, width, length = SIZES[preset]
    tokens = keras.Input((length,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(vocab, width)(tokens)
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(width, activation="relu")(x)
    outputs = keras.layers.Dense(2, activation="softmax", dtype="float32")(x)
    return {
        "model": keras.Model({"tokens": tokens}, outputs),
        "loss": "sparse_categorical_crossentropy",
        "inputs": {"tokens": {"shape": (length,), "dtype": "int32", "high": vocab}},
        "labels": {"shape": (), "dtype": "int32", "high": 2},
        "optimizer": keras.optimizers.SGD(0.01),
        "flops_per_example": 6.0 * (width * width + width * 2),
    }
