"""What a program may ask of the compiler when a trusted process builds it: the one build.

The grader's replayer, the kernel tests' replays, the look at a technique's PTX and
the instrumented count all compile a taped program the same way
(kernel_runtime.compiler.compile_ptx): the same bytes, the options below, and the
include directories CuPy itself compiles with (its own headers, the CUDA toolkit's).
So a source cannot tell which of them it is in, and what is counted is what is judged.
Every program is compiled with NVRTC, whichever backend its tape names.

The build is hermetic. A tape comes from a submission's process, so before NVRTC
reads a byte of it:

* its options must be on OPTION_FORMS (defines, fast math, denormals, register
  limits, the C++ dialect, ...): anything that points the compiler at a file
  (`-I`, `-include`, `--pre-include`), changes the architecture or links other code
  is refused, by name;
* every `#include` (and `#include_next`, `#import`, `__has_include`) must name a
  header by a literal `<name>` or `"name"` with no `..` and no leading `/`. The
  compiler searches only the include directories above (never the source's own
  directory, `--no-source-include`), so a source may include the CUDA toolkit's
  headers and CuPy's and nothing else: not a header the submission wrote, not a file
  of the grader's. A header that is in neither fails to compile, naming it.

The directives are found the way the preprocessor finds them: lines spliced at a
backslash-newline, comments, strings and character literals skipped, `%:` read as
`#`. Raw string literals (`R"(...)"`) are refused outright: inside them the
preprocessor undoes the splicing, and nothing a kernel needs is written with them.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from gpt2kit.kernel_runtime.errors import KernelCompileError

OPTION_FORMS = re.compile(
    r"(?:-D|--define-macro=|-U|--undefine-macro=)[A-Za-z_]\w*(?:=.*)?"
    r"|--?use_fast_math"
    r"|--?(?:ftz|prec-div|prec-sqrt|fmad)=(?:true|false)"
    r"|--?std=c\+\+(?:11|14|17|20)"
    r"|--?maxrregcount=\d+"
    r"|-lineinfo|--generate-line-info"
    r"|--?extra-device-vectorization"
    r"|--?restrict"
    r"|-default-device|--device-as-default-execution-space"
    r"|--?expt-(?:relaxed-constexpr|extended-lambda)"
    r"|-w|--disable-warnings"
    r"|--?diag-(?:suppress|error|warn)=[\w,]+", re.DOTALL)
INCLUDE_DIRECTIVES = ("include", "include_next", "import")
HAS_INCLUDE = re.compile(r"\b__has_include(?:_next)?\b")
RAW_STRING = re.compile(r"(?:\bu8|\bu|\bU|\bL|\b)R\"")
HEADER = re.compile(r"\s*(?:<([^<>\n]*)>|\"([^\"\n]*)\")")


class HermeticBuildError(KernelCompileError):
    """A program asks the trusted build for an option or a file it does not give."""


def check_options(options) -> None:
    """HermeticBuildError naming the first option that is not on OPTION_FORMS."""
    for option in options:
        if not OPTION_FORMS.fullmatch(option):
            raise HermeticBuildError(f"the compile option {option!r} is not one a replay compiles with (allowed: "
                                     f"-D and -U, --use_fast_math, -ftz, -prec-div, -prec-sqrt, -fmad, -std, "
                                     f"--maxrregcount, -lineinfo, --extra-device-vectorization, --restrict, "
                                     f"-default-device, --expt-relaxed-constexpr, -w, --diag-suppress)")


def check_includes(source: str) -> None:
    """HermeticBuildError naming the first include that is not a literal header name of the include directories."""
    if RAW_STRING.search(source) or RAW_STRING.search(_spliced(source)):
        raise HermeticBuildError("a raw string literal (R\"...\") in a kernel source: the replay does not compile "
                                 "them")
    code = without_comments(_spliced(source))
    for line in code.split("\n"):
        directive = re.match(r"\s*(?:#|%:)\s*(\w+)(.*)", line)
        if directive and directive.group(1) in INCLUDE_DIRECTIVES:
            _check_header(directive.group(1), directive.group(2), line)
        for found in HAS_INCLUDE.finditer(line):
            rest = line[found.end():].lstrip()
            if rest.startswith("("):  # not `defined(__has_include)`, which asks whether the compiler has it
                _check_header(found.group(0), rest[1:], line)


def _check_header(what: str, operand: str, line: str) -> None:
    header = HEADER.match(operand)
    name = header and (header.group(1) if header.group(1) is not None else header.group(2))
    if not name or name.startswith("/") or ".." in Path(name).parts or "\\" in name:
        raise HermeticBuildError(f"{line.strip()}: a kernel source may {what} only a header of the CUDA toolkit "
                                 f"or CuPy, by its literal name (<name> or \"name\", no absolute path, no ..)")


def _spliced(source: str) -> str:
    return re.sub(r"\\\r?\n", "", source)


def without_comments(source: str) -> str:
    """`source` with each comment blanked to spaces (its newlines kept), so positions in it are positions in
    `source`; tokenized as the preprocessor does, string and character literals kept whole (a `//` inside one
    starts no comment), and a `'` inside a number (1'000) separating digits, starting no character literal."""
    return "".join(re.sub(r"[^\n]", " ", token.group(0)) if token.lastgroup == "comment" else token.group(0)
                   for token in _TOKEN.finditer(source))


_TOKEN = re.compile(r"""
    (?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<string>(?:u8|u|U|L)?"(?:\\.|[^"\\\n])*(?:"|(?=\n)|\Z))
  | (?P<character>(?:u8|u|U|L)?'(?:\\.|[^'\\\n])*(?:'|(?=\n)|\Z))
  | (?P<number>\.?\d(?:[eEpP][+-]|'\w|[\w.])*)
  | (?P<identifier>[A-Za-z_]\w*)
  | (?P<other>.)""", re.DOTALL | re.VERBOSE)


@functools.lru_cache(maxsize=None)
def include_directories() -> tuple[str, ...]:
    """The include directories CuPy compiles a RawModule with: its own headers (and the CCCL ones it ships) and
    the CUDA toolkit's; those that exist here."""
    import cupy

    found = []
    try:
        from cupy._core import core
        found += [core._get_header_dir_path(), *(o.removeprefix("-I") for o in core._get_cccl_include_options())]
    except (ImportError, AttributeError):  # another CuPy: its headers lie beside its core
        found.append(str(Path(cupy.__file__).parent / "_core" / "include"))
    try:
        from cuda import pathfinder
        found.append(pathfinder.find_nvidia_header_directory("cudart"))
    except (ImportError, AttributeError, RuntimeError):  # a toolkit installed outside pip
        pass
    cuda_path = cupy.cuda.get_cuda_path()
    if cuda_path:
        found.append(str(Path(cuda_path) / "include"))
    return tuple(dict.fromkeys(d for d in found if d and Path(d).is_dir()))


def build_options(options, arch_options) -> list[str]:
    """The whole option list of the trusted build: the program's own options (checked), then what CuPy adds
    (flushing denormals to zero, functions on the device by default), the architecture, and the include
    directories with the source's own directory left out."""
    check_options(options)
    return [*options, "-ftz=true", *arch_options, "--device-as-default-execution-space", "--no-source-include",
            *(f"-I{directory}" for directory in include_directories())]
