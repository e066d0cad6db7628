"""Compose a run's config from scenarios/conf (and the ``conf`` directories
of COLOSIM_PLUGIN_PATH, sim/plugins.py) with Hydra overrides."""

import dataclasses
import re
from typing import Iterable

import yaml
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    OmegaConfBaseException,
    ValidationError,
)

from scenarios import schema
from scenarios.schema import CONF_DIR, list_options
from scenarios.validate import ConfigError, unknown_key_message, validate


def default_options() -> dict[str, str]:
    """The option config.yaml selects for each group."""
    defaults = yaml.safe_load((CONF_DIR / "config.yaml").read_text())["defaults"]
    return {k: v for entry in defaults if isinstance(entry, dict) for k, v in entry.items()}


def compose(overrides: Iterable[str] = ()) -> DictConfig:
    """The resolved, validated config for these Hydra overrides.

    Raises ConfigError, with a message naming the offending key, for unknown
    options or keys, wrong types and out-of-range values.
    """
    cfg = _compose(list(overrides))
    validate(cfg)
    return cfg


def _compose(overrides: list[str], return_hydra_config: bool = False) -> DictConfig:
    """Hydra's compose on scenarios/conf, resolved, with errors that name the key."""
    _check_group_choices(overrides)
    schema.register()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = hydra_compose(config_name="config",
                                overrides=overrides + schema.searchpath_overrides(),
                                return_hydra_config=return_hydra_config)
        if not return_hydra_config:     # hydra's own node has runtime-only interpolations
            OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(_explain(err)) from err
    return cfg


def expand_sweep(overrides: Iterable[str]) -> tuple[list[list[str]], list[str], list[DictConfig]]:
    """The points of a sweep (one override list each), the swept keys and
    each point's config, as Hydra's basic sweeper will expand them,
    including the ``hydra.sweeper.params`` of an ``experiment=`` file.
    Every point is composed and validated here, so a bad value fails before
    any run; so does a sweep of no point, or one that sets output_dir (a
    sweep writes each run under its own directory)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    overrides = [o for o in overrides if not o.startswith("hydra")]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as err:
        raise ConfigError(str(err).split("\nSee ")[0]) from err
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    params = _experiment_sweep_params(fixed)
    given = {o.key_or_group for o in parsed}
    lines = [f"{k}={v}" for k, v in params.items() if k not in given] + overrides
    parsed = OverridesParser.create().parse_overrides(lines)
    swept = [o.key_or_group for o in parsed if o.is_sweep_override()]
    for o in parsed:
        if o.is_sweep_override() and not list(o.sweep_string_iterator()):
            raise ConfigError(f"{o.input_line} sweeps no value: the sweep would run nothing")
    batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    points = [list(point) for batch in batches for point in batch]
    configs = []
    for point in points:
        try:
            configs.append(compose(point))
        except ConfigError as err:
            sep = "\n" if "\n" in str(err) else " "   # one problem: one line
            raise ConfigError(f"sweep point {' '.join(point)}:{sep}{err}") from err
        if configs[-1].output_dir is not None:
            raise ConfigError(f"output_dir = {configs[-1].output_dir} is invalid in a sweep: "
                              "each run is written under the sweep's --dir")
    return points, swept, configs


def _experiment_sweep_params(overrides: list[str]) -> dict[str, str]:
    """hydra.sweeper.params set by the selected experiment file, if any."""
    cfg = _compose(overrides, return_hydra_config=True)
    params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    return {str(k): str(v) for k, v in params.items()}


def _check_group_choices(overrides: list[str]) -> None:
    """Reject `group=option` for options that do not exist, before Hydra does.

    Hydra's own message lists the schema entries of the ConfigStore as
    options and the whole search path; this one lists what a user can pick.
    """
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as err:
        raise ConfigError(str(err).split("\nSee ")[0]) from err
    options = list_options()
    for override in parsed:
        group = override.key_or_group
        if group not in options or override.is_delete() or override.package:
            continue
        choice = override.value()
        if not isinstance(choice, str) or choice in options[group]:
            continue
        raise ConfigError(
            f"{group}={choice} is not a known option; choose from: {', '.join(options[group])}"
        )


def _explain(err: Exception) -> str:
    """Turn a Hydra/OmegaConf failure into one line that names the key."""
    cause = err.__cause__ if err.__cause__ is not None else err
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and dataclasses.is_dataclass(
        cause.object_type
    ):
        valid = [f.name for f in dataclasses.fields(cause.object_type)]
        override = re.search(r"override '([^']+)'", str(err))
        key = cause.full_key
        # Inside a list of structured items OmegaConf loses the path prefix.
        if override and not override.group(1).startswith(key.split(".")[0]):
            key = f"{override.group(1)}[].{key}"
        return unknown_key_message(key, valid)
    if isinstance(cause, ValidationError) and cause.full_key:
        return _explain_type_error(cause.full_key, cause.msg.strip().splitlines()[0])
    ambiguous = re.match(r"Ambiguous value for argument '([^']+)'", str(err))
    if ambiguous:
        return (
            f"{ambiguous.group(1)}: a run takes one value per key; "
            "write key=[a,b] for a list or key='a,b' for a string"
        )
    return str(err).split("\nConfig search path")[0]


def _explain_type_error(key: str, message: str) -> str:
    wrong_type = re.match(r"Value '(.*)' of type '\w+' could not be converted to (\w+)", message)
    if wrong_type:
        value, expected = wrong_type.groups()
        article = "an" if expected[0] in "AEIOU" else "a"
        return f"{key} = {value} is invalid: must be {article} {expected.lower()}"
    if "is not Optional" in message:
        return f"{key} = null is invalid: must have a value"
    return f"{key}: {message}"
