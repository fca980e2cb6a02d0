"""The README's Wav2Vec2 example runs as it is written: every name it uses it defines, and each call takes what it
is given (a forward pass, the loss and the backward pass on the reference backend, without a GPU)."""

import numpy as np

from tests.readme import READMES, code_blocks


def test_the_wav2vec2_example_runs_as_written():
    example, = [block for block in code_blocks(READMES["students"].read_text(), "python") if "wav2vec2" in block]
    # the test size (the base model's kernels and strides, everything else small), so that it runs in a second
    assert 'load("random:base")' in example
    names = {}
    exec(example.replace('load("random:base")', 'load("random:tiny")'), names)
    B, V = len(names["audio_lengths"]), names["config"].vocab_size
    assert names["logits"].shape == (B, 49, V) and np.isfinite(names["loss"])
    assert all(np.abs(grad).max() > 0 for grad in names["grads"].values())
