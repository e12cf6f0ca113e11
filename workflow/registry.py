"""Units by name: the one registry every pluggable kind of rlsweep uses (update rules, mixed-policy methods, graders,
engines, ...). The model is verl's `@register_policy_loss` / `get_policy_loss_fn`: a unit is registered once under
its name, `get(name)` returns it, and an unknown name fails with the list of known ones.

Three ways a unit becomes known, all lazy, so that reading a sweep imports neither torch nor verl:
  built-ins       listed here as name -> "module:object" by the registry's owner, imported on first `get`;
  @register(name) a decorator, for units defined next to the registry or in a test (known once the module ran);
  entry points    a third-party package declares `name = "its.module:Object"` in the Python entry-point group
                  `rlsweep.<group>` (its pyproject.toml: [project.entry-points."rlsweep.update_rules"]); a lab adds
                  a method, grader or engine by installing its package, without forking rlsweep.

`names()` lists every unit without importing any. A unit that is not an instance or subclass of the registry's
`base` is refused when it is first fetched, naming where it came from.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")
GROUP_PREFIX = "rlsweep."


class Registry(Generic[T]):
    """Units of one `kind` ("update rule", "grader", ...). Call order: register / builtins at import time of the
    owner; then names(), get() and `in` any number of times."""

    def __init__(self, kind: str, group: str, builtins: dict[str, str] | None = None, base: type | str | None = None):
        self.kind = kind
        self.group = GROUP_PREFIX + group  # the entry-point group third-party packages register under
        self.builtins = dict(builtins or {})  # name -> "module:object", imported on first use
        self._base = base  # what every unit is (an instance or a subclass of); "module:object" is imported on use
        self.loaded: dict[str, T] = {}
        self._plugins: dict[str, str] | None = None

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: make the class (or object) available under `name`; a second, different unit under the same
        name is refused."""
        def add(unit: T) -> T:
            known = self.loaded.get(name)
            if known is not None and (_where(known) != _where(unit) if isinstance(unit, type) else known != unit):
                raise ValueError(f"{self.kind} {name!r} is already registered by {_where(known)}")
            try:
                unit.name = name  # a class or object knows the name it is registered under
            except (AttributeError, TypeError):  # frozen, or a built-in type
                pass
            self.loaded[name] = unit
            return unit
        return add

    def plugins(self) -> dict[str, str]:
        """name -> "module:object" of the entry points installed packages declare for this kind (read once)."""
        if self._plugins is None:
            found = importlib.metadata.entry_points(group=self.group)
            self._plugins = {ep.name: ep.value for ep in found if ep.name not in self.builtins}
        return self._plugins

    def names(self) -> list[str]:
        return sorted({*self.builtins, *self.loaded, *self.plugins()})

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self.loaded or name in self.builtins or name in self.plugins())

    def unknown(self, name: str) -> str:
        """What an unknown `name` is refused with: the kind, the name and the known names."""
        return f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}"

    def __iter__(self):
        return iter(self.names())

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def get(self, name: str) -> T:
        if name not in self.loaded:
            target = self.builtins.get(name) or self.plugins().get(name)
            if target is None:
                raise ValueError(self.unknown(name))
            unit = load_object(target)
            if name not in self.loaded:  # a module that registers itself by decorator has done it on import
                self.register(name)(unit)
        unit = self.loaded[name]
        base = self.base
        if base is not None and not (isinstance(unit, base) or (isinstance(unit, type) and issubclass(unit, base))):
            raise TypeError(f"{self.kind} {name!r} ({_where(unit)}) is not a {base.__module__}.{base.__qualname__}")
        return unit

    @property
    def base(self) -> type | None:
        if isinstance(self._base, str):
            self._base = load_object(self._base)
        return self._base

    def items(self) -> list[tuple[str, T]]:
        """Every unit, imported (for tests and listings that need the objects, not only the names)."""
        return [(n, self.get(n)) for n in self.names()]


def load_object(target: str) -> Any:
    """The object a "module:qualname" string names (the module itself for "module"), importing the module."""
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


def _where(unit: Any) -> str:
    cls = unit if isinstance(unit, type) else type(unit)
    return f"{cls.__module__}.{cls.__qualname__}"
