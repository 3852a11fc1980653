"""Models that cannot be trained, one way each: stepwatch must say which, in one line, and go on."""

import keras


def raises(preset):
    raise RuntimeError(f"no weights for preset {preset}")


def wrong_type(preset):
    return [keras.Sequential([keras.layers.Dense(2)])]


def misfit(preset):  # declares 5 features; the model takes 7
    inputs = keras.Input((7,))
    return {
        "model": keras.Model(inputs, keras.layers.Dense(2)(inputs)),
        "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        "inputs": {"shape": (5,), "dtype": "float32"},
        "labels": {"shape": (), "dtype": "int32", "high": 2},
    }
