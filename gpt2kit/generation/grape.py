"""Grape: generation whose every step, the choosing included, runs on the device from graphs shared by
every length (the third executor of generation.executors).

    executor = make_executor(model, "grape")       # a GrapeExecutor
    new_tokens = executor.generate(prompts, max_new_tokens, sampling)
    found = executor.beam_search(prompts, max_new_tokens, BeamSearch(5))

One graph serves every length, because the kit's kernels read lengths from device
memory. The work after the logits runs on the device too, in the kit's kernels
(kernels/sampling.py, kernels/beam_search.py, kernels/kv_cache_reorder.py):
log-softmax, top-k / top-p, sampling with the device's own seeded generator, beam
search's bookkeeping, the KV cache's reordering for beams (in place, no scratch),
and writing the chosen tokens where the next step reads them. A step never waits
for the host: the host queues steps and looks at the results every CHECK_EVERY
steps, one look behind, to stream tokens and to stop; steps queued past the end
change nothing.

A grape step is a few graphs launched back to back (InputPrep: the cache's
reordering; Model: the decode step; BeamSearch: choosing), so that CUDA events can
stand between the stages when a clock is given. Beam search needs no graphs bucketed
by length: the reordering copies only the positions a row does not yet hold in common
with its parent (the lineage's counts, kept on the device), read from the device, all
layers in one launch. Grape drives a launched decoder (generation.decoding) through its device-side
interface (launch_step, stepped, step_logits, lengths, reorder_on_device) and never
touches its cache or activations itself.
"""

from __future__ import annotations

import types

import numpy as np

from gpt2kit.generation.beam_search import NEGATIVE, BeamSearch, Hypotheses, equal_length_prompts, hypotheses
from gpt2kit.generation.decoding import captured, make_decoder
from gpt2kit.generation.generate import GREEDY, Sampling, fit_prompt, warn_on_stderr
from gpt2kit.kernel_runtime import KitError
from gpt2kit.model_runtime.causal_lm import CausalLM
from gpt2kit.reference.registry import host_functions, kernel_module

CHECK_EVERY = 16  # steps between looks at the device's progress


class GrapeError(KitError):
    """A search grape cannot run (too many beams, too long)."""


class Stage:
    """Launches that run eagerly the first time (which compiles and loads their kernels),
    are captured as a CUDA graph the second, and replay the graph from then on."""

    def __init__(self, launch, key=None):
        self.launch, self.key, self.ran, self.graph = launch, key, False, None  # key: what the launches bake in

    def __call__(self, stream) -> None:
        if self.graph is None and self.ran:
            self.graph, _ = captured(stream, self.launch)
        if self.graph is not None:
            self.graph.launch(stream)
        else:
            self.launch()
            self.ran = True


class HostLooks:
    """Copies of one device array queued to the host behind the steps queued so far, each read one look
    later. Two pinned buffers and their events take turns; they are made with the run, so that a look
    inside a timed generation allocates nothing."""

    def __init__(self, array, stream):
        import cupy
        import cupyx

        self.array, self.stream = array, stream
        self.buffers = [cupyx.empty_pinned(array.shape, array.dtype) for _ in range(2)]
        self.copied = [cupy.cuda.Event() for _ in range(2)]
        self.turn = 0

    def queue(self) -> int:
        """Queue a copy into the next buffer (the one read a look ago); returns its number for read."""
        import cupy

        turn, self.turn = self.turn, 1 - self.turn
        cupy.cuda.runtime.memcpyAsync(self.buffers[turn].ctypes.data, self.array.data.ptr, self.array.nbytes,
                                      cupy.cuda.runtime.memcpyDeviceToHost, self.stream.ptr)
        self.copied[turn].record(self.stream)
        return turn

    def read(self, turn: int) -> np.ndarray:
        self.copied[turn].synchronize()  # waits for the steps queued before the look, not for those after it
        return self.buffers[turn]


