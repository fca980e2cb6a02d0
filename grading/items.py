"""The grading items and policy of a milestone, read from its weights file.

    milestone 1   grading/weights.toml      items of host functions (`functions = [...]`)
    milestone 2   grading/weights_m2.toml   items of variants (`variants = [...]`, reference.variants)
    milestone 3   grading/weights_m3.toml   the same
    milestone 4   grading/weights_m4.toml   the same (training's host functions)

An item is made of variants either way: a milestone-1 host function is the variant
`plain(function)` (its spec's module, fp32, no technique to show).

Milestone 3 also has a menu: items marked `menu = true`, each worth its own weight, of
which at most `menu_cap_points` count; total_points is the other items' weights plus
that cap.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from gpt2kit.kernel_runtime import KitError
from gpt2kit.reference.variants import VARIANTS, Variant, milestone_variants, plain

WEIGHTS_FILE = Path(__file__).with_name("weights.toml")
WEIGHTS_FILES = {1: WEIGHTS_FILE, **{m: Path(__file__).with_name(f"weights_m{m}.toml") for m in (2, 3, 4)}}
POLICIES = ("none", "fraction")


@dataclasses.dataclass(frozen=True)
class Item:
    name: str
    title: str
    weight: float
    variants: tuple[Variant, ...]
    menu: bool = False  # one of the menu's items: together they count up to the scheme's menu_cap_points

    @property
    def functions(self) -> tuple[str, ...]:
        return tuple(v.function for v in self.variants)


class SchemeError(KitError):
    """A grading scheme that cannot be used."""


@dataclasses.dataclass(frozen=True)
class Scheme:
    items: tuple[Item, ...]
    total_points: float
    partial_credit: str
    time_limit_seconds: float
    milestone: int = 1
    path: Path = WEIGHTS_FILE  # the file it was read from: the grader's workers read it again
    menu_cap_points: float = 0.0  # the most the menu's items count together

    def item(self, name: str) -> Item:
        for item in self.items:
            if item.name == name:
                return item
        raise SchemeError(f"no grading item {name!r} (items: {', '.join(i.name for i in self.items)})")


def scheme_for(milestone: int) -> Scheme:
    """The grading scheme of a milestone (1 to 4)."""
    if milestone not in WEIGHTS_FILES:
        raise SchemeError(f"no milestone {milestone}; the grader knows milestones {', '.join(map(str, WEIGHTS_FILES))}")
    return load_scheme(WEIGHTS_FILES[milestone])


def load_scheme(path: Path = WEIGHTS_FILE) -> Scheme:
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise SchemeError(f"{path}: cannot read the grading scheme ({err})") from None
    items = tuple(Item(i["name"], i["title"], float(i["weight"]), _variants_of(path, i), bool(i.get("menu", False)))
                  for i in raw["items"])
    scheme = Scheme(items, float(raw["total_points"]), raw.get("partial_credit", "none"),
                    float(raw.get("time_limit_seconds", 180)), int(raw.get("milestone", 1)), Path(path),
                    float(raw.get("menu_cap_points", 0)))
    if scheme.partial_credit not in POLICIES:
        raise SchemeError(f"{path}: partial_credit must be one of {POLICIES}, got {scheme.partial_credit!r}")
    required = sum(i.weight for i in items if not i.menu)
    menu = sum(i.weight for i in items if i.menu)
    if menu and scheme.menu_cap_points <= 0:
        raise SchemeError(f"{path}: menu items need menu_cap_points, the most they count together")
    if abs(required + scheme.menu_cap_points - scheme.total_points) > 1e-9:
        raise SchemeError(f"{path}: the items' weights ({required:g}) and menu_cap_points "
                          f"({scheme.menu_cap_points:g}) add up to {required + scheme.menu_cap_points:g}, "
                          f"not total_points = {scheme.total_points:g}")
    scored = sorted(v.name for i in items for v in i.variants)
    written = sorted(v.name for v in milestone_variants(scheme.milestone))
    if scored != written:
        what = "host function students write" if scheme.milestone == 1 else f"milestone-{scheme.milestone} variant"
        raise SchemeError(f"{path}: items must score each {what} once: {written}, got {scored}")
    return scheme


def _variants_of(path: Path, item: dict) -> tuple[Variant, ...]:
    """An item's variants: named (`variants`), or milestone 1's host functions (`functions`)."""
    unknown = [name for name in item.get("variants", []) if name not in VARIANTS]
    if unknown:
        raise SchemeError(f"{path}: item {item['name']!r} names no known variant {unknown[0]!r} "
                          f"(variants: {', '.join(VARIANTS)})")
    return (tuple(VARIANTS[name] for name in item.get("variants", []))
            + tuple(plain(function) for function in item.get("functions", [])))


def capped_total(scores: list[tuple[Item, float]], menu_cap_points: float) -> float:
    """The points of (item, score) pairs: the required items' scores plus the menu's, up to its cap."""
    required = sum(score for item, score in scores if not item.menu)
    return required + min(menu_cap_points, sum(score for item, score in scores if item.menu))
