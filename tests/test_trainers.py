"""Trainers: tiny presets train, FLOPs match the published figure and the models' own layers."""

from __future__ import annotations

import keras
import keras_hub
import numpy as np
import pytest

from stepwatch.trainers import MODELS, UnknownModelError, bert, get_model, resnet50


def conv_dense_macs(model: keras.Model) -> float:
    """Multiply-accumulates of every Conv2D and Dense layer, counted from the built model's shapes."""
    total = 0.0
    for layer in model.layers:
        if isinstance(layer, keras.layers.Conv2D):
            kh, kw = layer.kernel_size
            _, h, w, c_out = layer.output.shape
            total += h * w * kh * kw * layer.input.shape[-1] * c_out
        elif isinstance(layer, keras.layers.Dense):
            total += layer.kernel.shape[0] * layer.kernel.shape[1]
    return total


# keras-hub's encoders (bert, transformer: 10 s each) and ResNet-50 (its loss falling under fit is also checked by
# test_runtime_tensorflow) in the large tier; the v1.5 network's, the LSTM's, Llama's and the teacher's here.
LARGE_TRAINERS = ("resnet50", "bert", "transformer")


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.large) if n in LARGE_TRAINERS else n for n in sorted(MODELS)]
)
def test_tiny_preset_trains_and_loss_falls(name: str) -> None:
    spec = MODELS[name]
    preset = spec.preset("tiny")
    keras.utils.set_random_seed(0)
    model = spec.build(preset)
    model.compile(optimizer=spec.optimizer(spec.default_learning_rate * 3), loss=spec.loss())
    x, y = spec.synthetic_batch(preset, 8, seed=1)
    losses = []
    for _ in range(12):
        model.reset_metrics()  # so "loss" is this step's loss, not a running mean
        losses.append(float(model.train_on_batch(x, y, return_dict=True)["loss"]))
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.95 * losses[0], losses
    assert sum(b < a for a, b in zip(losses, losses[1:])) >= 9, losses  # falls at (nearly) every step


def test_published_resnet50_flops_within_10_percent_of_24_5_gflop() -> None:
    flops = resnet50.flops_per_example(resnet50.PRESETS["224"])
    assert abs(flops / 24.5e9 - 1) < 0.10, flops


def test_resnet50_flops_formula_counts_the_keras_application_layers() -> None:
    size = resnet50.PRESETS["224"]
    model = resnet50.build(size)
    assert model.name == "resnet50"  # the published size is keras.applications.ResNet50 itself
    assert resnet50.forward_macs(size) == pytest.approx(conv_dense_macs(model), rel=1e-9)


# torchvision's resnet50 (the v1.5 network), as its model card gives it: parameters, and GFLOPS (multiply-adds).
TORCHVISION_RESNET50 = {"params": 25_557_032, "forward_gmacs": 4.09}


def test_resnet50_v15_is_torchvisions_network_in_keras_and_in_plain_pytorch() -> None:
    """The plain PyTorch module at 224 px against torchvision's model card; the Keras build at the tiny size
    against the plain PyTorch one and against the FLOPs formula (the same builder at every size)."""
    torch = pytest.importorskip("torch")  # noqa: F841 - the plain PyTorch build needs it
    from stepwatch.trainers import get_model, torch_resnet50

    spec = get_model("resnet50_v1.5")
    size = spec.preset("224")
    module = torch_resnet50.build(size)
    assert sum(p.numel() for p in module.parameters()) == TORCHVISION_RESNET50["params"]
    convs = [m for m in module.modules() if type(m).__name__ == "Conv2d"]
    assert all(c.bias is None for c in convs)  # BatchNorm follows every convolution
    strided_3x3 = [c for c in convs if c.kernel_size == (3, 3) and c.stride == (2, 2)]
    strided_1x1 = [c for c in convs if c.kernel_size == (1, 1) and c.stride == (2, 2)]
    assert len(strided_3x3) == 3 and len(strided_1x1) == 3  # the three downsampling blocks: 3x3 and shortcut
    assert resnet50.forward_macs(size) / 1e9 == pytest.approx(TORCHVISION_RESNET50["forward_gmacs"], abs=0.005)
    tiny = spec.preset("tiny")
    model = spec.build(tiny)
    plain = sum(p.numel() for p in torch_resnet50.build(tiny).parameters())
    assert sum(int(np.prod(w.shape)) for w in model.trainable_weights) == plain
    assert resnet50.forward_macs(tiny) == pytest.approx(conv_dense_macs(model), rel=1e-9)
    # v1 (keras.applications) puts the stride on the cheaper 1x1: fewer FLOPs, for MFU each its own.
    assert spec.flops_per_example(size) / resnet50.flops_per_example(resnet50.PRESETS["224"]) == pytest.approx(
        4.089 / 3.858, rel=1e-3
    )


def test_tiny_resnet_is_the_same_bottleneck_code_as_keras_resnet50() -> None:
    full = resnet50.ResNetSize(image_size=224, num_classes=1000)
    ours = resnet50.build_bottleneck(full)
    reference = keras.applications.ResNet50(weights=None)
    assert ours.count_params() == reference.count_params()
    tiny = resnet50.PRESETS["tiny"]
    assert resnet50.forward_macs(tiny) == pytest.approx(conv_dense_macs(resnet50.build(tiny)), rel=1e-9)


def test_bert_flops_match_6n_plus_attention_rule() -> None:
    size = bert.PRESETS["base-128"]
    model = bert.build(size)
    (backbone,) = [layer for layer in model.layers if isinstance(layer, keras_hub.models.BertBackbone)]
    embedding_params = sum(
        int(np.prod(w.shape)) for w in backbone.weights if "embedding" in w.path and "layer_norm" not in w.path
    )
    encoder_params = backbone.count_params() - embedding_params
    t, layers, d = size.sequence_length, size.num_layers, size.hidden_dim
    rule = t * (6 * encoder_params + 12 * layers * d * t)
    encoder_only = bert.flops_per_example(size) - 6 * size.masked_per_sequence * (d * d + d * size.vocabulary_size)
    assert encoder_only == pytest.approx(rule, rel=0.03)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_published_presets_have_positive_flops_and_units(name: str) -> None:
    spec = MODELS[name]
    for preset_name, preset in spec.presets.items():
        assert spec.flops_per_example(preset) > 0, preset_name
        assert spec.units_per_example(preset) >= 1
    assert spec.unit in ("images", "sequences", "tokens", "examples")


def test_unknown_model_and_preset_name_the_known_ones() -> None:
    with pytest.raises(UnknownModelError, match="unknown model 'resnet5'.*resnet50"):
        get_model("resnet5")
    with pytest.raises(KeyError, match="no preset 'huge'.*tiny"):
        get_model("bert").preset("huge")