class GrapeExecutor:
    """Graphs shared by every length, choosing on the device (see the module docstring)."""

    name = "grape"

    def __init__(self, model: CausalLM):
        self.model = model
        self.runs: dict[int, GrapeRun] = {}

    def run(self, rows: int) -> "GrapeRun":
        if rows not in self.runs:
            self.runs[rows] = GrapeRun(self.model, rows)
        return self.runs[rows]

    def generate(self, prompts, max_new_tokens: int, sampling: Sampling = GREEDY, *,
                 stop_at_end_of_text: bool = True, on_token=None) -> list[list[int]]:
        context = self.model.config.max_T
        prompts = [fit_prompt(list(p), max_new_tokens, context, warn_on_stderr) for p in prompts]
        if max_new_tokens == 0:
            return [[] for _ in prompts]
        return self.run(len(prompts)).sample(prompts, max_new_tokens, sampling, stop_at_end_of_text, on_token)

    def beam_search(self, prompts, max_new_tokens: int, search: BeamSearch, clock=None) -> Hypotheses:
        prompts = equal_length_prompts(prompts).astype(np.int32)
        most = kernel_module("beam_search").MAX_BEAMS
        if search.num_beams > most:
            raise GrapeError(f"grape runs at most {most} beams, not {search.num_beams}")
        return self.run(prompts.shape[0] * search.num_beams).beam_search(prompts, max_new_tokens, search, clock)


