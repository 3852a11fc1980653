"""The models a trial trains: the bundled ones (Keras 3 builders, and plain PyTorch builds of ResNet-50 in
``torch_resnet50.py``, of Llama in ``llama.py`` and of GPT-OSS's mixture of experts in ``gpt_oss.py``), each with
synthetic batches and analytic FLOPs, and a model of yours (``user.py``). A script of yours (``script.py``) is run,
not built; ``workload.py`` tells the three apart."""

from __future__ import annotations

from stepwatch.trainers import bert, bilstm, gpt_oss, llama, resnet50, teacher, transformer, user
from stepwatch.trainers.spec import ModelSpec
from stepwatch.trainers.workload import Kind, kind_of

MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        resnet50.SPEC,
        resnet50.SPEC_V15,
        bert.SPEC,
        transformer.SPEC,
        bilstm.SPEC,
        teacher.SPEC,
        llama.SPEC,
        gpt_oss.SPEC,
    )
}


class UnknownModelError(KeyError):
    """A model name that no trainer provides."""

    def __str__(self) -> str:
        return str(self.args[0])


def get_model(name: str) -> ModelSpec:
    """Return the spec of ``name``: a bundled model, or a user's own (``path/to/file.py:function`` or
    ``package.module:function``, ``trainers.user``). Raises UnknownModelError listing the known models, or
    UserModelError naming what is wrong with the user's."""
    if kind_of(name) is Kind.FUNCTION:
        return user.user_spec(name)
    try:
        return MODELS[name]
    except KeyError:
        known = ", ".join(sorted(MODELS))
        raise UnknownModelError(f"unknown model {name!r} (known: {known})") from None
