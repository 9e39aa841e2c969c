"""Registries of named strategy classes (noise laws, attention kinds): a new one registers itself.

A strategy family (`tokensde.model.noise`, `tokensde.model.attention`) keeps one `Registry`;
each of its modules defines a class with a class attribute `name` and decorates it with
`@REGISTRY.register`. The parameter that selects it (`ModelParams.noise`, `.attention`) is
checked against the names registered, in the order they were registered. A parameterised family
(GELU at a pre-activation variance q, `gelu(q=0.1)`) is resolved from its name by `add_family`
without being registered, so the names listed stay the strategies themselves. numpy-free,
torch-free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from .checks import _require


class _Named(Protocol):
    """A strategy class: its `name` is the value of the parameter that selects it."""

    name: ClassVar[str]


_S = TypeVar("_S", bound=_Named)


class Registry(Generic[_S]):
    """Strategy classes by name, for the parameter `param` (named in error messages)."""

    def __init__(self, param: str) -> None:
        self.param = param
        self._classes: dict[str, type[_S]] = {}
        self._families: list[tuple[str, Callable[[str], type[_S] | None]]] = []

    def register(self, cls: type[_S]) -> type[_S]:
        """Class decorator: make `cls` selectable as `param=cls.name` (a name is taken once)."""
        name = cls.name
        old = self._classes.get(name)
        if old is not None and (old.__module__, old.__qualname__) != (cls.__module__,
                                                                      cls.__qualname__):
            raise ValueError(f"{self.param} {name!r} is already registered by "
                             f"{old.__module__}.{old.__qualname__}")
        self._classes[name] = cls
        return cls

    def unregister(self, name: str) -> None:
        """Remove the class registered as `name` (tests that register a toy one)."""
        del self._classes[name]

    def add_family(self, form: str, resolve: Callable[[str], type[_S] | None]) -> None:
        """Also accept the names of a parameterised family, described by `form` in error
        messages (e.g. 'gelu(q=<q>) with q > 0'): `resolve(name)` is its class, or None when
        `name` is not one of the family. Its classes are made on demand, never registered."""
        self._families.append((form, resolve))

    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order (families not included)."""
        return tuple(self._classes)

    def _resolve(self, name: Any) -> type[_S] | None:
        if isinstance(name, str):
            if name in self._classes:
                return self._classes[name]
            for _form, resolve in self._families:
                cls = resolve(name)
                if cls is not None:
                    return cls
        return None

    def check(self, name: Any, param: str | None = None) -> str:
        """`name` if it is registered or of a family, else ParameterError "`param` must be one
        of <the registered names> [or <each family's form>]"."""
        allowed = "one of " + ", ".join(self.names())
        allowed += "".join(f" or {form}" for form, _ in self._families)
        _require(self._resolve(name) is not None, self.param if param is None else param, allowed,
                name)
        return str(name)

    def get(self, name: Any) -> type[_S]:
        """The class of `name` (registered or of a family), or ParameterError naming the
        parameter."""
        cls = self._resolve(self.check(name))
        assert cls is not None
        return cls
