"""Typed plug-in configs: the primitives every plug-in's ``CONFIG``
dataclass is written with (kernel policies, controllers, workloads).

A field declared with ``tunable()`` carries its allowed values as metadata;
scenarios.validate reads them for every plug-in group, so a new plug-in
needs no check written elsewhere.  Rules that relate several keys go in the
dataclass's own ``check(c, key)`` classmethod, which scenarios.validate
calls after the field checks with ``key`` the config node's full key
(``workload``, ``workload.groups[0]``) and ``c`` its checker:

- ``c.get(full_key)``: the value;
- ``c.require(full_key, ok, rule, value=None)``: report "<key> = <value> is
  invalid: <rule>" unless ``ok``; returns ``ok``;
- ``c.positive(k)``, ``c.at_least(k, low)``, ``c.within(k, (low, high))``,
  ``c.one_of(k, choices)``: the usual rules, each returning whether it held.

sim/ does not import omegaconf: ``MISSING`` is its spelling of a required key.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import field
from typing import Any

# a required key (omegaconf.MISSING, spelled out so sim/ does not import omegaconf)
MISSING: Any = "???"
# The most objects of one kind a config may ask for (functions, threads,
# clients, workers, queue slots): far beyond any host the simulator models,
# so a typo such as functions=100000000 is refused before anything is built;
# whether a run fits this machine's memory is checked on top (sim/footprint.py).
MAX_COUNT = 1_000_000


def tunable(default: Any = MISSING, *, choices: tuple | None = None,
            range: tuple | None = None, above: float | None = None,
            pattern: tuple[str, str] | None = None) -> Any:
    """A config field with its allowed values, checked by scenarios.validate
    before a run (``None`` is always allowed for Optional fields: the
    plug-in's default applies):

    - ``choices``: a tuple of values;
    - ``range``: inclusive numeric (low, high); high None is no upper bound
      (and the value must then be finite);
    - ``above``: an exclusive lower bound (finite and > above);
    - ``pattern``: (regular expression the whole value matches, the rule
      said when it does not)."""
    return field(default=default, metadata={"choices": choices, "range": range,
                                            "above": above, "pattern": pattern})


def is_required(f: dataclasses.Field) -> bool:
    return f.default is MISSING and f.default_factory is dataclasses.MISSING


def from_mapping(cls: type, values, key: str):
    """``cls(**values)`` for a plain mapping (tests and tools hand the
    simulator plain dicts): nested dataclasses and lists of them are built
    likewise, a value that already is a ``cls`` is returned as it is.
    ValueError names ``key.<field>`` for a key the dataclass does not have
    or a required one that is missing."""
    if isinstance(values, cls):
        return values
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in values if k not in fields]
    if unknown:
        raise ValueError(f"{key}.{unknown[0]} is not a valid key; valid keys of {key}: "
                         f"{', '.join(fields)}")
    missing = [n for n, f in fields.items() if is_required(f) and n not in values]
    if missing:
        raise ValueError(f"{key}.{missing[0]} is required but has no value")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in values.items():
        nested = nested_dataclass(hints[name])
        if nested is not None and value is not None:
            if isinstance(value, (list, tuple)):
                value = [from_mapping(nested, v, f"{key}.{name}[{i}]")
                         for i, v in enumerate(value)]
            else:
                value = from_mapping(nested, value, f"{key}.{name}")
        kwargs[name] = value
    return cls(**kwargs)


def nested_dataclass(hint) -> type | None:
    """The dataclass a field's type names (X, Optional[X], List[X],
    Optional[List[X]]), or None."""
    if dataclasses.is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):
        found = nested_dataclass(arg)
        if found is not None:
            return found
    return None


class MappingReads:
    """Lets a config dataclass be read as a mapping (``cfg["key"]``,
    ``cfg.get("key")``, ``dict(cfg)``), as the plain dicts helpers shared
    with backends/real are also handed.  Defaults are the dataclass's:
    ``get`` has no default of its own beyond None for keys it lacks."""

    def keys(self):
        return [f.name for f in dataclasses.fields(self)]

    def __getitem__(self, key: str):
        try:
            return getattr(self, key)
        except AttributeError:
            raise KeyError(key) from None

    def __contains__(self, key: str) -> bool:
        return key in self.keys()

    def get(self, key: str, default=None):
        return getattr(self, key, default)
