"""One training step of a causal LM on the kit's host functions: forward, loss, backward, AdamW.

    step = TrainingStep(model, B, T, AdamW(learning_rate=3e-4))
    loss = step(inputs, targets)        # token ids (B, T) each -> the mean cross-entropy, a float

inputs are a batch of token sequences and targets the token that follows each one (the
same text shifted by one). A step:

1. zeroes the parameters' gradients and the activations' gradients that gather from two
   branches (the model's ACCUMULATED_GRADIENTS): every other gradient is written whole;
2. runs the model's forward pass, keeping every activation (the attention's T x T
   probabilities included: the backward pass reads them);
3. cross_entropy_forward_backward: each position's loss and the gradient of their mean
   at the logits, in one pass over the vocabulary;
4. the model's backward pass, the forward's calls in reverse, adding into the gradients;
5. adamw_update on each parameter tensor, as torch.optim.AdamW steps it.

The step owns its buffers (activations, gradients, the optimizer's moments), as a
decoder owns its cache, so the same arrays serve every step. The model's weights are
updated in place.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

from gpt2kit.kernel_runtime import KitError
from gpt2kit.kernel_runtime.device import captured
from gpt2kit.model_runtime.causal_lm import CausalLM, layer_views, zero_activations
from gpt2kit.model_runtime.ops import TRAINING_FUNCTIONS
from gpt2kit.reference.registry import not_written_yet


class TrainingError(KitError):
    """A model or options a training step cannot run."""


@dataclasses.dataclass(frozen=True)
class AdamW:
    """torch.optim.AdamW's update and its defaults; weight decay applies to every parameter, as it does to a
    single parameter group there."""

    learning_rate: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 1e-2

    def __post_init__(self):
        for name in ("learning_rate", "eps", "weight_decay"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise TrainingError(f"AdamW {name} must be a finite number >= 0, got {value}")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise TrainingError(f"AdamW {name} must be in [0, 1), got {getattr(self, name)}")


def adamw_moments(parameters: dict, xp) -> dict:
    """AdamW's first and second moments of every parameter tensor, zero: name -> (m, v)."""
    return {name: (xp.zeros_like(array), xp.zeros_like(array)) for name, array in parameters.items()}


def adamw_update_all(optimizer: AdamW, ops, parameters: dict, grads: dict, moments: dict, step: int,
                     run: Callable = lambda label, function, *args: function(*args)) -> None:
    """ops.adamw_update on every parameter tensor (by name, with its gradient and moments) at step count `step`;
    each call through run(label, function, *args), a model's runner where an observer watches."""
    o = optimizer
    for name, params in parameters.items():
        m, v = moments[name]
        run(f"adamw {name}", ops.adamw_update, params, grads[name], m, v, params.size, o.learning_rate, o.beta1,
            o.beta2, o.eps, o.weight_decay, step)


class GraphPair:
    """A forward graph and a backward graph: forward() and backward() (zero-argument launches over buffers the
    caller owns) launched the first time, which loads every kernel (a capture cannot), then captured on `stream`,
    and replayed from then on, their scratch from `pool` (captured's). Run it inside `with stream:`."""

    def __init__(self, stream, forward: Callable[[], None], backward: Callable[[], None], pool=None):
        self.stream, self.forward, self.backward, self.pool = stream, forward, backward, pool
        self.forward_graph = self.backward_graph = None

    def run(self) -> None:
        if self.forward_graph is None:
            self.forward()
            self.backward()
            self.forward_graph, _ = captured(self.stream, self.forward, self.pool)
            self.backward_graph, _ = captured(self.stream, self.backward, self.pool)
        else:
            self.forward_graph.launch(self.stream)
            self.backward_graph.launch(self.stream)


