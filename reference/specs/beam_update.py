"""beam_update_forward(candidate_scores, candidate_tokens, beam_scores, finished_scores, finished_step,
finished_beam, finished_token, is_finished, improvable, parents, chosen, tokens, rows, done, lengths, P, K, V,
prompt_length, max_length, length_penalty, early_stopping, end_of_text): one step of beam search's bookkeeping for
P prompts of K beams, after beam_candidates_forward (candidate_scores and candidate_tokens (P * K, 2K): each beam's
2K best, best first), as generation.beam_search does it on the host (transformers' rules). The search's state
(beam_scores, the K kept hypotheses finished_scores, _step, _beam, _token and is_finished, improvable (P), done) is
read and written; the new beams' parents and tokens go to parents and chosen (steps, P * K) at the step
lengths[0] - prompt_length, their tokens and the rows they continue to tokens and rows. Nothing changes once done[0]
is set. The kit provides it whole: kernels/beam_search.py."""

import numpy as np

from gpt2kit.reference.spec import Arguments, Spec, exact

NEGATIVE = np.float32(-1e9)  # transformers' "impossible" score: beams that must not go on, hypotheses never made


def build(case, rng):
    """The variant's words, joined by '-': early or never (early_stopping True or "never", else False), penalty0 or
    penalty2 (length_penalty 0 or 2, else 1), finished (every prompt has K hypotheses), unimprovable (the first
    prompt closed, the last closing at this step), done (the search is over)."""
    P, K, V, prompt_length, max_length, step = (case.size[k] for k in ("P", "K", "V", "prompt_length", "max_length",
                                                                        "step"))
    words = case.variant.split("-")
    length_penalty = 0.0 if "penalty0" in words else 2.0 if "penalty2" in words else 1.0
    early_stopping = True if "early" in words else "never" if "never" in words else False
    end_of_text = V - 1  # as GPT-2's, the last token
    if step == 0:
        state = first_state(P, K)
    else:
        state = searched_state(rng, P, K, step, length_penalty, end_of_text, every_finished="finished" in words,
                               settled="unimprovable" in words)
    if "unimprovable" in words:  # the first prompt could no longer beat its hypotheses: it takes no new ones
        state["improvable"][0] = 0
    candidate_scores, candidate_tokens = candidates(rng, state["beam_scores"], K, V, end_of_text)
    # the steps before this one hold their beams; the steps after it an earlier search's, which must stay
    steps = max_length - prompt_length
    state["parents"] = rng.integers(0, K, (steps, P * K)).astype(np.int32)
    state["chosen"] = rng.integers(0, V, (steps, P * K)).astype(np.int32)
    if "done" in words:  # the search ended at an earlier step: everything keeps what it holds
        state["done"] = np.array([prompt_length + step], np.int32)
        state["tokens"] = rng.integers(0, V, P * K).astype(np.int32)
        state["rows"] = rng.integers(0, P * K, P * K).astype(np.int32)
    else:  # -1 marks what the step writes
        state["done"] = np.zeros(1, np.int32)
        state["parents"][step] = state["chosen"][step] = -1
        state["tokens"], state["rows"] = np.full(P * K, -1, np.int32), np.full(P * K, -1, np.int32)
    outputs = {name: state[name].shape for name in SPEC.outputs}
    return Arguments(dict(candidate_scores=candidate_scores, candidate_tokens=candidate_tokens, **outputs,
                          lengths=np.array([prompt_length + step], np.int32), P=P, K=K, V=V,
                          prompt_length=prompt_length, max_length=max_length, length_penalty=length_penalty,
                          early_stopping=early_stopping, end_of_text=end_of_text), initial=state)


def first_state(P, K) -> dict:
    """The state at the first step (generation.grape.start_beams): one beam of each prompt at 0, the others at -1e9
    (every beam is the prompt alone: keep one), no hypotheses (the slots' beams and tokens as allocated)."""
    beam_scores = np.zeros((P, K), np.float32)
    beam_scores[:, 1:] = NEGATIVE
    return dict(beam_scores=beam_scores.reshape(-1), finished_scores=np.full(P * K, NEGATIVE),
                finished_step=np.full(P * K, -1, np.int32), finished_beam=np.zeros(P * K, np.int32),
                finished_token=np.zeros(P * K, np.int32), is_finished=np.zeros(P * K, np.int32),
                improvable=np.ones(P, np.int32))


