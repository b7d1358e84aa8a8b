"""A small structural check: can a value of type ``src`` be stored where ``dst`` is expected?

Used by ``compile()`` to compare a node's ports with the state's fields. It answers ``True``
whenever it cannot be sure (unknown generics, forward references), so it only ever rejects
mismatches it can prove: ``int`` into ``str``, ``str`` into ``Literal["a"]``, ``list[int]``
into ``list[str]``, and so on.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from typing_extensions import TypeAliasType

_ALIAS_TYPES: tuple[type, ...] = tuple(
    {TypeAliasType, getattr(typing, "TypeAliasType", TypeAliasType)}
)

__all__ = ["is_assignable", "type_text"]

_ANY_LIKE = (Any, object)
_NUMERIC_WIDENING = {(int, float), (int, complex), (float, complex), (bool, int), (bool, float)}


def _strip(tp: Any) -> Any:
    while True:
        origin = get_origin(tp)
        if origin is typing.Annotated:
            tp = get_args(tp)[0]
        elif isinstance(tp, _ALIAS_TYPES):
            tp = tp.__value__  # type: ignore[attr-defined]
        else:
            return tp


def _is_union(tp: Any) -> bool:
    origin = get_origin(tp)
    return origin is Union or origin is types.UnionType


def is_assignable(src: Any, dst: Any) -> bool:
    """Whether every value of type ``src`` is a valid value of type ``dst``."""
    src, dst = _strip(src), _strip(dst)
    if src == dst or dst in _ANY_LIKE or src is Any:
        return True
    if isinstance(src, typing.TypeVar) or isinstance(dst, typing.TypeVar):
        return True
    if _is_union(src):
        return all(is_assignable(member, dst) for member in get_args(src))
    if _is_union(dst):
        return any(is_assignable(src, member) for member in get_args(dst))
    src_origin, dst_origin = get_origin(src), get_origin(dst)
    if src_origin is Literal or dst_origin is Literal:
        return _literal_assignable(src, dst)
    if src is type(None) or dst is type(None):
        return src is dst
    if src_origin is None or dst_origin is None:
        return _bare_assignable(src, dst, src_origin, dst_origin)
    return _generic_assignable(src, dst, src_origin, dst_origin)


def _literal_assignable(src: Any, dst: Any) -> bool:
    """Either side is a ``Literal``: compare values, or the values' types with ``dst``."""
    if get_origin(src) is not Literal:
        return False  # only literals fit a literal: ``str`` may not be ``"a"``
    if get_origin(dst) is Literal:
        return set(get_args(src)) <= set(get_args(dst))
    return all(is_assignable(type(value), dst) for value in get_args(src))


def _bare_assignable(src: Any, dst: Any, src_origin: Any, dst_origin: Any) -> bool:
    """At least one side is not subscripted (``int``, ``list``, or a form we cannot read)."""
    if src_origin is None and dst_origin is None:
        if isinstance(src, type) and isinstance(dst, type):
            return issubclass(src, dst) or (src, dst) in _NUMERIC_WIDENING
        return True  # forward references and exotic forms: do not guess
    # list vs list[int]: a bare generic on either side is compatible with its origin.
    bare_src = src if src_origin is None else src_origin
    bare_dst = dst if dst_origin is None else dst_origin
    if isinstance(bare_src, type) and isinstance(bare_dst, type):
        return issubclass(bare_src, bare_dst)
    return True


def _generic_assignable(src: Any, dst: Any, src_origin: Any, dst_origin: Any) -> bool:
    """Both sides subscripted (``list[int]`` into ``Sequence[str]``): origins, then arguments."""
    if not (isinstance(src_origin, type) and isinstance(dst_origin, type)):
        return True
    if not issubclass(src_origin, dst_origin):
        return False
    src_args, dst_args = get_args(src), get_args(dst)
    if not src_args or not dst_args:
        return True
    if dst_origin is tuple:
        if len(dst_args) == 2 and dst_args[1] is Ellipsis:
            return all(is_assignable(a, dst_args[0]) for a in src_args if a is not Ellipsis)
        if len(src_args) != len(dst_args):
            return False
    return all(is_assignable(a, b) for a, b in zip(src_args, dst_args) if a is not Ellipsis)


def type_text(tp: Any) -> str:
    """A readable rendering of a type for error messages (``list[str]``, ``Literal['a']``)."""
    tp = _strip(tp)
    if isinstance(tp, type) and get_origin(tp) is None:
        return tp.__qualname__
    text = repr(tp)
    return text.replace("typing.", "")
