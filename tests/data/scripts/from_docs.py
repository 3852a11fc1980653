"""A training script written from docs/reference.md ("Your own training script") alone, as a new user would: a
linear classifier in plain JAX, its own optimizer step, batches from a generator. Runs on its own too."""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import stepwatch

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.1)
args = parser.parse_args()

rng = np.random.default_rng(0)
features = rng.standard_normal((2048, 64)).astype(np.float32)
labels = (features[:, :4].sum(axis=1) > 0).astype(np.int32)


def batches():
    order = rng.permutation(len(features))
    for start in range(0, len(order) - args.batch + 1, args.batch):
        index = order[start : start + args.batch]
        yield features[index], labels[index]


def loss_fn(params, x, y):
    logits = x @ params["w"] + params["b"]
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(y.shape[0]), y])


@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - args.lr * g, params, grads), loss


params = {"w": jnp.zeros((64, 2)), "b": jnp.zeros(2)}
for epoch in range(args.epochs):
    for x, y in stepwatch.steps(batches(), examples_per_step=args.batch):
        params, loss = train_step(params, x, y)
    print(f"epoch {epoch}: loss {float(loss):.4f}")