class TrainingStep:
    def __init__(self, model: CausalLM, B: int, T: int, optimizer: AdamW = AdamW()):
        missing = [name for name in TRAINING_FUNCTIONS if getattr(model.backend.ops, name, None) is None]
        if missing or not hasattr(model, "backward"):  # a family's backward and new_activation_grads
            what = f"the host functions {', '.join(missing)}" if missing else "a backward pass"
            raise TrainingError(f"training needs {what}, which the {model.backend.name} backend's "
                                f"{type(model).__name__} does not have (milestone 4)")
        if model.backend.name == "kernels":
            stubs = not_written_yet(list(TRAINING_FUNCTIONS))
            if stubs:
                raise TrainingError(f"{stubs}: the kernels backend runs them (write them first, or choose the gold "
                                    "or reference backend)")
        if model.flash_attention or model.window:
            raise TrainingError("training needs the attention's probabilities, which flash and local attention "
                                "do not keep: train on the three-kernel attention")
        if not (1 <= B and 1 <= T <= model.config.max_T):
            raise TrainingError(f"B={B}, T={T}: a training batch needs B >= 1 and 1 <= T <= {model.config.max_T}")
        self.model, self.B, self.T, self.optimizer = model, B, T, optimizer
        backend = model.backend
        self.activations = model.new_activations(B, T)
        self.activation_grads = model.new_activation_grads(B, T)
        self.grads = {name: backend.xp.zeros_like(array) for name, array in model.parameters.items()}
        layered = {name for name, value in vars(model.weights).items() if isinstance(value, list)}
        self.grad_views = layer_views(self.grads, tuple(set(self.grads) - layered))
        self.moments = adamw_moments(model.parameters, backend.xp)
        self.losses = backend.empty(B, T)
        self.steps = 0  # AdamW's step count t, from 1 at the first update

    def __call__(self, inputs, targets) -> float:
        """One step on inputs and targets (B, T) token ids; the mean loss before the update."""
        loss = self.compute_gradients(inputs, targets)
        self.update()
        return loss

    def compute_gradients(self, inputs, targets) -> float:
        """Every parameter's gradient of the mean loss into self.grads (by name, as model.parameters), without
        updating; the mean loss."""
        tokens, targets = self.checked_batch(inputs, targets)
        self.forward_and_loss(tokens, targets)
        self.backward(tokens)
        return self.mean_loss()

    def checked_batch(self, inputs, targets) -> tuple:
        """inputs and targets checked (shape, ids) and on the device."""
        model, B, T = self.model, self.B, self.T
        tokens, targets = model.check_tokens(inputs, 2), model.check_tokens(targets, 2)
        if tokens.shape != (B, T) or targets.shape != (B, T):
            raise TrainingError(f"inputs {tokens.shape} and targets {targets.shape} must both be ({B}, {T}), "
                                f"the batch this step was made for")
        return tokens, targets

    def forward_and_loss(self, tokens, targets) -> None:
        """The forward pass, then each position's loss and the gradient of their mean at the logits."""
        model, a, d, c = self.model, self.activations, self.activation_grads, self.model.config
        model.forward_launches(tokens, a)
        model.runner(None)("loss", model.backend.ops.cross_entropy_forward_backward, d.logits, self.losses, a.logits,
                           targets, self.B, self.T, c.vocab_size, c.padded_vocab_size)

    def backward(self, tokens) -> None:
        """Gradients zeroed where they gather, then the model's backward pass into them."""
        self.zero_grads()
        self.model.backward(self.activations, self.activation_grads, self.grad_views, tokens, self.B, self.T)

    def mean_loss(self) -> float:
        return float(self.model.backend.to_host(self.losses).mean())

    def zero_grads(self) -> None:
        for grad in self.grads.values():
            grad.fill(0)
        zero_activations(self.activation_grads, self.model.ACCUMULATED_GRADIENTS)

    def go_on_from(self, moments: dict, steps: int) -> None:
        """Take up a run saved after `steps` steps (its parameters the model's): AdamW's moments (name -> (m, v))
        and step count, so that the next step updates as that run's next one would have."""
        upload = self.model.backend.upload
        for name, (m, v) in self.moments.items():
            saved_m, saved_v = moments[name]
            m[...], v[...] = upload(saved_m), upload(saved_v)
        self.steps = steps

    def update(self) -> None:
        """AdamW on every parameter tensor, step count self.steps + 1."""
        self.steps += 1
        adamw_update_all(self.optimizer, self.model.backend.ops, self.model.parameters, self.grads, self.moments,
                         self.steps, self.model.runner(None))



class GraphTrainingStep(TrainingStep):
    """A TrainingStep whose forward pass (with the loss) and backward pass are each captured once as a CUDA graph,
    after a first step launched them (a capture cannot load kernels), then replayed: two launches a step, plus the
    optimizer's updates, launched since their step count changes. Everything runs on the step's own stream, and
    every buffer the graphs touch is the step's (its tokens and targets too), as a decoder's graph owns its."""

    def __init__(self, model: CausalLM, B: int, T: int, optimizer: AdamW = AdamW()):
        if model.backend.name != "kernels":
            raise TrainingError(f"CUDA graphs need the kernels backend, not {model.backend.name!r}")
        import cupy

        super().__init__(model, B, T, optimizer)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.tokens, self.targets = cupy.zeros((B, T), np.int32), cupy.zeros((B, T), np.int32)
        self.graphs = GraphPair(self.stream, lambda: self.forward_and_loss(self.tokens, self.targets),
                                lambda: self.backward(self.tokens))
        cupy.cuda.Device().synchronize()  # the buffers above were made on another stream

    def compute_gradients(self, inputs, targets) -> float:
        with self.stream:
            tokens, targets = self.checked_batch(inputs, targets)
            self.tokens[...], self.targets[...] = tokens, targets
            self.graphs.run()
            return self.mean_loss()

    def update(self) -> None:
        with self.stream:
            super().update()
        self.stream.synchronize()  # the host reads the weights on another stream (to save them), which waits for none
