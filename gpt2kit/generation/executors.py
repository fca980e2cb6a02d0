"""Generation executors: the three ways of running generation that the Grape study compares
(model_runtime.executors names them).

    executor = make_executor(model, "grape")
    new_tokens = executor.generate(prompts, max_new_tokens, sampling)          # greedy or sampling
    found = executor.beam_search(prompts, max_new_tokens, BeamSearch(5))      # generation.beam_search.Hypotheses

baseline  every step's kernels launched from Python; tokens chosen on the host, so the
          GPU waits for the host every step.
ptgraph   one CUDA graph per KV-cache length, captured the first time the length comes
          (PyTorch's graphs bake a length into their launches); each graph holds
          activations of its own. Tokens chosen on the host, as with PyTorch graphs.
grape     one graph serves every length, and the choosing runs on the device too
          (generation.grape).

For the same inputs, greedy and beam tokens are the same on all three.
All three run the KV cache's kernels: where those are still a starter kit's TODO stubs,
the first call stops with one line naming them (generation.decoding.DecoderError).
"""

from __future__ import annotations

from gpt2kit.generation.beam_search import BeamSearch, Hypotheses, beam_search
from gpt2kit.generation.decoding import make_decoder
from gpt2kit.generation.generate import GREEDY, Sampling, generate_batch
from gpt2kit.generation.grape import GrapeExecutor
from gpt2kit.model_runtime.causal_lm import CausalLM
from gpt2kit.model_runtime.executors import ExecutorError, check_executor

STAGES = ("InputPrep", "Model", "BeamSearch")


class StageClock:
    """CUDA events recorded as each stage begins, on the current stream; the time of a
    stage is the GPU timeline up to the next mark. A stage the host runs shows as the
    GPU waiting: its event cannot be reached before the host has queued it."""

    def __init__(self):
        self.marks: list[tuple[str, object]] = []

    def mark(self, stage: str) -> None:
        import cupy

        event = cupy.cuda.Event()
        event.record()
        self.marks.append((stage, event))

    def milliseconds(self) -> dict[str, float]:
        """Milliseconds per stage, summed over the marks so far (the last mark ends the timeline)."""
        import cupy

        totals = dict.fromkeys(STAGES, 0.0)
        self.marks[-1][1].synchronize()
        for (stage, start), (_, end) in zip(self.marks, self.marks[1:]):
            totals[stage] = totals.get(stage, 0.0) + cupy.cuda.get_elapsed_time(start, end)
        return totals


class HostExecutor:
    """baseline and ptgraph: a decoder per batch size, kept across calls; choosing on the host."""

    def __init__(self, model: CausalLM, name: str, decoder_kind: str):
        self.model, self.name, self.decoder_kind = model, name, decoder_kind
        self.decoders: dict[int, object] = {}

    def decoder(self, rows: int):
        if rows not in self.decoders:
            self.decoders[rows] = make_decoder(self.model, self.decoder_kind, batch_size=rows)
        return self.decoders[rows]

    def generate(self, prompts, max_new_tokens: int, sampling: Sampling = GREEDY, *,
                 stop_at_end_of_text: bool = True, on_token=None) -> list[list[int]]:
        return generate_batch(self.model, prompts, max_new_tokens, sampling, decoder=self.decoder(len(prompts)),
                              stop_at_end_of_text=stop_at_end_of_text, on_token=on_token)

    def beam_search(self, prompts, max_new_tokens: int, search: BeamSearch, clock=None) -> Hypotheses:
        decoder = self.decoder(len(prompts) * search.num_beams)
        with decoder.stream:  # the clock's events on the decoder's stream
            return beam_search(self.model, prompts, max_new_tokens, search, decoder=decoder, clock=clock)


def make_executor(model: CausalLM, name: str):
    """The executor called `name` (one of model_runtime.executors.EXECUTORS) for this model."""
    check_executor(name)
    if name != "baseline" and model.backend.name != "kernels":
        raise ExecutorError(f"{name} runs CUDA graphs of the kit's kernels: it needs the kernels backend, "
                            f"not {model.backend.name!r}")
    if name == "baseline":
        return HostExecutor(model, name, "launched")
    if name == "ptgraph":
        return HostExecutor(model, name, "graph_per_length")
    return GrapeExecutor(model)
