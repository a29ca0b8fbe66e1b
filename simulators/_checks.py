"""Small validators shared by the spec dataclasses."""

from __future__ import annotations

from collections.abc import Iterable

from simulators.errors import SpecError


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
