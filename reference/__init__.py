"""What is right, and how it is checked.

* reference.cpu: NumPy versions of every host function, accumulating in float64.
  The definition of what each host function must compute (the oracle).
* reference.gold: the same functions built only from CuPy library operations
  (cuBLAS matmul, elementwise expressions, reductions): an independent GPU answer.
* reference.spec, reference.specs/, reference.registry: one spec per host function
  (its module, outputs, input builder, error bound, cases, quick-check case and
  benchmark sizes) and everything derived from them.
* reference.execution: calling a host function on a case and recording what it did.
* reference.judging: the oracle's answer, the error bounds, the comparison.
* reference.verify: the quick check, python -m gpt2kit.reference.verify.

A process that runs a submission for the grader imports spec, registry and
execution only: the oracle and gold never enter it.
"""
