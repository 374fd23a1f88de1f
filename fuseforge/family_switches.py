"""The command line's kernel-family switches, made from the registry (`families.FAMILIES`): one `--no-<name>`
per family (its name with dashes, e.g. `--no-channel-norms`) and `--no-families` for all of them, so a new
family's switch appears by itself.

    @family_switches
    def command(..., families: frozenset[str]) -> None: ...

gives the typer command those options in place of `families`, which receives the names of the families left on.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Annotated

import typer

from .families import FAMILIES

EVERY_FLAG = "--no-families"
SWITCHES = (*(f.flag for f in FAMILIES), EVERY_FLAG)
PANEL = "Kernel families (all on by default)"


def flags(families: frozenset[str]) -> tuple[str, ...]:
    """The switches that leave exactly `families` on."""
    return tuple(f.flag for f in FAMILIES if f.name not in families)


def value_name(flag: str) -> str:
    """The name a switch's value goes by in typer and argparse: `--no-channel-norms` -> `no_channel_norms`."""
    return flag.removeprefix("--").replace("-", "_")


def left_on(values: Mapping[str, bool]) -> frozenset[str]:
    """The families the switches leave on, from their values by `value_name`."""
    if values[value_name(EVERY_FLAG)]:
        return frozenset()
    return frozenset(f.name for f in FAMILIES if not values[value_name(f.flag)])


def _option(flag: str, help: str) -> inspect.Parameter:
    return inspect.Parameter(value_name(flag), inspect.Parameter.KEYWORD_ONLY, default=False,
                             annotation=Annotated[bool, typer.Option(flag, help=help, rich_help_panel=PANEL)])


def family_switches(command: Callable[..., None]) -> Callable[..., None]:
    """`command` with a switch per family and `--no-families` in place of its `families` parameter."""
    signature = inspect.signature(command, eval_str=True)
    switches = [_option(f.flag, f"Turn off the {f.name} family: {f.summary}.") for f in FAMILIES]
    switches.append(_option(EVERY_FLAG, "Turn off every kernel family (pointwise kernels only)."))

    def with_switches(**options) -> None:
        values = {value_name(flag): options.pop(value_name(flag)) for flag in SWITCHES}
        command(**options, families=left_on(values))

    with_switches.__name__, with_switches.__doc__ = command.__name__, command.__doc__
    kept = [p for p in signature.parameters.values() if p.name != "families"]
    with_switches.__signature__ = signature.replace(parameters=kept + switches)
    return with_switches
