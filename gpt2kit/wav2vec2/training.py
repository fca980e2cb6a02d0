"""Wav2Vec2 training steps on batches of different lengths: the Grape study's three executors
(model_runtime.executors).

    batches = SpeechBatches(config, B=4, seed=0)               # utterances of 1-16 s with labels, like a corpus
    step = make_speech_step(model, "grape", B=4, max_samples=batches.max_samples, max_labels=batches.max_labels)
    loss = step(*next(batches))      # audio (B, S), audio_lengths, labels (B, max_labels), label_lengths -> CTC sum

A step is the forward pass, the CTC loss (summed over the utterances, transformers'
ctc_loss_reduction "sum"), the backward pass and AdamW on every parameter. A batch is
padded to its longest utterance, rounded up to whole `bucket` seconds (SpeechBatches),
so its shape is (B, S) with S one of a few lengths; its labels to max_labels.

baseline  activations made for each batch's own shape, every host function launched
          from Python, as PyTorch's eager mode runs.
ptgraph   one forward graph (with the loss) and one backward graph per padded length S,
          captured the first time that length comes, each pair with activations of its
          own, as PyTorch's CUDA graphs bake the shapes of their launches in.
grape     a graph pair per padded length S and count of valid frames, all over one
          memory: the activations and gradients of the longest length (max_samples),
          made once, of which each pair's arrays are the first elements, and one memory
          pool for every capture's scratch. The graphs run one at a time on one stream,
          so they can share it: the step holds the memory of its longest length alone,
          where ptgraph holds every length's, and so it can afford a graph for each
          shape a batch really has: its transformer runs over the valid frames alone,
          packed into rows (Wav2Vec2ForCTC.packed_rows: rounded up to whole tiles of
          128), where ptgraph's runs over the padding too, a third of a typical batch.
          What else depends on a batch's utterances the kernels read from the device
          (each utterance's frames, group norm's counted frames, the labels' lengths,
          the packing's indices): attention skips the padded keys' tiles, and the CTC
          loss and group norm stop at the lengths.

For the same batch the three give the same loss and gradients (up to the order of
float32 sums over more rows). The optimizer's update is launched after the graphs: its
step count changes every step. Everything runs on the step's own stream.
"""

from __future__ import annotations

import numpy as np

from gpt2kit.kernel_runtime import KitError, ceil_div
from gpt2kit.model_runtime.executors import check_executor
from gpt2kit.training.step import AdamW, GraphPair, adamw_moments, adamw_update_all
from gpt2kit.wav2vec2.config import Wav2Vec2Config
from gpt2kit.wav2vec2.model import Wav2Vec2ForCTC

SAMPLE_RATE = 16_000


class SpeechStepError(KitError):
    """A step that cannot run on this model, or a batch that does not fit it."""


