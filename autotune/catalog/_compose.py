"""Find ``conf/`` and compose its configs with Hydra, refusing bad overrides in one line."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from hydra.errors import MissingConfigException
from hydra.errors import OverrideParseException
from omegaconf import DictConfig
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from omegaconf.errors import ValidationError

from autotune.catalog._user_yaml import check_config_folders
from autotune.simulators import UserError
from autotune.simulators.names import check_label
from autotune.simulators.names import check_name

__all__ = ["HYDRA_KEYS", "compose", "conf_dir", "group_choices", "options", "parse_failure"]

HYDRA_KEYS = ("hydra.searchpath",)  # Hydra's settings that composing honours

_PACKAGED = Path(__file__).resolve().parents[1] / "conf"  # an installed wheel: autotune/conf/
_CHECKOUT = Path(__file__).resolve().parents[2] / "conf"  # a source checkout or editable install


@functools.cache
def conf_dir() -> Path:
    """The config tree: inside the installed package, else the checkout's ``conf/``."""
    for candidate in (_PACKAGED, _CHECKOUT):
        if (candidate / "job.yaml").is_file():
            return candidate
    raise UserError(f"the config tree conf/ was not found (looked in {_PACKAGED}, {_CHECKOUT})")


def options(group: str) -> tuple[str, ...]:
    """The names of a config group's options (``model`` -> ``llama2_7b``, ...), sorted."""
    return tuple(sorted(p.stem for p in (conf_dir() / group).glob("*.yaml")))


def group_choices(config_name: str) -> dict[str, str]:
    """The option each config group takes by default in ``conf/<config_name>.yaml``."""
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = hydra_compose(config_name=config_name, return_hydra_config=True)
    choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
    assert isinstance(choices, dict)
    return {str(k): str(v) for k, v in choices.items() if not str(k).startswith("hydra/")}


def compose(config_name: str | None, overrides: Sequence[str] = ()) -> DictConfig:
    """Compose ``conf/<config_name>.yaml`` (None: only what ``overrides`` add) with overrides.

    The schemas the config names must be registered first. Keys added with ``+`` that no
    schema declares are refused, as is every other bad override (a sweep of several values,
    a ``hydra.*`` key other than :data:`HYDRA_KEYS`), a YAML file with an alias
    or too large to be a config (``autotune.catalog._user_yaml``), and a model, cluster or device
    name that breaks the rule of names (``autotune.simulators.names``).

    Raises:
        UserError: one line saying what is wrong and what is allowed.
    """
    _refuse_keyless(overrides)
    _refuse_sweeps(overrides)
    _refuse_hydra_keys(overrides)
    _refuse_paths(overrides)
    check_config_folders(conf_dir(), overrides)
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            cfg = hydra_compose(config_name=config_name, overrides=list(overrides))
        OmegaConf.resolve(cfg)
    except AssertionError:  # Hydra checks some override forms with bare asserts
        raise UserError(
            f"cannot apply the overrides {' '.join(overrides)!r}; write key=value "
            "(e.g. model=llama70b parallel.tp=8)"
        ) from None
    except MissingConfigException as exc:
        raise UserError(_missing_message(exc)) from None
    except OverrideParseException as exc:
        raise UserError(parse_failure(exc)) from None
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        said = _through_a_value(exc, overrides) or _unknown_key(exc)
        raise UserError(said or _with_allowed_type(_keyed(exc, _first_lines(exc)))) from None
    unknown = _undeclared_keys(cfg)
    if unknown:
        listed = "; ".join(f"{key} (allowed: {allowed})" for key, allowed in unknown)
        raise UserError(f"unknown key(s) {listed}")
    _check_names(cfg)
    return cfg


def parse_failure(exc: OverrideParseException) -> str:
    """Hydra's refusal of an override, in one line: the override and the reason."""
    said = [line for line in str(exc).splitlines() if line.strip()]
    frame = ("Error parsing override", "See https://")  # Hydra's words around the reason
    reason = next((line for line in said if not line.startswith(frame)), _first_lines(exc))
    if reason.startswith(_LEXER):
        reason = _bad_character(said, exc.override) or reason
    elif reason.startswith(_NO_ALTERNATIVE) or _UNKNOWN_FUNCTION in reason:
        reason += (
            "; quote a value that holds spaces, commas, parentheses or '=' "
            "(key='a value', or in a list key=['a, b','c'])"
        )
    return f"cannot parse the override {exc.override!r}: {reason}"


_LEXER = "LexerNoViableAltException: "  # Hydra's lexer met a character it has no token for
_NO_ALTERNATIVE = "no viable alternative at input"  # its parser met a token out of place
_UNKNOWN_FUNCTION = "Unknown function"  # a value with parentheses read as a sweep's function


