"""Channels: how each state field folds the writes of a superstep.

Every field of a graph's state ``Schema`` is a channel, picked by its annotation:

* no marker — :class:`LastValue`: keeps the latest write, refuses two writes in one superstep;
* ``Annotated[T, Reducer(op)]`` — :class:`BinaryOperatorAggregate`: ``value = op(value, write)``;
* ``Annotated[list[T], Topic()]`` — :class:`TopicChannel`: appends every write (a list or an item).

A channel is a stateless *policy*; the values live in the run. ``apply`` returns the new value
and, when the fold only appended to a list, the appended suffix — the durable layer writes that
suffix instead of the whole list, so checkpoint size stays flat as a history grows.

New channel kinds subclass :class:`ChannelMarker` (the thing users put in ``Annotated``) and
:class:`Channel` (the policy).
"""

from __future__ import annotations

import inspect
import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Final, get_args, get_origin, get_type_hints

from tensorsketch.errors import InvalidUpdateError

__all__ = [
    "MISSING",
    "BinaryOperatorAggregate",
    "Channel",
    "ChannelMarker",
    "LastValue",
    "Reducer",
    "Topic",
    "TopicChannel",
]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


#: The value of a channel nobody has written and that has no default.
MISSING: Final = _Missing()

_LIST_CONCAT_OPS: Final = frozenset({operator.add, operator.concat, operator.iadd})


class Channel(ABC):
    """The folding policy of one state field."""

    __slots__ = ("clears_each_step", "field")

    #: Short name shown in errors, checkpoints and the canvas.
    kind: ClassVar[str] = "channel"
    #: Whether a node's ``Out`` type must be assignable to the field type (LastValue: yes).
    checks_write_type: ClassVar[bool] = False

    def __init__(self, field: str) -> None:
        self.field = field
        #: Whether the channel forgets its value at every barrier (one-shot topics).
        self.clears_each_step = False

    def initial(self, default: Any) -> Any:
        """The value before any write: the field default, or ``MISSING``."""
        return default

    def write_type(self, field_type: Any) -> Any:
        """The type a node's write to this field must be assignable to, for a field of
        ``field_type`` (``None``: the channel cannot say, and writes are not checked)."""
        return field_type if self.checks_write_type else None

    @abstractmethod
    def apply(
        self, current: Any, writes: Sequence[Any], writers: Sequence[str]
    ) -> tuple[Any, list[Any] | None]:
        """Fold ``writes`` (in deterministic task order) into ``current``.

        :param writers: the node name behind each write, for error messages only.
        :return: ``(new_value, appended)`` where ``appended`` is the list suffix added to a list
            value when the fold only appended to it, else ``None``.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.field!r})"


class ChannelMarker(ABC):
    """Base for objects placed in ``Annotated[T, ...]`` to choose a field's channel."""

    @abstractmethod
    def create(self, field: str) -> Channel:
        """Build the channel policy for the state field ``field``."""


class LastValue(Channel):
    """Keep the most recent write; two writes in one superstep are a race and raise."""

    __slots__ = ()
    kind = "last_value"
    checks_write_type = True

    def apply(
        self, current: Any, writes: Sequence[Any], writers: Sequence[str]
    ) -> tuple[Any, list[Any] | None]:
        if len(writes) == 1:
            return writes[0], None
        if not writes:
            return current, None
        names = ", ".join(repr(w) for w in writers)
        msg = (
            f"LastValue channel {self.field!r} received {len(writes)} writes in one superstep "
            f"(from {names}); give this field a reducer to combine concurrent writes, e.g. "
            f"`{self.field}: Annotated[list[...], Reducer(operator.add)]`, or route so only one "
            "node writes it per step."
        )
        raise InvalidUpdateError(msg)


