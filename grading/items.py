"""The grading items and policy, read from grading/weights.toml."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from kernel_runtime import KitError
from reference.registry import graded

WEIGHTS_FILE = Path(__file__).with_name("weights.toml")
POLICIES = ("none", "fraction")


@dataclasses.dataclass(frozen=True)
class Item:
    name: str
    title: str
    weight: float
    functions: tuple[str, ...]   # host functions, each with a spec in reference/specs/


class SchemeError(KitError):
    """A grading scheme that cannot be used."""


@dataclasses.dataclass(frozen=True)
class Scheme:
    items: tuple[Item, ...]
    total_points: float
    partial_credit: str
    time_limit_seconds: float

    def item(self, name: str) -> Item:
        for item in self.items:
            if item.name == name:
                return item
        raise SchemeError(f"no grading item {name!r} (items: {', '.join(i.name for i in self.items)})")


def load_scheme(path: Path = WEIGHTS_FILE) -> Scheme:
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise SchemeError(f"{path}: cannot read the grading scheme ({err})") from None
    items = tuple(Item(i["name"], i["title"], float(i["weight"]), tuple(i["functions"])) for i in raw["items"])
    scheme = Scheme(items, float(raw["total_points"]), raw.get("partial_credit", "none"),
                    float(raw.get("time_limit_seconds", 180)))
    if scheme.partial_credit not in POLICIES:
        raise SchemeError(f"{path}: partial_credit must be one of {POLICIES}, got {scheme.partial_credit!r}")
    if abs(sum(i.weight for i in items) - scheme.total_points) > 1e-9:
        raise SchemeError(f"{path}: item weights add up to {sum(i.weight for i in items)}, "
                         f"not total_points = {scheme.total_points}")
    scored, written = sorted(f for i in items for f in i.functions), sorted(s.function for s in graded())
    if scored != written:
        raise SchemeError(f"{path}: items must score each host function students write once: {written}, "
                          f"got {scored}")
    return scheme
