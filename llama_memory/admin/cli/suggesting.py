"""An argument parser whose errors suggest what a mistyped command, choice or option was
meant to be (``did you mean 'search'?``): argparse's own ``suggest_on_error`` needs
Python 3.14."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn, Optional

from ...core.text import nearest


def closest(word: str, names: Iterable[str]) -> Optional[str]:
    """The name ``word`` most likely meant, compared without case or leading dashes: the
    only one it begins, else the nearest by difflib; None when none is near."""
    keys = {name.lstrip("-").lower(): name for name in names}
    key = word.lstrip("-").lower()
    begun = [k for k in keys if k.startswith(key)]
    near = begun[0] if len(begun) == 1 else nearest(key, keys)
    return keys[near] if near is not None else None


class SuggestingParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` (and its subcommands' parsers) that adds ``did you mean ...?``
    to an invalid choice (a command, ``jobs`` action...) and to an error made with a
    mistyped option, such as the missing ``--store`` of ``users --stroe ./memory``."""

    _given: Sequence[str] = ()

    def parse_known_args(self, args: Optional[Sequence[str]] = None, namespace: Any = None) -> Any:  # type: ignore[override]
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is not None and value not in choices:
            meant = closest(str(value), map(str, choices))
            if meant is not None:
                shown = ", ".join(map(repr, choices))
                raise argparse.ArgumentError(
                    action, f"invalid choice: {value!r}; did you mean {meant!r}? (choose from {shown})"
                )
        super()._check_value(action, value)  # type: ignore[misc]

    def error(self, message: str, words: Sequence[str] = ()) -> NoReturn:
        """Exit with the usage and ``message``, which names, for each mistyped option among
        ``words`` and the arguments this parser was given, the option it likely meant."""
        if "did you mean" not in message:
            message += "".join(
                f"; {word.split('=')[0]}: did you mean {meant}?"
                for word, meant in dict(self._meant([*words, *self._given])).items()
            )
        super().error(message)

    def _meant(self, words: Iterable[str]) -> Iterable[tuple[str, str]]:
        options = list(self._option_string_actions)
        for word in words:
            if word == "--":
                return
            name = word.split("=")[0]
            if name[:1] == "-" and len(name) > 1 and not any(option.startswith(name) for option in options):
                meant = closest(name, options)
                if meant is not None:
                    yield word, meant
