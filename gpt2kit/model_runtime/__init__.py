"""What every model family of the kit runs on.

* backends: the host functions a model calls (kernels, gold, or the NumPy reference)
  and ops, their typed list.
* causal_lm: CausalLM, the base of a decoder-only family (GPT-2, GPT-J): its KV cache,
  activations, token checks, and the order of a forward pass and of a decode step.
* families: the family registry: each family's entry, which family a model source
  names, and loading a text model of any family.
* tokenizer: GPT-2's BPE, which GPT-J reads too.
* executors: the names of the Grape study's three executors.

gpt2kit/generation/ (decoders, sampling, beam search, the Grape study's executors), gpt2kit/training/
and the families (gpt2/, gpt2kit/gptj/, gpt2kit/wav2vec2/) stand on this package; no family imports
another, and this package reaches them through the registry only.
"""
