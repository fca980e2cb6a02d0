"""Where a Wav2Vec2 training step's GPU time goes: host function by host function.

    python -m gpt2kit.benchmarks.speech_profile [--batch 4] [--seconds 16] [--runs 5] [--variant NAME ...]

Wav2Vec2ForCTC base (random weights), float32, on the kernels backend: one training
step (forward, CTC loss, backward) of `--batch` utterances of `--seconds` each (with
`--variant`'s solution variants standing in for their host functions, as the Grape
study's `--variant` does), run
`--runs` times after a warm-up, with a CUDA event recorded before and after every
host function call. A call's time is its median over the runs. The convolutions and
matmuls, which are bound by arithmetic, also show their TFLOP/s, against cuBLAS's
float32 matmul measured here on a 4096 x 4096 x 4096 product ("%cuBLAS"); they are
listed again shape by shape. The optimizer is left out: it is the same for every
length and shows in the Grape study's breakdown (wav2vec2_train_profile.csv).
"""

import sys

import numpy as np

from gpt2kit.benchmarks.call_profile import cublas_float32_tflops, print_tables, profiled_runs
from gpt2kit.kernel_runtime.commands import POSITIVE_INT, OneLineArgumentParser, run_command
from gpt2kit.kernel_runtime.device import exit_without_gpu
from gpt2kit.reference.variants import variant_argument

SAMPLE_RATE = 16000


def main(argv=None) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.benchmarks.speech_profile",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=POSITIVE_INT, default=4, help="utterances a step (default %(default)s)")
    parser.add_argument("--seconds", type=POSITIVE_INT, default=16,
                        help="each utterance's length (default %(default)s)")
    parser.add_argument("--runs", type=POSITIVE_INT, default=5, help="timed steps (default %(default)s)")
    parser.add_argument("--variant", nargs="*", default=[], type=variant_argument,
                        help="solution variants to run the kit's kernels on (matmul_3xtf32, for instance)")
    args = parser.parse_args(argv)
    exit_without_gpu("gpt2kit.benchmarks.speech_profile", "cannot run")
    return run_command("gpt2kit.benchmarks.speech_profile", lambda: benchmark(args), error_status=2)


def benchmark(args) -> int:
    import cupy

    from gpt2kit.model_runtime.backends import make_backend
    from gpt2kit.wav2vec2.checkpoint import random_parameters
    from gpt2kit.wav2vec2.config import PRESETS
    from gpt2kit.wav2vec2.model import Wav2Vec2ForCTC

    config = PRESETS["base"]
    backend = make_backend("kernels", variants=tuple(args.variant))
    model = Wav2Vec2ForCTC(config, random_parameters(config, seed=0), backend=backend)
    B, S = args.batch, args.seconds * SAMPLE_RATE
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    with_variants = f" with {', '.join(args.variant)}" if args.variant else ""
    print(f"one training step of Wav2Vec2 base, float32, {B} utterances of {args.seconds} s{with_variants}, on {device}",
          flush=True)
    ceiling = cublas_float32_tflops()
    print(f"cuBLAS float32 (4096^3 matmul): {ceiling:.1f} TFLOP/s")
    rng = np.random.default_rng(0)
    audio = rng.standard_normal((B, S)).astype(np.float32)
    audio_lengths = np.full(B, S, np.int32)
    label_lengths = np.full(B, 12 * args.seconds, np.int32)  # 12 characters a second: every utterance feasible
    labels = rng.integers(1, config.vocab_size, (B, int(label_lengths.max())), dtype=np.int32)
    a, d, grads = model.new_activations(B, S), model.new_gradients(B, S), model.zero_grads()

    def run_step():
        model.forward(audio, audio_lengths, a)
        model.loss(labels, label_lengths, a, d)
        model.backward(a, d, grads)

    calls, ms = profiled_runs(model.backend.ops, run_step, args.runs)
    print_tables(calls, ms, ceiling)
    return 0


if __name__ == "__main__":
    sys.exit(main())
