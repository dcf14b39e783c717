"""A small name -> class registry with helpful misses and lazy entry points."""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any, Generic, TypeVar

from rollbench.errors import ConfigError, UnknownNameError, did_you_mean

T = TypeVar("T")


def load_plugins() -> None:
    """Import the modules named in $ROLLBENCH_PLUGINS (comma list): they may register plugins.

    The CLI calls it at start-up (a module that does not import is a configuration error
    there, before any work); a registry that misses a name calls it too, so that every
    process rollbench starts (env workers, probe processes, Ray actors) knows the plugins'
    names without importing them itself. Importing a module twice is a no-op.
    """
    for name in filter(None, (p.strip() for p in os.environ.get("ROLLBENCH_PLUGINS", "").split(","))):
        try:
            importlib.import_module(name)
        except Exception as err:
            raise ConfigError(f"ROLLBENCH_PLUGINS: cannot import {name!r} ({type(err).__name__}: {err})") from None


@functools.cache
def _entry_points() -> Any:  # EntryPoints (3.12), SelectableGroups (3.10/3.11): both `.select`
    """Every installed package's entry points, read once per process: each read scans every
    distribution's metadata (~0.07 s in a venv with LeRobot), and a run asks four registries."""
    return metadata.entry_points()


class Registry(Generic[T]):
    """Maps names to plugin classes.

    Built-ins register with the `register` decorator when their module is imported; the
    modules themselves are listed lazily (`"name": "module:attr"`) so that nothing heavy
    is imported before a plugin is used. Third-party plugins come from an entry-point group.
    """

    def __init__(self, kind: str, entry_point_group: str | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._lazy: dict[str, str] = {}
        self._entry_point_group = entry_point_group
        self._entry_points_loaded = False

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise ConfigError(f"{self.kind} {name!r} is registered twice")
            lazy = self._lazy.get(name)
            here = f"{getattr(obj, '__module__', '')}:{getattr(obj, '__qualname__', '')}"
            if lazy is not None and lazy != here:
                raise ConfigError(f"{self.kind} {name!r} is already taken by {lazy}; choose another name for {here}")
            self._entries[name] = obj
            return obj

        return deco

    def add_lazy(self, name: str, target: str) -> None:
        """Declare that `name` is registered by importing `target` ("module:attr")."""
        self._lazy[name] = target

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded or self._entry_point_group is None:
            return
        self._entry_points_loaded = True
        for ep in _entry_points().select(group=self._entry_point_group):
            if ep.name not in self._entries and ep.name not in self._lazy:
                self._lazy[ep.name] = ep.value

    def names(self) -> list[str]:
        self._load_entry_points()
        return sorted(set(self._entries) | set(self._lazy))

    def get(self, name: str) -> T:
        if name in self._entries:
            return self._entries[name]
        self._load_entry_points()
        if name in self._lazy:
            module_name, _, attr = self._lazy[name].partition(":")
            module = importlib.import_module(module_name)
            if name not in self._entries and attr:
                self._entries[name] = getattr(module, attr)
            if name in self._entries:
                return self._entries[name]
        load_plugins()  # a process rollbench started (an env worker) has not imported them yet
        if name in self._entries:
            return self._entries[name]
        known = self.names()
        hint = did_you_mean(name, known)
        raise UnknownNameError(
            f"no {self.kind} named {name!r}.{hint} Known: {', '.join(known)}."
        ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
