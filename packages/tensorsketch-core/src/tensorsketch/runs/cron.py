"""Cron expressions: the five classic fields, read in a time zone, for ``Scheduler.cron``.

``minute hour day-of-month month day-of-week``, each ``*``, a number, a range ``a-b``, a
step ``*/n`` or ``a-b/n``, or a comma list of those; months and weekdays also by their
English three-letter names (``jan``, ``mon``); weekday ``0`` and ``7`` are Sunday. As in
Vixie cron, when both day fields are restricted a day matching either one fires.

Times are wall-clock times in the expression's zone (an IANA name such as
``Europe/Berlin``): a time the clocks skip (spring forward) does not fire that day, and a
time they pass twice (fall back) fires once, the first time.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["CronExpression"]

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
#: (name, lowest, highest, names that stand for lowest, lowest + 1, ...).
_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
#: How far ahead a next firing is searched (an expression such as ``0 0 30 2 *`` never fires).
_HORIZON_DAYS = 366 * 8


def _value(text: str, field: str, low: int, high: int, names: tuple[str, ...]) -> int:
    lowered = text.lower()
    if lowered in names:
        return low + names.index(lowered)
    if not text.isdigit():
        named = f" or a name ({', '.join(names)})" if names else ""
        msg = f"cron {field}: {text!r} is not a number{named}."
        raise ValueError(msg)
    number = int(text)
    if not low <= number <= high:
        msg = f"cron {field}: {number} is out of range {low}-{high}."
        raise ValueError(msg)
    return number


def _field(text: str, field: str, low: int, high: int, names: tuple[str, ...]) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        span, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                msg = f"cron {field}: the step in {part!r} must be a positive number."
                raise ValueError(msg)
            step = int(step_text)
        if span == "*":
            first, last = low, high
        elif "-" in span:
            a, _, b = span.partition("-")
            first, last = (_value(a, field, low, high, names), _value(b, field, low, high, names))
            if first > last:
                msg = f"cron {field}: the range {span!r} runs backwards."
                raise ValueError(msg)
        elif span:
            first = _value(span, field, low, high, names)
            last = high if step_text else first
        else:
            msg = f"cron {field}: an empty item in {text!r}."
            raise ValueError(msg)
        values.update(range(first, last + 1, step))
    return frozenset(values)


@dataclass(frozen=True, slots=True)
class CronExpression:
    """A parsed cron expression in a time zone; :meth:`next_after` is when it fires next.

    :ivar expression: the five fields as given.
    :ivar timezone: the IANA zone its times are read in.
    """

    expression: str
    timezone: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    #: Whether each day field was restricted (not ``*``): both restricted means "either".
    days_restricted: bool
    weekdays_restricted: bool

    @classmethod
    def parse(cls, expression: str, timezone: str = "UTC") -> CronExpression:
        """Read ``expression``; a wrong one is a ``ValueError`` naming the field at fault."""
        if not isinstance(expression, str):
            msg = f"a cron expression is a string, got {type(expression).__name__}."
            raise TypeError(msg)
        parts = expression.split()
        if len(parts) != 5:
            msg = (
                f"a cron expression has 5 fields (minute hour day-of-month month day-of-week, "
                f"e.g. '30 9 * * mon-fri'); {expression!r} has {len(parts)}."
            )
            raise ValueError(msg)
        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            msg = f"unknown time zone {timezone!r}; use an IANA name such as 'Europe/Berlin'."
            raise ValueError(msg) from None
        sets = [_field(p, *spec) for p, spec in zip(parts, _FIELDS, strict=True)]
        weekdays = frozenset(0 if d == 7 else d for d in sets[4])
        parsed = cls(
            expression=expression,
            timezone=timezone,
            minutes=sets[0],
            hours=sets[1],
            days=sets[2],
            months=sets[3],
            weekdays=weekdays,
            days_restricted=parts[2] != "*",
            weekdays_restricted=parts[4] != "*",
        )
        parsed.next_after(_dt.datetime.now(_dt.UTC).timestamp())  # one that never fires fails now
        return parsed

    def _day_matches(self, day: _dt.date) -> bool:
        if day.month not in self.months:
            return False
        by_date = day.day in self.days
        by_weekday = (day.isoweekday() % 7) in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return by_date or by_weekday
        return by_date and by_weekday

    def next_after(self, after: float) -> float:
        """The first firing strictly after Unix time ``after``, as a Unix time."""
        zone = ZoneInfo(self.timezone)
        local = _dt.datetime.fromtimestamp(after, zone).replace(
            tzinfo=None, second=0, microsecond=0
        )
        day = local.date()
        minutes = sorted(self.minutes)
        hours = sorted(self.hours)
        for _ in range(_HORIZON_DAYS):
            if self._day_matches(day):
                for hour in hours:
                    for minute in minutes:
                        wall = _dt.datetime.combine(day, _dt.time(hour, minute))
                        if wall < local:
                            continue
                        moment = wall.replace(tzinfo=zone)  # fold=0: the first of two
                        if moment.astimezone(_dt.UTC).astimezone(zone).replace(tzinfo=None) != wall:
                            continue  # the clocks skip this time today
                        stamp = moment.timestamp()
                        if stamp > after:
                            return stamp
            day += _dt.timedelta(days=1)
        msg = f"the cron expression {self.expression!r} never fires (checked {_HORIZON_DAYS} days)."
        raise ValueError(msg)
