"""What every model family of the kit runs on.

* backends: the host functions a model calls (kernels, gold, or the NumPy reference)
  and ops, their typed list.
* causal_lm: CausalLM, the base of a decoder-only family (GPT-2, GPT-J): its KV cache,
  activations, token checks, and the order of a forward pass and of a decode step.

The families (gpt2/, gptj/) and generation/ (decoders, sampling, beam search, the
Grape study's executors) stand on this package and on nothing of each other's.
"""
