"""The grading items and policy, read from grading/weights.toml."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from reference.checks import FUNCTIONS

WEIGHTS_FILE = Path(__file__).with_name("weights.toml")
POLICIES = ("none", "fraction")


@dataclasses.dataclass(frozen=True)
class Item:
    name: str
    title: str
    weight: float
    functions: tuple[str, ...]   # keys of reference.checks.FUNCTIONS


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
        raise ValueError(f"no grading item {name!r} (items: {', '.join(i.name for i in self.items)})")


def load_scheme(path: Path = WEIGHTS_FILE) -> Scheme:
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ValueError(f"{path}: cannot read the grading scheme ({err})") from None
    items = tuple(Item(i["name"], i["title"], float(i["weight"]), tuple(i["functions"])) for i in raw["items"])
    scheme = Scheme(items, float(raw["total_points"]), raw.get("partial_credit", "none"),
                    float(raw.get("time_limit_seconds", 180)))
    if scheme.partial_credit not in POLICIES:
        raise ValueError(f"{path}: partial_credit must be one of {POLICIES}, got {scheme.partial_credit!r}")
    if abs(sum(i.weight for i in items) - scheme.total_points) > 1e-9:
        raise ValueError(f"{path}: item weights add up to {sum(i.weight for i in items)}, "
                         f"not total_points = {scheme.total_points}")
    graded = [f for i in items for f in i.functions]
    if sorted(graded) != sorted(FUNCTIONS):
        raise ValueError(f"{path}: items must cover each kernel once: {sorted(FUNCTIONS)}, got {sorted(graded)}")
    return scheme
