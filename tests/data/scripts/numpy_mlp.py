"""A two-layer perceptron trained in plain numpy (its own gradients, plain SGD): a training script whose speed is its
BLAS's, for checks of container images that differ in one package. Runs on its own too."""

import numpy as np

import stepwatch

rng = np.random.default_rng(0)
features = rng.standard_normal((4096, 128)).astype(np.float32)
labels = (features[:, :8].sum(axis=1) > 0).astype(np.int64)
w1 = rng.standard_normal((128, 256)).astype(np.float32) * 0.05
w2 = rng.standard_normal((256, 2)).astype(np.float32) * 0.05
BATCH = 256


def batches():
    while True:
        for start in range(0, len(features), BATCH):
            yield features[start : start + BATCH], labels[start : start + BATCH]


for x, y in stepwatch.steps(batches(), examples_per_step=BATCH):
    hidden = np.maximum(x @ w1, 0)
    logits = hidden @ w2
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    loss = -np.log(probs[np.arange(len(y)), y] + 1e-9).mean()
    grad = probs
    grad[np.arange(len(y)), y] -= 1
    grad /= len(y)
    grad_hidden = (grad @ w2.T) * (hidden > 0)
    w2 -= 0.1 * hidden.T @ grad
    w1 -= 0.1 * x.T @ grad_hidden
