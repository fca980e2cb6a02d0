"""GPT-2's forward-pass kernels, one module each, as CUDA C compiled at run time.

Every host function takes CuPy float32 C-contiguous arrays (token ids int32), writes
its result into `out` in place and returns None. The signatures are the contract the
tests, the model and the grader call.

Each kernel's body sits between `// BEGIN SOLUTION` and `// END SOLUTION`: the
students' starter kit (python -m grading handout) has a TODO stub there instead.
"""

from kernels.attention import attention_forward, softmax_forward
from kernels.encoder import encoder_forward
from kernels.gelu import gelu_forward
from kernels.layernorm import layernorm_forward
from kernels.matmul import matmul_forward
from kernels.residual import residual_forward

__all__ = [
    "attention_forward",
    "encoder_forward",
    "gelu_forward",
    "layernorm_forward",
    "matmul_forward",
    "residual_forward",
    "softmax_forward",
]
