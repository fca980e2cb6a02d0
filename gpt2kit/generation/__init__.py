"""Generation for any model family of the kit (a model_runtime.causal_lm.CausalLM).

* decoding: decoders (recompute, launched, CUDA graph, a graph per length), each owning its buffers.
* generate: greedy decoding and sampling, one prompt or a batch.
* beam_search: beam search, equal to transformers' generate(num_beams=...).
* executors: the Grape study's three ways of running generation (baseline, ptgraph, grape).
* grape: the third, every step on the device from graphs shared by every length (its choosing
  kernels are the kit's: kernels/sampling.py, kernels/beam_search.py, kernels/kv_cache_reorder.py).
"""
