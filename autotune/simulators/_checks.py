"""Small validators shared by the spec dataclasses."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import TypeVar

from autotune.simulators.errors import SpecError
from autotune.simulators.limits import MAX_CONSTANT
from autotune.simulators.limits import MAX_LATENCY_US
from autotune.simulators.limits import MAX_MEMORY_GIB
from autotune.simulators.limits import MIN_EFFICIENCY

T = TypeVar("T")
# A constant whose key names its unit (docs/conventions.md rule 7) stays within that unit's
# bound: a time per operation, a memory per device.
_UNIT_LIMITS = {
    "us": (MAX_LATENCY_US, "10 s for one operation is a timeout, not a cost"),
    "gib": (MAX_MEMORY_GIB, "GiB per device; the largest device memory is 288 GB"),
}
_FRACTION = f"must be from {MIN_EFFICIENCY:g} to 1 (an achievable fraction of the peak)"


def require_positive(owner: str, **values: float) -> None:
    """Raise SpecError naming every field of ``values`` that is not > 0."""
    bad = [f"{name}={value!r}" for name, value in values.items() if not value > 0]
    if bad:
        raise SpecError(f"{owner}: {', '.join(bad)} must be > 0")


def require_non_negative(owner: str, **values: float) -> None:
    """Raise SpecError naming every field of ``values`` that is < 0 (or NaN)."""
    bad = [f"{name}={value!r}" for name, value in values.items() if not value >= 0]
    if bad:
        raise SpecError(f"{owner}: {', '.join(bad)} must be >= 0")


def require_at_most(owner: str, limit: float, why: str, **values: float) -> None:
    """Raise SpecError naming every field of ``values`` above ``limit`` (or infinite, or NaN);
    ``why`` says where the limit comes from."""
    bad = [f"{name}={value!r}" for name, value in values.items() if not value <= limit]
    if bad:
        shown = f"{int(limit):,}" if float(limit).is_integer() else f"{limit:,g}"
        raise SpecError(f"{owner}: {', '.join(bad)} must be <= {shown} ({why})")


def require_at_least(owner: str, limit: float, why: str, **values: float) -> None:
    """Raise SpecError naming every field of ``values`` below ``limit`` (or NaN); ``why`` says
    where the limit comes from."""
    bad = [f"{name}={value!r}" for name, value in values.items() if not value >= limit]
    if bad:
        raise SpecError(f"{owner}: {', '.join(bad)} must be >= {limit:g} ({why})")


def require_fraction(owner: str, **values: float) -> None:
    """Raise SpecError naming every field of ``values`` outside [MIN_EFFICIENCY, 1]: an
    achievable share of a peak is never above the peak, nor a hundredth of it
    (:data:`autotune.simulators.limits.MIN_EFFICIENCY`)."""
    bad = [
        f"{name}={value!r}" for name, value in values.items() if not MIN_EFFICIENCY <= value <= 1
    ]
    if bad:
        raise SpecError(f"{owner}: {', '.join(bad)} {_FRACTION}")


def require_share(owner: str, **values: float) -> None:
    """Raise SpecError naming every field of ``values`` outside [0, 1): a share of a whole
    that must leave some of it (what an allocator loses of what it reserves)."""
    bad = [f"{name}={value!r}" for name, value in values.items() if not 0 <= value < 1]
    if bad:
        raise SpecError(f"{owner}: {', '.join(bad)} must be from 0 to below 1 (a share)")


def require_integers(owner: str, **values: object) -> None:
    """Raise SpecError naming every field of ``values`` that is not an integer (a bool is not
    one); call it before comparing the values."""
    bad = [f"{name}={value!r}" for name, value in values.items() if not _is_int(value)]
    if bad:
        raise SpecError(f"{owner}: {', '.join(bad)} must be an integer")


def require_numbers(owner: str, **values: object) -> None:
    """Raise SpecError naming every field of ``values`` that is not a real number."""
    bad = [f"{name}={value!r}" for name, value in values.items() if not _is_number(value)]
    if bad:
        raise SpecError(f"{owner}: {', '.join(bad)} must be a number")


def require_bools(owner: str, **values: object) -> None:
    """Raise SpecError naming every field of ``values`` that is not true or false."""
    bad = [f"{name}={value!r}" for name, value in values.items() if not isinstance(value, bool)]
    if bad:
        raise SpecError(f"{owner}: {', '.join(bad)} must be true or false")


def require_name(owner: str, name: object) -> None:
    """Raise SpecError unless ``name`` is a text with something in it, all printable (reports
    and file headers show it on one line: no control character or line break)."""
    if not isinstance(name, str) or not name.strip() or not name.isprintable():
        raise SpecError(f"{owner}: name={name!r} must be a non-empty text on one line")


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


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
    hints = {f.name: str(f.type) for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key, value in given.items():
        _check_constant(owner, key, value, hints[key])
    for key, make in (convert or {}).items():
        try:
            given[key] = make(given[key])
        except (TypeError, ValueError, AttributeError) as exc:
            raise SpecError(f"{owner}: {key}={given[key]!r} is malformed: {exc}") from None
    return cls(**given, **fixed)


def _check_constant(owner: str, key: str, value: Any, kind: str) -> None:
    """One constant of a simulator or a framework: the type its field names, and every number
    in it finite, >= 0 and at most MAX_CONSTANT; an efficiency (a key that ends with
    ``efficiency``, or any key of an ``efficiency`` mapping) in [MIN_EFFICIENCY, 1] or null; a
    time in microseconds (``_us``) or a memory in GiB (``_gib``) within its unit's bound.

    Raises:
        SpecError: naming the key, the value and what is allowed.
    """
    expected = {
        "float": ("a number", _is_number),
        "float | None": ("a number or null", lambda v: v is None or _is_number(v)),
        "int": ("an integer", _is_int),
        "bool": ("true or false", lambda v: isinstance(v, bool)),
        "str": ("a text", lambda v: isinstance(v, str)),
        "str | None": ("a text or null", lambda v: v is None or isinstance(v, str)),
        "tuple[str, ...]": ("a list of texts", _is_text_list),
        "tuple[int, ...]": ("a list of integers", _is_int_list),
    }.get(kind, ("a mapping", lambda v: isinstance(v, Mapping)))
    if not expected[1](value):
        raise SpecError(f"{owner}: {key}={value!r} must be {expected[0]}")
    if isinstance(value, Mapping) or _is_number(value):
        levels = _mapping_levels(kind)
        _check_numbers(owner, key, value, key.endswith("efficiency"), levels)


def _mapping_levels(kind: str) -> int:
    """How many levels of mappings a field of type ``kind`` holds above its numbers: one per
    ``Mapping[``, and one for a dataclass of numbers at the bottom (``Efficiencies``,
    ``Mapping[str, Mapping[str, StateBytes]]``)."""
    innermost = kind.replace("]", "").rsplit(",", 1)[-1].rsplit("[", 1)[-1].strip()
    numbers = innermost in ("float", "int", "float | None")
    return kind.count("Mapping[") + (0 if numbers else 1)


def _is_int_list(value: Any) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and all(_is_int(item) for item in value)
    )


def _is_text_list(value: Any) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and all(isinstance(item, str) for item in value)
    )


def _check_numbers(owner: str, key: str, value: Any, efficiency: bool, levels: int) -> None:
    """``value``, a number or ``levels`` levels of mappings of them, as
    :func:`_check_constant` says."""
    if isinstance(value, Mapping):
        if levels == 0:
            raise SpecError(f"{owner}: {key}={value!r} must be a number")
        for name, item in value.items():
            inner = efficiency or str(name).endswith("efficiency")
            _check_numbers(owner, f"{key}.{name}", item, inner, levels - 1)
        return
    if value is None and efficiency:
        return  # an efficiency left to the cluster's figure
    if not _is_number(value):
        raise SpecError(f"{owner}: {key}={value!r} must be a number")
    if efficiency and not MIN_EFFICIENCY <= value <= 1:
        raise SpecError(f"{owner}: {key}={value!r} {_FRACTION}")
    if not (math.isfinite(value) and 0 <= value <= MAX_CONSTANT):
        raise SpecError(f"{owner}: {key}={value!r} must be a finite number from 0 to 1e15")
    limit, why = _UNIT_LIMITS.get(key.rsplit("_", 1)[-1], (MAX_CONSTANT, ""))
    if value > limit:
        raise SpecError(f"{owner}: {key}={value!r} must be <= {limit:,g} ({why})")
