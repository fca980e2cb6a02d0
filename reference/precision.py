"""Precision profiles: the arithmetic a kernel may use, and so how far from the float64
reference its outputs may be. Every check is made under one profile.

    fp32    float32 throughout, every operation correctly rounded (U = 2^-24): the
            bounds of reference/specs/ are derived for this.
    tf32    tensor cores in TF32 mode: each product's two inputs keep 10 bits of
            mantissa (rounded to nearest, 2^-11 relative, or cut, 2^-10) and the
            products are summed in float32. A product then errs by up to 2 * 2^-10 of
            itself before float32's own errors, so a function whose spec declares its
            products (Spec.products: the sum of |a * b| behind each output element)
            may err by that much more; functions without products are held to fp32.
    course  the course's own criterion, for comparison: per element
            min(|d|, |d| / max(1e-3, |ref|)) <= 0.05, and the output's RMSE <= 1e-3.
            It is a fixed tolerance, not a rounding bound: an error a hundred times
            float32's passes it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpt2kit.kernel_runtime import KitError
from gpt2kit.reference.numerics import element_errors, rms

TF32_INPUT_ROUNDING = 2.0**-10  # a product's input cut to 10 bits of mantissa (rounding to nearest: half)
COURSE_ELEMENT, COURSE_RMSE = 0.05, 1e-3


class ProfileError(KitError):
    """A precision profile that does not exist."""


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    product_input_rounding: float  # relative error of a product's inputs before it is formed
    rounding_bounds: bool = True   # judged by per-element rounding bounds (False: the course's criterion)

    def extra_product_error(self, products: np.ndarray) -> np.ndarray:
        """What rounding the two inputs of every product adds to a sum of products of magnitude `products`."""
        return 2 * self.product_input_rounding * products


FP32 = Profile("fp32", 0.0)
TF32 = Profile("tf32", TF32_INPUT_ROUNDING)
COURSE = Profile("course", 0.0, rounding_bounds=False)
PROFILES = {p.name: p for p in (FP32, TF32, COURSE)}


def to_tf32(x: np.ndarray, rounding: str = "nearest") -> np.ndarray:
    """float32 values kept to TF32's 10 mantissa bits, as a tensor core takes them: rounded to
    nearest (ties to even) or cut. Emulates the `tf32` profile's arithmetic on NumPy."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    if rounding == "nearest":
        bits = bits + np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1))
    return (bits & np.uint32(0xFFFFE000)).view(np.float32)


def split_tf32(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x as two TF32 values, high + low: the high part to_tf32(x), the low part the TF32 rounding of what the
    high part leaves (exact in float32). high + low is x to about 2^-22 of it, which is what lets three
    tensor-core products (low * high, high * low, high * high: "3xTF32") stay within the fp32 profile's
    bounds; the fourth, low * low, is below float32's own rounding and left out."""
    high = to_tf32(x)
    return high, to_tf32(np.asarray(x, np.float32) - high)


def profile_named(name: str) -> Profile:
    if name not in PROFILES:
        raise ProfileError(f"no precision profile {name!r}; the profiles are {', '.join(PROFILES)}")
    return PROFILES[name]


def course_errors(got: np.ndarray, want: np.ndarray) -> tuple[np.ndarray, float]:
    """Per element min(|d|, |d| / max(1e-3, |want|)), and the RMSE of d; NaN or inf in `got` is infinitely wrong."""
    error = element_errors(got, want)
    return np.minimum(error, error / np.maximum(1e-3, np.abs(want))), rms(error)


def course_failures(name: str, got: np.ndarray, want: np.ndarray) -> list[str]:
    """The course's criterion on one output: what fails it, or nothing."""
    scaled, rmse = course_errors(got, want)
    failures = []
    bad = ~(scaled <= COURSE_ELEMENT)
    if bad.any():
        where = np.unravel_index(int(np.argmax(np.where(bad, scaled, -1))), want.shape)
        failures.append(f"{name}: {int(bad.sum())} of {want.size} elements off by more than {COURSE_ELEMENT} "
                        f"(absolute, or relative to max(1e-3, |expected|)); worst at {tuple(int(i) for i in where)}: "
                        f"got {got[where]:.7g}, expected {want[where]:.7g}")
    if not rmse <= COURSE_RMSE:
        failures.append(f"{name}: RMSE {rmse:.3g} over {COURSE_RMSE}")
    return failures
