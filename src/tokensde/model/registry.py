"""Registries of named strategy classes (noise laws, attention kinds): a new one registers itself.

A strategy family (`tokensde.model.noise`, `tokensde.model.attention`) keeps one `Registry`;
each of its modules defines a class with a class attribute `name` and decorates it with
`@REGISTRY.register`. The parameter that selects it (`ModelParams.noise`, `.attention`) is
checked against the names registered, in the order they were registered. numpy-free, torch-free.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, Protocol, TypeVar

from .checks import check_choice


class Named(Protocol):
    """A strategy class: its `name` is the value of the parameter that selects it."""

    name: ClassVar[str]


S = TypeVar("S", bound=Named)


class Registry(Generic[S]):
    """Strategy classes by name, for the parameter `param` (named in error messages)."""

    def __init__(self, param: str) -> None:
        self.param = param
        self._classes: dict[str, type[S]] = {}

    def register(self, cls: type[S]) -> type[S]:
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

    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self._classes)

    def check(self, name: Any, param: str | None = None) -> str:
        """`name` if it is registered, else ParameterError "`param` must be one of ..."."""
        return check_choice(self.param if param is None else param, name, self.names())

    def get(self, name: Any) -> type[S]:
        """The class registered as `name`, or ParameterError naming the parameter."""
        return self._classes[self.check(name)]