def _bad_character(said: list[str], override: str) -> str | None:
    """The character Hydra's lexer stopped at (its caret line points at it), and what is
    allowed instead; None if the caret is not found."""
    caret = next((line for line in said if line.strip() == "^"), None)
    position = None if caret is None else caret.index("^") - len(_LEXER)
    if position is None or not 0 <= position < len(override):
        return None
    character = override[position]
    return (
        f"{character!r} (U+{ord(character):04X}) at position {position + 1} cannot be parsed: "
        "keys and unquoted values take ASCII letters, digits and _-+.$%*@?|/ (quote a value, "
        "'...', for other characters)"
    )


def _check_names(cfg: DictConfig) -> None:
    """The job's names, whichever file or override gave them (autotune/simulators/names.py): the
    model's and the cluster's are names, the device's a label."""
    for key in ("model.name", "cluster.name"):
        if OmegaConf.select(cfg, key) is not None:
            check_name(key, OmegaConf.select(cfg, key))
    if OmegaConf.select(cfg, "cluster.device.name") is not None:
        check_label("cluster.device.name", OmegaConf.select(cfg, "cluster.device.name"))
    for source in OmegaConf.select(cfg, "cluster.fitted_on") or ():
        check_name("cluster.fitted_on", source)


def _refuse_keyless(overrides: Sequence[str]) -> None:
    """An override must name a key: ``+=``, ``=1`` or ``~@pkg`` name none (Hydra asserts on
    some of them, or says "Config group override must be a string")."""
    for override in overrides:
        key = _override_key(override)
        if not key.strip():
            raise UserError(
                f"cannot parse the override {override!r}: it names no key; write key=value "
                "(e.g. model=llama70b parallel.tp=8), +key=value to add one, ~key to delete one"
            )


def _refuse_sweeps(overrides: Sequence[str]) -> None:
    """One value per key: a sweep (``a,b``, ``range(...)``, ...) is for ``-m``, which runs a
    job per value (Hydra would say "Ambiguous value")."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except OverrideParseException as exc:
        raise UserError(parse_failure(exc)) from None
    for override in parsed:
        if override.is_sweep_override():
            raise UserError(
                f"{override.input_line!r} gives several values (a sweep): add -m (--multirun) "
                "to run the command once per value, or give one value"
            )
        _refuse_group_list(override)


def _refuse_group_list(override: Override) -> None:
    """A config group takes one option: Hydra would merge ``cluster=[a100,h100]`` into one
    config of both files (and ``model=[]`` into none)."""
    group = override.key_or_group.partition("@")[0]
    if isinstance(override.value(), list) and (conf_dir() / group).is_dir():
        available = ", ".join(options(group))
        raise UserError(
            f"{override.input_line!r} gives a list; {group} takes one of {available} (-m with "
            "a,b runs one job per value)"
        )


def _refuse_hydra_keys(overrides: Sequence[str]) -> None:
    """Of Hydra's own settings only ``hydra.searchpath`` does something here: the compose API
    runs no Hydra job, so ``hydra.run.dir``, ``hydra.sweep.dir``, ``hydra.job.*``,
    ``hydra/launcher=...`` would be taken and ignored."""
    for override in overrides:
        key = _override_key(override)
        if key.split(".")[0].split("/")[0] == "hydra" and key not in HYDRA_KEYS:
            raise UserError(
                f"{key} is not supported: these commands compose their config with Hydra's "
                "compose API and run no Hydra job (no run or sweep folder, logging or "
                f"launcher); the hydra keys they take: {', '.join(HYDRA_KEYS)}. Outputs go "
                "where the command's keys say (launch_dir, report_dir, out); -m puts each "
                "job's in a numbered subfolder"
            )


def _refuse_paths(overrides: Sequence[str]) -> None:
    """A group option is a file name of its folder: Hydra would follow ``model=../job`` out of
    ``conf/model/`` and compose another group's file as a model."""
    for override in overrides:
        key, _, value = override.partition("=")
        group = key.lstrip("+~").partition("@")[0]
        if ("/" in value or "\\" in value) and (conf_dir() / group).is_dir():
            raise UserError(f"unknown {group} {value!r}; available: {', '.join(options(group))}")


def _missing_message(exc: MissingConfigException) -> str:
    missing = exc.missing_cfg_file or ""
    group, _, name = missing.rpartition("/")
    if group and exc.options is not None:
        return f"unknown {group} {name!r}; available: {', '.join(sorted(exc.options))}"
    return str(exc).splitlines()[0]