class GrapeRun:
    """What grape keeps for one number of rows: a decoder (cache and activations), the
    device buffers the selection reads and writes, the stages' graphs, and its stream."""

    def __init__(self, model: CausalLM, rows: int):
        import cupy

        self.model, self.rows = model, rows
        self.stream = cupy.cuda.Stream(non_blocking=True)
        c = model.config
        with self.stream:  # everything grape runs, it runs on this stream
            self.decoder = make_decoder(model, "launched", batch_size=rows)
            self.tokens = cupy.zeros(rows, np.int32)
            self.sequences = cupy.zeros((rows, c.max_T), np.int32)
            self.seed = cupy.zeros(1, np.uint64)
            candidates = rows * 2 * kernel_module("beam_search").MAX_BEAMS
            self.beam = types.SimpleNamespace(**{
                name: cupy.zeros(size, dtype) for name, size, dtype in (
                    ("candidate_scores", candidates, np.float32), ("candidate_tokens", candidates, np.int32),
                    ("beam_scores", rows, np.float32), ("finished_scores", rows, np.float32),
                    ("finished_step", rows, np.int32), ("finished_beam", rows, np.int32),
                    ("finished_token", rows, np.int32), ("is_finished", rows, np.int32),
                    ("improvable", rows, np.int32), ("parents", rows * c.max_T, np.int32),
                    ("chosen", rows * c.max_T, np.int32), ("rows", rows, np.int32), ("done", 1, np.int32),
                    ("shared", rows * kernel_module("beam_search").MAX_BEAMS, np.int32), ("starts", rows, np.int32))})
        self.beam.tokens = self.tokens  # the beams' tokens are the next step's input
        self.sequence_looks = HostLooks(self.sequences, self.stream)
        self.done_looks = HostLooks(self.beam.done, self.stream)
        self.kernels = host_functions(("sample_forward", "beam_candidates_forward", "beam_update_forward",
                                       "kv_cache_lineage_forward"))
        self.model_stage = Stage(lambda: self.decoder.launch_step(self.tokens))
        self.choose_stages: dict = {}   # selection parameters -> Stage (the parameters are baked in)
        self.reorder_stage = None       # the last beam search's: its group of K rows is baked in

    def stages(self) -> list[Stage]:
        """The stages made so far: the model step's, the choosing's, and the reordering's once a beam search ran."""
        return [self.model_stage, *([self.reorder_stage] if self.reorder_stage else []), *self.choose_stages.values()]

    # ------------------------------------------------------------------ sampling and greedy

    def sample(self, prompts, max_new_tokens, sampling: Sampling, stop_at_end_of_text, on_token):
        seed = sampling.seed if sampling.seed is not None else int(np.random.SeedSequence().entropy % 2**63)
        key = ("sample", sampling.temperature, sampling.top_k, sampling.top_p)
        step_logits = self.decoder.step_logits
        choose = self._choose_stage(key, lambda: self._sample(step_logits, step_logits.shape[-1], sampling))
        starts = [len(p) for p in prompts]
        stop_token = self.model.config.end_of_text if stop_at_end_of_text else None
        streamed = [0] * self.rows
        produced = 1

        def stream_until(sequences: np.ndarray, count: int) -> bool:
            """Stream each row's tokens up to `count` new ones; True when every row has ended."""
            all_ended = True
            for row, start in enumerate(starts):
                new = _row_tokens(sequences[row, start:start + count], stop_token)
                if on_token is not None:
                    for token in new[streamed[row]:]:
                        on_token(row, int(token))
                streamed[row] = len(new)
                all_ended &= len(new) < count or (bool(new) and new[-1] == stop_token)
            return all_ended

        with self.stream:
            self.seed.fill(seed)
            logits = self.decoder.prefill_on_device(prompts)
            self._sample(logits, logits.shape[1], sampling)
            pending = None
            while produced < max_new_tokens:
                self.decoder.stepped()
                self.model_stage(self.stream)
                choose(self.stream)
                produced += 1
                if produced % CHECK_EVERY == 0 and produced < max_new_tokens:
                    look = (self.sequence_looks.queue(), produced)
                    if (pending is not None and stream_until(self.sequence_looks.read(pending[0]), pending[1])
                            and stop_at_end_of_text):
                        break
                    pending = look
            self.stream.synchronize()
            sequences = self.sequences.get()
        stream_until(sequences, produced)
        return [_row_tokens(sequences[row, start:start + produced], stop_token)[:max_new_tokens]
                for row, start in enumerate(starts)]

    def _sample(self, logits, stride, sampling: Sampling) -> None:
        c = self.model.config
        self.kernels.sample_forward(self.tokens, self.sequences, logits, self.decoder.lengths, self.rows,
                                    c.vocab_size, stride, c.max_T, sampling.temperature, sampling.top_k,
                                    sampling.top_p, self.seed)

    # ------------------------------------------------------------------ beam search

    def beam_search(self, prompts: np.ndarray, max_new_tokens: int, search: BeamSearch, clock) -> Hypotheses:
        P, prompt_length = prompts.shape
        K, c, s = search.num_beams, self.model.config, self.beam
        if max_new_tokens < 1 or prompt_length + max_new_tokens > c.max_T:
            raise GrapeError(f"beam search of {max_new_tokens} new tokens after {prompt_length} does not fit "
                             f"the context of {c.max_T}")
        max_length = prompt_length + max_new_tokens
        key = ("beam", P, K, prompt_length, max_length, search.length_penalty, search.early_stopping)
        step_logits = self.decoder.step_logits
        choose = self._choose_stage(key, lambda: self._choose_beams(step_logits, step_logits.shape[-1], P, K,
                                                                     prompt_length, max_length, search))
        if self.reorder_stage is None or self.reorder_stage.key != K:
            self.reorder_stage = Stage(lambda: self._reorder(K), key=K)
        mark = clock.mark if clock is not None else lambda stage: None
        with self.stream:
            self.start_beams(prompts, search, max_length, mark)
            pending = None
            for step in range(1, max_new_tokens):
                mark("InputPrep")
                self.reorder_stage(self.stream)
                mark("Model")
                self.decoder.stepped()
                self.model_stage(self.stream)
                mark("BeamSearch")
                choose(self.stream)
                if step % CHECK_EVERY == 0:
                    look = self.done_looks.queue()
                    if pending is not None and self.done_looks.read(pending)[0]:
                        break
                    pending = look
            mark("end")
            self.stream.synchronize()
            final_length = int(s.done.get()[0])
            steps = final_length - prompt_length
            parents = s.parents.get()[:steps * P * K].reshape(steps, P * K)
            chosen = s.chosen.get()[:steps * P * K].reshape(steps, P * K)
            finished = rebuild_finished(prompts, parents, chosen, s.finished_step.get(), s.finished_beam.get(),
                                        s.finished_token.get(), K, max_length, c.end_of_text)
            scores = s.finished_scores.get().reshape(P, K)
        return hypotheses(finished, scores, prompt_length, steps, c.end_of_text)

    def start_beams(self, prompts: np.ndarray, search: BeamSearch, max_length: int, mark=lambda stage: None) -> None:
        """Reset the search's state, prefill, and choose the first tokens (on the run's stream)."""
        P, prompt_length = prompts.shape
        K, s = search.num_beams, self.beam
        mark("InputPrep")
        start = np.zeros((P, K), np.float32)
        start[:, 1:] = NEGATIVE  # at first every beam is the same: keep one
        s.beam_scores.set(start.reshape(-1))
        s.finished_scores.fill(NEGATIVE)
        s.finished_step.fill(-1)
        s.is_finished.fill(0)
        s.improvable.fill(1)
        s.done.fill(0)
        s.shared.fill(0)  # the rows' prompts are prefilled each alone: no position is known equal
        mark("Model")
        logits = self.decoder.prefill_on_device(np.repeat(prompts, K, axis=0))
        mark("BeamSearch")
        self._choose_beams(logits, logits.shape[1], P, K, prompt_length, max_length, search)

    def _choose_beams(self, logits, stride, P, K, prompt_length, max_length, search: BeamSearch) -> None:
        c, s = self.model.config, self.beam
        candidates, steps = self.rows * 2 * K, (max_length - prompt_length) * self.rows
        scores, tokens = s.candidate_scores[:candidates], s.candidate_tokens[:candidates]
        self.kernels.beam_candidates_forward(scores, tokens, logits, s.beam_scores, s.done, self.rows, c.vocab_size,
                                             stride, 2 * K)
        self.kernels.beam_update_forward(scores, tokens, s.beam_scores, s.finished_scores, s.finished_step,
                                         s.finished_beam, s.finished_token, s.is_finished, s.improvable[:P],
                                         s.parents[:steps], s.chosen[:steps], s.tokens, s.rows, s.done,
                                         self.decoder.lengths[:1], P, K, c.vocab_size, prompt_length, max_length,
                                         search.length_penalty, search.early_stopping, c.end_of_text)

    def _reorder(self, K: int) -> None:
        """Each row becomes a copy of its parent from the positions they do not yet hold in common."""
        s = self.beam
        self.kernels.kv_cache_lineage_forward(s.shared[:self.rows * K], s.starts, s.rows, self.decoder.lengths, s.done,
                                              self.rows, K)
        self.decoder.reorder_on_device(s.rows, s.starts, s.done, K)

    def _choose_stage(self, key, launch) -> Stage:
        """The choosing stage for these parameters (baked into its graph); the last one is kept."""
        if key not in self.choose_stages:
            self.choose_stages = {key: Stage(launch)}
        return self.choose_stages[key]


