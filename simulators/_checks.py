"""Small validators shared by the spec dataclasses."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any
from typing import TypeVar

from simulators.errors import SpecError

T = TypeVar("T")


def require_positive(owner: str, **values: float) -> None:
    """Raise SpecError naming every field of ``values`` that is not > 0."""
    bad = [f"{name}={value!r}" for name, value in values.items() if not value > 0]
    if bad:
        raise SpecError(f"{owner}: {', '.join(bad)} must be > 0")


def require_non_negative(owner: str, **values: float) -> None:
    """Raise SpecError naming every field of ``values`` that is < 0."""
    bad = [f"{name}={value!r}" for name, value in values.items() if value < 0]
    if bad:
        raise SpecError(f"{owner}: {', '.join(bad)} must be >= 0")


def require_choice(owner: str, name: str, value: str, allowed: Iterable[str]) -> None:
    """Raise SpecError unless ``value`` is one of ``allowed``."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise SpecError(f"{owner}: {name}={value!r} is not one of {', '.join(allowed)}")


def constants_from_mapping(
    cls: type[T],
    values: Mapping[str, Any],
    owner: str,
    convert: Mapping[str, Callable[[Any], Any]] | None = None,
    fixed: Mapping[str, Any] | None = None,
) -> T:
    """A dataclass of constants from its yaml mapping (every key, no other).

    ``convert`` turns nested mappings into their types (``{"efficiency": Efficiencies}``);
    ``fixed`` gives fields that do not come from the yaml (a name).

    Raises:
        SpecError: naming the unknown and the missing keys, and every allowed one.
    """
    fixed = dict(fixed or {})
    known = {f.name for f in dataclasses.fields(cls)} - set(fixed)  # type: ignore[arg-type]
    given = {k: v for k, v in values.items() if k != "name"}
    unknown, missing = sorted(set(given) - known), sorted(known - set(given))
    if unknown or missing:
        raise SpecError(
            f"{owner}: "
            + (f"unknown key(s) {', '.join(unknown)}; " if unknown else "")
            + (f"missing key(s) {', '.join(missing)}; " if missing else "")
            + f"expected {', '.join(sorted(known))}"
        )
    for key, make in (convert or {}).items():
        given[key] = make(given[key])
    return cls(**given, **fixed)