_ALLOWED_VALUES = {"bool": "true or false", "Integer": "an integer", "Float": "a number"}
_WRONG_TYPE = re.compile(
    r"Value '(?P<value>[^']*)' (?:is not a valid (?P<kind>bool)|of type '\w+' could not be "
    r"converted to (?P<number>Integer|Float))\b.*"
)


def _with_allowed_type(message: str) -> str:
    """A value of the wrong type said with what the key takes (OmegaConf names the type,
    then adds its parser's own complaint, which is dropped)."""
    match = _WRONG_TYPE.search(message)
    if match is None:
        return message
    kind = match["kind"] or match["number"]
    said = f"{match['value']!r} is not {_ALLOWED_VALUES[kind]}"
    return message[: match.start()] + said


def _override_key(override: str) -> str:
    """The dotted key an override sets: ``+model.x@pkg=1`` -> ``model.x``."""
    return override.partition("=")[0].lstrip("+~").partition("@")[0]


def _through_a_value(exc: BaseException, overrides: Sequence[str]) -> str | None:
    """An override that names a key under a key holding one value (``train.seq_len.x=1``,
    ``train.framework.rope_kernel=...``), said as such (OmegaConf tries to merge ``{}`` into
    the value and names its type)."""
    current: BaseException | None = exc
    while current is not None:
        full = getattr(current, "full_key", None)
        if full and isinstance(current, ValidationError):
            for override in overrides:
                key = _override_key(override)
                if key.startswith(f"{full}."):
                    group = full.rpartition(".")[2]  # train.framework names a conf/framework/
                    named = (
                        f" (one of {', '.join(options(group))})"
                        if (conf_dir() / group).is_dir()
                        else ""
                    )
                    return (
                        f"{full} holds one value and no keys, so {key!r} names nothing; "
                        f"write {full}=VALUE{named}"
                    )
        current = current.__cause__ or current.__context__
    return None


def _unknown_key(exc: BaseException) -> str | None:
    """An override of a key that its structured node does not declare, said with the keys it
    does (OmegaConf names only the schema: "Key 'mbs' not in 'ParallelConfig'")."""
    current: BaseException | None = exc
    while current is not None:
        kind = getattr(current, "object_type", None)
        key = getattr(current, "key", None)
        parent = getattr(current, "parent_node", None)
        declared = None
        if isinstance(kind, type) and dataclasses.is_dataclass(kind) and key is not None:
            declared = sorted(f.name for f in dataclasses.fields(kind))
        elif isinstance(parent, DictConfig) and key is not None:  # a group's keys (simulator)
            declared = sorted(map(str, parent.keys()))
        if declared is not None and str(key) not in declared:
            full = getattr(current, "full_key", None) or key
            return f"unknown key {str(full)!r}; allowed there: {', '.join(declared)}"
        current = current.__cause__ or current.__context__
    return None


_IN_FILE = re.compile(r"In '(?P<file>[^']+)': \w+ raised while composing config::? ")


def _keyed(exc: BaseException, message: str) -> str:
    """A wrong value in a config file (``In 'model/mine': ValidationError raised while
    composing config: ...``) said with the file and the key that holds it, which Hydra's line
    leaves out (the config's own key: ``model/mine.yaml, model.hidden_size: ...``)."""
    match = _IN_FILE.match(message)
    current: BaseException | None = exc
    while match is not None and current is not None:
        full = getattr(current, "full_key", None)
        if full:
            return f"{match['file']}.yaml, {full}: {message[match.end() :]}"
        current = current.__cause__ or current.__context__
    return message


def _first_lines(exc: BaseException) -> str:
    """The message of ``exc`` and of its causes, first line of each, without Hydra's hints."""
    parts: list[str] = []
    current: BaseException | None = exc
    while current is not None and len(parts) < 3:
        line = str(current).strip().splitlines()[0] if str(current).strip() else ""
        if line and line not in parts and "$VALUE" not in line and line != "None":
            parts.append(line)
        current = current.__cause__ or current.__context__
    return ": ".join(parts) or type(exc).__name__


def _undeclared_keys(node: DictConfig, prefix: str = "") -> list[tuple[str, str]]:
    """Keys (dotted) of structured nodes that their dataclass does not declare."""
    found: list[tuple[str, str]] = []
    kind = OmegaConf.get_type(node)
    declared = (
        {f.name for f in dataclasses.fields(kind)}
        if isinstance(kind, type) and dataclasses.is_dataclass(kind)
        else None
    )
    for key in map(str, node.keys()):
        path = f"{prefix}{key}"
        if declared is not None and key not in declared:
            found.append((path, ", ".join(sorted(declared))))
            continue
        child = node._get_node(key)  # noqa: SLF001 - the node, not its value
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            found.extend(_undeclared_keys(child, f"{path}."))
    return found