class SpeechBatches:
    """Endless seeded batches of B utterances like a read-speech corpus's: each 1-16 s of 16 kHz audio (noise of
    standard deviation 0.1), each with 10-16 characters a second as random ids in 1..V-1 (at most as many as fit
    its frames whatever the repeats). A batch is padded to its longest utterance rounded up to whole `bucket`
    seconds; labels to max_labels."""

    def __init__(self, config: Wav2Vec2Config, B: int, seed: int = 0, shortest: float = 1.0, longest: float = 16.0,
                 bucket: float = 1.0):
        if not (0 < shortest <= longest and bucket > 0 and B >= 1):
            raise SpeechStepError(f"utterances of {shortest}-{longest} s in buckets of {bucket} s, B={B}: need "
                                  "0 < shortest <= longest, bucket > 0 and B >= 1")
        self.config, self.B, self.rng = config, B, np.random.default_rng(seed)
        self.shortest, self.longest = int(shortest * SAMPLE_RATE), int(longest * SAMPLE_RATE)
        self.bucket = int(bucket * SAMPLE_RATE)
        self.max_samples = ceil_div(self.longest, self.bucket) * self.bucket
        self.max_labels = int(np.ceil(longest * 16))

    def __iter__(self):
        return self

    def __next__(self):
        B, c, rng = self.B, self.config, self.rng
        lengths = rng.integers(self.shortest, self.longest + 1, size=B)
        S = ceil_div(int(lengths.max()), self.bucket) * self.bucket
        audio = np.where(np.arange(S) < lengths[:, None], 0.1 * rng.standard_normal((B, S)), 0.0).astype(np.float32)
        fits = (c.frames(lengths) + 1) // 2  # any labels this many fit, repeats and all
        label_lengths = np.minimum(np.rint(lengths / SAMPLE_RATE * rng.uniform(10, 16, B)).astype(int), fits)
        label_lengths = np.minimum(label_lengths, self.max_labels).astype(np.int32)
        labels = rng.integers(1, c.vocab_size, size=(B, self.max_labels)).astype(np.int32)
        labels[np.arange(self.max_labels) >= label_lengths[:, None]] = 0
        return audio, lengths.astype(np.int32), labels, label_lengths


class SpeechStep:
    """The baseline: a batch's activations and gradients made for its shape, every host function launched."""

    name = "baseline"

    def __init__(self, model: Wav2Vec2ForCTC, B: int, max_labels: int, optimizer: AdamW = AdamW()):
        if model.backend.name != "kernels":
            raise SpeechStepError(f"the study's executors run the kernels backend, not {model.backend.name!r}")
        import cupy

        self.model, self.B, self.max_labels, self.optimizer = model, B, max_labels, optimizer
        self.grads = model.zero_grads()
        self.grad_views = model.views(self.grads)
        self.moments = adamw_moments(model.parameters, cupy)
        self.labels, self.label_lengths = cupy.zeros((B, max_labels), np.int32), cupy.zeros(B, np.int32)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.steps = 0
        cupy.cuda.Device().synchronize()  # the buffers above were made on another stream

    def __call__(self, audio, audio_lengths, labels, label_lengths, clock=None) -> float:
        """One step on a batch: the summed CTC loss before the update. A clock (generation.executors.StageClock)
        gets a mark as each stage begins on the step's stream: InputPrep, Model (forward, loss, backward),
        Optimizer."""
        mark = clock.mark if clock is not None else lambda stage: None
        with self.stream:
            mark("InputPrep")
            audio, frames, labels, label_lengths = self.checked(audio, audio_lengths, labels, label_lengths)
            upload = self.model.backend.upload
            self.labels[...], self.label_lengths[...] = upload(labels), upload(label_lengths)
            shape = self.shape(audio.shape[1], frames)
            a, d = self.buffers(shape)
            self.model.load_batch(a, audio, frames)
            mark("Model")
            self.run(a, d, shape)
            loss = float(a.losses.sum().get())
            mark("Optimizer")
            self.update()
            return loss

    def checked(self, audio, audio_lengths, labels, label_lengths):
        """The batch checked by the model, labels padded to max_labels."""
        model = self.model
        audio, frames = model.check_audio(audio, audio_lengths)
        labels, label_lengths = model.check_labels(labels, label_lengths, audio.shape[0])
        if audio.shape[0] != self.B or labels.shape[1] > self.max_labels:
            raise SpeechStepError(f"a batch of {audio.shape[0]} utterances with {labels.shape[1]} labels each does "
                                  f"not fit a step made for B={self.B} and {self.max_labels} labels")
        padded = np.zeros((self.B, self.max_labels), np.int32)
        padded[:, :labels.shape[1]] = labels
        return audio, frames, padded, label_lengths

    def shape(self, S: int, frames):
        """What a batch of S samples and these valid frames (B,) needs buffers, and a graph, of its own for: S."""
        return S

    def buffers(self, S: int):
        return self.model.new_activations(self.B, S), self.model.new_gradients(self.B, S)

    def run(self, a, d, shape) -> None:
        self.forward(a, d)
        self.backward(a, d)

    def forward(self, a, d) -> None:
        self.model.forward_launches(a)
        self.model.loss_launches(a, d, self.labels, self.label_lengths)

    def backward(self, a, d) -> None:
        for grad in self.grads.values():
            grad.fill(0)
        self.model.backward(a, d, self.grads)

    def update(self) -> None:
        """AdamW on every parameter tensor, step count self.steps + 1."""
        self.steps += 1
        adamw_update_all(self.optimizer, self.model.backend.ops, self.model.parameters, self.grads, self.moments,
                         self.steps)


