"""The kit's errors: each one a problem a user can act on, stated in its message.

Programs print a KitError as one line (`gpt2: tokens must be ...`) and exit with a
status; anything else is a bug in the kit and keeps its traceback.
"""


class KitError(Exception):
    """A problem with what the user gave the kit (a file, an argument, the machine), not a bug."""


class GPUUnavailableError(KitError):
    """There is no usable CUDA GPU in this process."""


class KernelCompileError(KitError):
    """NVRTC rejected a kernel source; the message points at the .py file and line."""


class KernelArgumentError(KitError):
    """A host function was called with an array of the wrong kind, size or type."""


class KernelLoadError(KitError):
    """A kernels directory, one of its modules, or a host function in it could not be loaded."""
