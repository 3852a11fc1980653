"""ResNet-50's sizes, shared by the Keras network (``resnet50.py``) and the plain PyTorch one (``torch_resnet50.py``):
each imports them from here, and neither imports the other's builder at import time.

Two variants of the network. ``v1`` is keras.applications.ResNet50: the stride of a stage's first block on its first
1x1 convolution, a bias on every convolution, BatchNorm epsilon 1.001e-5; the plain PyTorch build copies it, so that
plain-vs-Keras is the Keras overhead. ``v1.5`` is the network of torchvision's ``resnet50``, NVIDIA's
DeepLearningExamples and MLPerf's tables: the stride on the 3x3 convolution, no convolution bias (BatchNorm follows),
BatchNorm epsilon 1e-5; it costs more (the first 1x1 runs at full resolution) and is the one published throughputs
ran."""

from __future__ import annotations

from dataclasses import dataclass

EXPANSION = 4
RESNET50_BLOCKS = (3, 4, 6, 3)


@dataclass(frozen=True)
class ResNetSize:
    image_size: int
    num_classes: int
    blocks: tuple[int, ...] = RESNET50_BLOCKS  # bottleneck blocks per stage
    width: int = 64  # stem and first-stage bottleneck filters; doubled each stage
    variant: str = "v1"  # "v1" (keras.applications) or "v1.5" (torchvision, NVIDIA, MLPerf): see above

    @property
    def is_resnet50(self) -> bool:
        """keras.applications.ResNet50 itself: the published depth and width, v1."""
        return self.blocks == RESNET50_BLOCKS and self.width == 64 and self.variant == "v1"

    @property
    def stride_on_3x3(self) -> bool:
        return self.variant == "v1.5"

    @property
    def conv_bias(self) -> bool:
        return self.variant == "v1"

    @property
    def bn_epsilon(self) -> float:
        return 1.001e-5 if self.variant == "v1" else 1e-5

    def stages(self) -> list[tuple[int, int, int]]:
        """(blocks, bottleneck filters, stride of the first block) per stage."""
        return [(n, self.width * 2**i, 1 if i == 0 else 2) for i, n in enumerate(self.blocks)]


PRESETS = {
    # Same bottleneck-v1 code path at one block a stage and a quarter of the width, so a CPU step
    # and its compile stay short; the published size below is keras.applications.ResNet50 itself.
    "tiny": ResNetSize(image_size=32, num_classes=10, blocks=(1, 1, 1, 1), width=16),
    "224": ResNetSize(image_size=224, num_classes=1000),  # ImageNet, as in MLPerf and the Model Garden
}
PRESETS_V15 = {  # the same sizes, v1.5 (model resnet50_v1.5)
    "tiny": ResNetSize(image_size=32, num_classes=10, blocks=(1, 1, 1, 1), width=16, variant="v1.5"),
    "224": ResNetSize(image_size=224, num_classes=1000, variant="v1.5"),  # torchvision's resnet50
}