class BinaryOperatorAggregate(Channel):
    """Fold every write with a binary operator: ``value = op(value, write)``.

    The first write seeds an unset value. ``op`` may also provide
    ``fold_delta(current, writes) -> (new, appended | None)`` to fold a whole superstep at once
    and report pure appends (``add_messages`` does).
    """

    __slots__ = ("_fold_delta", "_list_concat", "op")
    kind = "reducer"

    def __init__(self, field: str, op: Callable[[Any, Any], Any]) -> None:
        super().__init__(field)
        self.op = op
        self._list_concat = op in _LIST_CONCAT_OPS
        self._fold_delta: Callable[[Any, Sequence[Any]], tuple[Any, list[Any] | None]] | None = (
            getattr(op, "fold_delta", None)
        )

    def write_type(self, field_type: Any) -> Any:
        """A concatenating operator takes what the field holds (``list[T]`` + ``list[T]``);
        another takes the type its second parameter is annotated with, if it is."""
        if self._list_concat:
            return field_type if get_origin(field_type) in (list, tuple) else None
        declared = getattr(self.op, "update_type", None)  # a callable object can say
        if declared is not None:
            return declared
        try:
            hints = get_type_hints(self.op)
            params = list(inspect.signature(self.op).parameters.values())
        except (TypeError, ValueError, NameError):
            return None
        if len(params) < 2:
            return None
        return hints.get(params[1].name)

    def apply(
        self, current: Any, writes: Sequence[Any], writers: Sequence[str]
    ) -> tuple[Any, list[Any] | None]:
        if not writes:
            return current, None
        if self._fold_delta is not None:
            return self._fold_delta(current, writes)
        # list + list repeated k times equals one extended copy: O(n + k), not O(n * k).
        if self._list_concat and type(current) is list and all(type(w) is list for w in writes):
            suffix: list[Any] = []
            for w in writes:
                suffix.extend(w)
            return [*current, *suffix], suffix
        value = current
        start = 0
        if value is MISSING:
            value, start = writes[0], 1
        op = self.op
        for w in writes[start:]:
            value = op(value, w)
        return value, None

    def __repr__(self) -> str:
        name = getattr(self.op, "__name__", repr(self.op))
        return f"BinaryOperatorAggregate({self.field!r}, {name})"


class TopicChannel(Channel):
    """Concatenate every write (a list, or a single item) into one growing list."""

    __slots__ = ("accumulate",)
    kind = "topic"

    def __init__(self, field: str, *, accumulate: bool = True) -> None:
        super().__init__(field)
        self.accumulate = accumulate
        self.clears_each_step = not accumulate

    def initial(self, default: Any) -> Any:
        return [] if default is MISSING else list(default)

    def write_type(self, field_type: Any) -> Any:
        """One item or a list of them, for a ``list[T]`` field."""
        args = get_args(field_type)
        if get_origin(field_type) is not list or len(args) != 1:
            return None
        return args[0] | list[args[0]]  # type: ignore[valid-type]

    def apply(
        self, current: Any, writes: Sequence[Any], writers: Sequence[str]
    ) -> tuple[Any, list[Any] | None]:
        items: list[Any] = []
        for w in writes:
            if isinstance(w, list | tuple):
                items.extend(w)
            else:
                items.append(w)
        if not self.accumulate:
            return items, None
        if not items:
            return current, None
        base = current if isinstance(current, list) else []
        return [*base, *items], items


class Reducer(ChannelMarker):
    """``Annotated[T, Reducer(op)]``: fold concurrent and successive writes with ``op``."""

    __slots__ = ("op",)

    def __init__(self, op: Callable[[Any, Any], Any]) -> None:
        if not callable(op):
            msg = f"Reducer(op) needs a callable taking (current, update), got {op!r}."
            raise TypeError(msg)
        self.op = op

    def create(self, field: str) -> Channel:
        return BinaryOperatorAggregate(field, self.op)

    def __repr__(self) -> str:
        return f"Reducer({getattr(self.op, '__name__', self.op)!r})"


class Topic(ChannelMarker):
    """``Annotated[list[T], Topic()]``: a pub/sub list. ``accumulate=False`` keeps one step only."""

    __slots__ = ("accumulate",)

    def __init__(self, *, accumulate: bool = True) -> None:
        self.accumulate = accumulate

    def create(self, field: str) -> Channel:
        return TopicChannel(field, accumulate=self.accumulate)

    def __repr__(self) -> str:
        return f"Topic(accumulate={self.accumulate})"


class _LastValueMarker(ChannelMarker):
    def create(self, field: str) -> Channel:
        return LastValue(field)


def channel_for(field: str, metadata: Sequence[Any]) -> Channel:
    """Pick the channel for a state field from its ``Annotated`` metadata."""
    markers = [m for m in metadata if isinstance(m, ChannelMarker)]
    if len(markers) > 1:
        msg = (
            f"state field {field!r} has {len(markers)} channel markers ({markers!r}); "
            "keep exactly one Reducer(...)/Topic(...) in its Annotated[...]."
        )
        raise TypeError(msg)
    marker = markers[0] if markers else _LastValueMarker()
    return marker.create(field)