def searched_state(rng, P, K, step, length_penalty, end_of_text, every_finished, settled) -> dict:
    """A state `step` steps into a search: running beams best first; per prompt a random number of hypotheses
    (all K when every_finished), best first, made at earlier steps, with scores about those of the hypotheses
    that end now, so that new ones beat some; the other slots as never filled. settled: the last prompt has K
    hypotheses better than its beams can do, so that it stops improving at this step, and those between it and the
    first have none yet, so that they go on."""
    beam_scores = -(1.5 * step + np.cumsum(rng.exponential(0.7, (P, K)), axis=1))
    ending_now = (beam_scores[:, :1] - 1.0) / (step + 1) ** length_penalty
    made = np.full(P, K) if every_finished else rng.integers(0, K + 1, P)
    ratios = rng.uniform(0.5, 1.5, (P, K))
    if settled:
        made[1:-1], made[-1], ratios[-1] = 0, K, rng.uniform(0.5, 0.8, K)
    finished = np.arange(K) < made[:, None]
    finished_scores = np.where(finished, ending_now * ratios, NEGATIVE)
    finished_scores = -np.sort(-finished_scores, axis=1)
    return dict(beam_scores=beam_scores.astype(np.float32).reshape(-1),
                finished_scores=finished_scores.astype(np.float32).reshape(-1),
                finished_step=np.where(finished, rng.integers(0, step, (P, K)), -1).astype(np.int32).reshape(-1),
                finished_beam=np.where(finished, rng.integers(0, K, (P, K)), 0).astype(np.int32).reshape(-1),
                finished_token=np.where(finished, end_of_text, 0).astype(np.int32).reshape(-1),
                is_finished=finished.astype(np.int32).reshape(-1), improvable=np.ones(P, np.int32))


def candidates(rng, beam_scores, K, V, end_of_text):
    """Each beam's 2K best (score, token), best first, as beam_candidates_forward writes them: the beam's score
    plus decreasing log-probabilities, distinct tokens, the end of text among most beams', often near the top (so
    beams end); a beam at -1e9 has all its candidates at -1e9 (float32 holds no log-probability beside it), so
    tokens 0..2K-1."""
    count = 2 * K
    scores = np.empty((beam_scores.size, count), np.float32)
    tokens = np.empty((beam_scores.size, count), np.int32)
    for row, beam_score in enumerate(beam_scores):
        if beam_score == NEGATIVE:
            scores[row], tokens[row] = NEGATIVE, np.arange(count)
            continue
        log_probs = -(rng.exponential(0.5) + np.cumsum(rng.exponential(1.0, count)))
        scores[row] = beam_score + log_probs
        tokens[row] = rng.choice(end_of_text, count, replace=False)  # any token but the end of text
        if rng.random() < 0.75:
            tokens[row, min(rng.geometric(0.4) - 1, count - 1)] = end_of_text
        order = np.lexsort((tokens[row], -scores[row]))  # best first; ties (float32 may make them) by token
        scores[row], tokens[row] = scores[row, order], tokens[row, order]
    return scores, tokens


SPEC = Spec(
    function="beam_update_forward", module="beam_search",
    outputs=("beam_scores", "finished_scores", "finished_step", "finished_beam", "finished_token", "is_finished",
             "improvable", "parents", "chosen", "tokens", "rows", "done"), build=build,
    # the kernel makes the host's decisions in the host's float32 operations, and the references make them in the
    # same operations (reference/cpu.py): every output is exact
    error_bound=exact, graded=False, provided=True,
    cases=(
        dict(P=1, K=5, V=50257, prompt_length=7, max_length=40, step=0),     # GPT-2, beam 5: the first step
        dict(P=2, K=3, V=1000, prompt_length=4, max_length=30, step=6),      # mid-search, some hypotheses made
        dict(P=3, K=1, V=50, prompt_length=2, max_length=12, step=3),        # one beam
        dict(P=2, K=16, V=5000, prompt_length=5, max_length=64, step=9),     # the most beams, MAX_BEAMS
        dict(P=2, K=4, V=100, prompt_length=3, max_length=12, step=8),       # the last step: every candidate ends
        dict(P=3, K=3, V=200, prompt_length=4, max_length=20, step=5, variant="early"),
        dict(P=2, K=3, V=200, prompt_length=4, max_length=20, step=5, variant="early-finished"),  # all closed: done
        dict(P=2, K=4, V=200, prompt_length=4, max_length=20, step=5, variant="never"),
        dict(P=2, K=4, V=200, prompt_length=4, max_length=20, step=5, variant="never-penalty2"),
        dict(P=2, K=4, V=200, prompt_length=4, max_length=20, step=5, variant="never-penalty0"),
        dict(P=2, K=3, V=300, prompt_length=6, max_length=24, step=4, variant="penalty0"),
        dict(P=2, K=3, V=300, prompt_length=6, max_length=24, step=4, variant="penalty2"),
        dict(P=3, K=3, V=300, prompt_length=6, max_length=24, step=4, variant="unimprovable"),  # closed, open, closing
        dict(P=2, K=2, V=300, prompt_length=6, max_length=24, step=4, variant="unimprovable"),  # all closed: done
        dict(P=2, K=3, V=300, prompt_length=6, max_length=24, step=4, variant="done"),
    ),
)
