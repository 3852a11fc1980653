"""ResNet-50 in plain PyTorch, as a PyTorch user trains it: the same bottleneck blocks, sizes and synthetic batches
as ``trainers.resnet50`` (NHWC images taken as a channels-last view), so that the plain loop and Keras-on-torch train
the same network and their ratio is the Keras overhead: v1 as keras.applications builds it (stride on the first 1x1,
convolution bias, BatchNorm epsilon 1.001e-5), or v1.5 as torchvision's ``resnet50`` (stride on the 3x3, no
convolution bias, epsilon 1e-5), as the size's variant says. torch is imported inside the builder only."""

from __future__ import annotations

from typing import Any

from stepwatch.trainers.resnet_sizes import EXPANSION, ResNetSize


def build(size: ResNetSize) -> Any:
    """A torch.nn.Module taking (batch, H, W, 3) images (permuted to a channels-last NCHW view, no copy)."""
    from torch import nn

    def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, relu: bool = True) -> nn.Sequential:
        layers = [nn.Conv2d(cin, cout, kernel, stride, padding=kernel // 2 if kernel == 3 else 0, bias=size.conv_bias),
                  nn.BatchNorm2d(cout, eps=size.bn_epsilon)]  # fmt: skip
        return nn.Sequential(*layers, *([nn.ReLU(inplace=True)] if relu else []))

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, filters: int, stride: int, project: bool) -> None:
            super().__init__()
            self.shortcut = conv_bn(cin, EXPANSION * filters, 1, stride, relu=False) if project else nn.Identity()
            reduce, middle = (1, stride) if size.stride_on_3x3 else (stride, 1)  # where the stride is
            self.body = nn.Sequential(
                conv_bn(cin, filters, 1, reduce), conv_bn(filters, filters, 3, middle),
                conv_bn(filters, EXPANSION * filters, 1, relu=False),
            )  # fmt: skip
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x: Any) -> Any:
            return self.relu(self.shortcut(x) + self.body(x))

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            stem = [nn.Conv2d(3, size.width, 7, 2, padding=3, bias=size.conv_bias),
                    nn.BatchNorm2d(size.width, eps=size.bn_epsilon), nn.ReLU(inplace=True),
                    nn.MaxPool2d(3, 2, padding=1)]  # fmt: skip
            blocks, channels = [], size.width
            for count, filters, stride in size.stages():
                for block in range(count):
                    blocks.append(Bottleneck(channels, filters, stride if block == 0 else 1, block == 0))
                    channels = EXPANSION * filters
            self.features = nn.Sequential(*stem, *blocks)
            self.head = nn.Linear(channels, size.num_classes)

        def forward(self, images: Any) -> Any:
            x = self.features(images.permute(0, 3, 1, 2))  # NHWC in memory: a channels-last NCHW view
            return self.head(x.mean(dim=(2, 3)))

    import torch

    # Channels-last weights too, as NVIDIA's PyTorch ResNet-50 trains (tensor-core convolutions want NHWC).
    return ResNet().to(memory_format=torch.channels_last)


def optimizer(parameters: Any, learning_rate: float) -> Any:
    """SGD with momentum 0.9, as the Keras trainer's."""
    import torch

    return torch.optim.SGD(parameters, lr=learning_rate, momentum=0.9)
