"""Oracles for the kernels.

* reference.cpu: NumPy versions of every host function, accumulating in float64.
  The semantic definition of what each kernel must compute.
* reference.gold: the same functions built only from CuPy library operations
  (cuBLAS matmul, elementwise expressions, reductions): an independent GPU answer.
* reference.checks: the test cases, the comparison and its tolerances, shared by
  the tests, the quick check (python -m reference.verify) and the grader.
"""
