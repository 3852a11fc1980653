"""ResNet-50 image classifier, random weights, NHWC: ``resnet50`` is keras.applications.ResNet50 (v1: stride on the
first 1x1, a bias on every convolution), ``resnet50_v1.5`` the network published tables ran (torchvision's,
NVIDIA's, MLPerf's: stride on the 3x3, no convolution bias); ``resnet_sizes`` says how they differ."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from stepwatch.trainers import torch_resnet50
from stepwatch.trainers.resnet_sizes import EXPANSION, PRESETS, PRESETS_V15, ResNetSize
from stepwatch.trainers.spec import Batch, ModelSpec, TorchParts, training_flops


def build(size: ResNetSize) -> Any:
    """keras.applications.ResNet50 for the published depth and width of v1, else the same blocks (v1 or v1.5)."""
    import keras

    if size.is_resnet50:
        return keras.applications.ResNet50(
            weights=None,
            input_shape=(size.image_size, size.image_size, 3),
            classes=size.num_classes,
            classifier_activation=None,
        )
    return build_bottleneck(size)


def build_bottleneck(size: ResNetSize) -> Any:
    """The layer sequence of keras.applications' ResNet (conv+BN+ReLU), v1 (stride on the first 1x1, convolution
    bias) or v1.5 (stride on the 3x3, no convolution bias), as ``size.variant`` says. A 3x3 with a stride pads as
    torchvision's does (one pixel each side), where "same" would pad only after."""
    import keras
    from keras import layers

    def conv_bn(x: Any, filters: int, kernel: int, stride: int = 1, relu: bool = True) -> Any:
        if kernel == 3 and stride > 1:
            x = layers.ZeroPadding2D(1)(x)
        padding = "same" if kernel == 3 and stride == 1 else "valid"
        x = layers.Conv2D(filters, kernel, strides=stride, padding=padding, use_bias=size.conv_bias)(x)
        x = layers.BatchNormalization(epsilon=size.bn_epsilon)(x)
        return layers.Activation("relu")(x) if relu else x

    inputs = keras.Input((size.image_size, size.image_size, 3))
    x = layers.ZeroPadding2D(3)(inputs)
    x = layers.Conv2D(size.width, 7, strides=2, use_bias=size.conv_bias)(x)
    x = layers.Activation("relu")(layers.BatchNormalization(epsilon=size.bn_epsilon)(x))
    x = layers.MaxPooling2D(3, strides=2)(layers.ZeroPadding2D(1)(x))
    for blocks, filters, stride in size.stages():
        for block in range(blocks):
            s = stride if block == 0 else 1
            shortcut = conv_bn(x, EXPANSION * filters, 1, s, relu=False) if block == 0 else x
            y = conv_bn(x, filters, 1, 1 if size.stride_on_3x3 else s)
            y = conv_bn(y, filters, 3, s if size.stride_on_3x3 else 1)
            y = conv_bn(y, EXPANSION * filters, 1, relu=False)
            x = layers.Activation("relu")(layers.Add()([shortcut, y]))
    x = layers.GlobalAveragePooling2D()(x)
    name = "resnet_bottleneck_v1" if size.variant == "v1" else "resnet50_v1_5"
    return keras.Model(inputs, layers.Dense(size.num_classes)(x), name=name)


def synthetic_batch(size: ResNetSize, batch: int, seed: int) -> Batch:
    """Normal-noise images and uniform labels."""
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((batch, size.image_size, size.image_size, 3), dtype=np.float32)
    labels = rng.integers(0, size.num_classes, size=(batch,), dtype=np.int32)
    return images, labels


def _conv_out(h: int, kernel: int, stride: int, pad: int) -> int:
    return (h + 2 * pad - kernel) // stride + 1


def forward_macs(size: ResNetSize) -> float:
    """Multiply-accumulates of the convolutions and the classifier, layer by layer as Keras builds them."""
    h = _conv_out(size.image_size, 7, 2, 3)  # ZeroPadding2D(3) + 7x7/2 conv
    macs = h * h * 7 * 7 * 3 * size.width
    h = _conv_out(h, 3, 2, 1)  # ZeroPadding2D(1) + 3x3/2 max pool
    channels = size.width
    for blocks, filters, stride in size.stages():
        for block in range(blocks):
            s = stride if block == 0 else 1
            out_h = _conv_out(h, 1, s, 0)
            if block == 0:  # projection shortcut
                macs += out_h * out_h * channels * filters * EXPANSION
            reduce_h = h if size.stride_on_3x3 else out_h  # the 1x1 carries the stride in v1, the 3x3 in v1.5
            macs += reduce_h * reduce_h * channels * filters  # 1x1
            macs += out_h * out_h * 9 * filters * filters  # 3x3
            macs += out_h * out_h * filters * filters * EXPANSION  # 1x1 expand
            channels, h = filters * EXPANSION, out_h
    macs += channels * size.num_classes
    return float(macs)


def flops_per_example(size: ResNetSize) -> float:
    """Training FLOPs per image (~23.2 GFLOP at 224px for v1, ~24.6 for v1.5)."""
    return training_flops(forward_macs(size))


def optimizer(learning_rate: float) -> Any:
    """SGD with momentum 0.9, as in the reference ResNet-50 recipes."""
    import keras

    return keras.optimizers.SGD(learning_rate=learning_rate, momentum=0.9)


SPEC = ModelSpec(
    name="resnet50",
    unit="images",
    presets=PRESETS,
    build=build,
    synthetic_batch=synthetic_batch,
    flops_per_example=flops_per_example,
    units_per_example=lambda size: 1,
    optimizer=optimizer,
    default_learning_rate=0.01,
    description="ResNet-50 image classification (keras.applications, random weights)",
    torch=TorchParts(build=torch_resnet50.build, optimizer=torch_resnet50.optimizer),
)
SPEC_V15 = dataclasses.replace(
    SPEC,
    name="resnet50_v1.5",
    presets=PRESETS_V15,
    description="ResNet-50 v1.5 image classification, the network published tables ran (torchvision's resnet50: "
    "stride on the 3x3, no convolution bias; random weights)",
)
