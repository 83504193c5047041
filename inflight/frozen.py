"""Read-only dataclasses that are cheap to make.

A frozen dataclass sets each field in `__init__` through `object.__setattr__`, which costs about five
times a plain assignment; a request that needs no compaction still makes some twenty such objects
(its count, accounting, report, commands), and that showed in the proxy's requests per second. So
`frozen` gives the type checker a frozen dataclass (mypy refuses any assignment to a field) and
makes a plain one at run time, hashed by its fields as a frozen one is."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")


@overload
def frozen(cls: type[T], /) -> type[T]: ...
@overload
def frozen(*, slots: bool = False) -> Callable[[type[T]], type[T]]: ...
@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def frozen(cls: type[T] | None = None, /, *, slots: bool = False) -> Any:
    """`@dataclass(frozen=True)` to the type checker; at run time a dataclass whose `__init__` assigns plainly."""

    def make(plain: type[T]) -> type[T]:
        return dataclasses.dataclass(plain, slots=slots, unsafe_hash=True)

    return make if cls is None else make(cls)