class ShapeGraphs(GraphPair):
    """A step's forward graph (with the loss) and backward graph over activations a and gradients d, their scratch
    from `pool` (None: a pool of each graph's own)."""

    def __init__(self, step: SpeechStep, a, d, pool=None):
        super().__init__(step.stream, lambda: step.forward(a, d), lambda: step.backward(a, d), pool)
        self.a, self.d = a, d


class PerShapeGraphStep(SpeechStep):
    """ptgraph: ShapeGraphs per shape (padded length S)."""

    name = "ptgraph"

    def __init__(self, model: Wav2Vec2ForCTC, B: int, max_labels: int, optimizer: AdamW = AdamW()):
        super().__init__(model, B, max_labels, optimizer)
        self.pairs: dict = {}

    def buffers(self, shape):
        if shape not in self.pairs:
            self.pairs[shape] = self.new_pair(shape)
        return self.pairs[shape].a, self.pairs[shape].d

    def new_pair(self, S: int) -> ShapeGraphs:
        """The graph pair of padded length S, over buffers of its own."""
        return ShapeGraphs(self, *super().buffers(S))

    def run(self, a, d, shape) -> None:
        self.pairs[shape].run()


class SharedGraphStep(PerShapeGraphStep):
    """grape: ShapeGraphs per shape (padded length S, packed rows M), all over the activations and gradients made
    once for max_samples (each pair's arrays the first elements of theirs) and with one pool for their scratch."""

    name = "grape"

    def __init__(self, model: Wav2Vec2ForCTC, B: int, max_labels: int, max_samples: int,
                 optimizer: AdamW = AdamW()):
        import cupy

        super().__init__(model, B, max_labels, optimizer)
        self.max_samples = max_samples
        rows = B * model.config.frames(max_samples)
        with self.stream:
            self.longest = (model.new_activations(B, max_samples, rows=rows),
                            model.new_gradients(B, max_samples, rows=rows))
        self.pool = cupy.cuda.MemoryPool()

    def shape(self, S: int, frames) -> tuple[int, int]:
        """(S, M): the padded length, and the rows the batch's valid frames pack into."""
        if S > self.max_samples:
            raise SpeechStepError(f"a batch of {S} samples is longer than the {self.max_samples} this step's graphs "
                                  "were sized for")
        return S, self.model.packed_rows(frames, self.model.config.frames(S))

    def new_pair(self, shape: tuple[int, int]) -> ShapeGraphs:
        """The graph pair of a shape (S, M), over the first elements of the longest length's buffers."""
        (S, M), (a, d) = shape, self.longest
        return ShapeGraphs(self, self.model.new_activations(self.B, S, within=a, rows=M),
                           self.model.new_gradients(self.B, S, within=d, rows=M), self.pool)


def make_speech_step(model: Wav2Vec2ForCTC, executor: str, B: int, max_samples: int, max_labels: int,
                     optimizer: AdamW = AdamW()) -> SpeechStep:
    check_executor(executor)
    if executor == "grape":
        return SharedGraphStep(model, B, max_labels, max_samples, optimizer)
    return (PerShapeGraphStep if executor == "ptgraph" else SpeechStep)(model, B, max_labels, optimizer)
