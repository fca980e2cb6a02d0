"""The Grape study's executors, by name: the three ways of running a model's steps that it compares.

baseline  every host function launched from Python, on buffers made for each call's shape
          (PyTorch's eager mode).
ptgraph   a CUDA graph per shape, captured the first time the shape comes, each with buffers
          of its own (PyTorch's CUDA graphs bake the shapes of their launches in).
grape     one set of graphs for every shape, sized for the largest: what a call's shape
          changes, the kernels read from the device.

generation.executors runs them for text generation, wav2vec2.training for training steps.
"""

from gpt2kit.kernel_runtime import KitError

EXECUTORS = ("baseline", "ptgraph", "grape")


class ExecutorError(KitError):
    """An executor that does not exist or cannot run on this model."""


def check_executor(name: str) -> None:
    if name not in EXECUTORS:
        raise ExecutorError(f"no executor {name!r}; the executors are {', '.join(EXECUTORS)}")