def _row_tokens(new: np.ndarray, stop_token: int | None) -> list[int]:
    """A row's new tokens, up to and with the first stop_token (the end of text) when one is given."""
    tokens = [int(t) for t in new]
    if stop_token in tokens:
        return tokens[:tokens.index(stop_token) + 1]
    return tokens


def rebuild_finished(prompts: np.ndarray, parents: np.ndarray, chosen: np.ndarray, finished_step: np.ndarray,
                     finished_beam: np.ndarray, finished_token: np.ndarray, num_beams: int, max_length: int,
                     end_of_text: int) -> np.ndarray:
    """The kept hypotheses as sequences (P, K, max_length) padded with end_of_text, from back-pointers.

    parents[s, p*K + i] and chosen[s, p*K + i]: the beam that beam i of prompt p came from at
    step s, and the token it took. A hypothesis made at step s from beam b with token t is
    beam b's path through the steps before s, then t; step -1 marks a slot never filled,
    which is end_of_text throughout (as generation.beam_search starts it)."""
    P, prompt_length = prompts.shape
    K = num_beams
    finished = np.full((P, K, max_length), end_of_text, np.int64)
    for p in range(P):
        for i in range(K):
            step, beam = int(finished_step[p * K + i]), int(finished_beam[p * K + i])
            if step < 0:
                continue
            path = [int(finished_token[p * K + i])]
            for s in range(step - 1, -1, -1):
                path.append(int(chosen[s, p * K + beam]))
                beam = int(parents[s, p * K + beam])
            finished[p, i, :prompt_length] = prompts[p]
            finished[p, i, prompt_length:prompt_length + len(path)] = path[::-1]
    return finished
