"""ResNet-50's sizes, shared by the Keras network (``resnet50.py``) and the plain PyTorch one (``torch_resnet50.py``):
each imports them from here, and neither imports the other's builder at import time."""

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

    @property
    def is_resnet50(self) -> bool:
        return self.blocks == RESNET50_BLOCKS and self.width == 64

    def stages(self) -> list[tuple[int, int, int]]:
        """(blocks, bottleneck filters, stride of the first block) per stage."""
        return [(n, self.width * 2**i, 1 if i == 0 else 2) for i, n in enumerate(self.blocks)]


PRESETS = {
    # Same bottleneck-v1 code path at one block a stage and a quarter of the width, so a CPU step
    # and its compile stay short; the published size below is keras.applications.ResNet50 itself.
    "tiny": ResNetSize(image_size=32, num_classes=10, blocks=(1, 1, 1, 1), width=16),
    "224": ResNetSize(image_size=224, num_classes=1000),  # ImageNet, as in MLPerf and the Model Garden
}
