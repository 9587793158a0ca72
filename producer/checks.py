"""Type and range checks of what a caller hands the farm, in one place for every entry point.

The sync and asyncio SDKs (``producer.submit``, ``Job.stream``/``wait``), books, the CLI and the HTTP
gateway all pass their arguments through these, so ``None``, a number where text belongs, bytes that are
not UTF-8, a list where a name belongs, ``True`` where a number belongs, NaN or an absurd value all get
the farm's ``InputError`` with a stable code, never an ``AttributeError`` or ``TypeError`` from inside.

Codes: the text itself of a wrong type is MALFORMED_JOB; text that is not valid Unicode is INVALID_UTF8 (a
``str`` with a lone surrogate here, bytes that are not UTF-8 from the segmenter); any option of a wrong type or
out of range is BAD_OPTION.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from pipeline.errors import BAD_LEXICON, BAD_OPTION, MALFORMED_JOB, InputError
from pipeline.text.clean import check_unicode

MAX_NAME_CHARS = 200  # a voice, a format, a lane, a job id: longer is never a real name
MAX_SEQ = 2**53  # after_seq: any chunk number a job can have (and a JSON number keeps it exactly)


def _kind(value: Any) -> str:
    return type(value).__name__


def text_arg(text: Any) -> str | bytes:
    """The text of a request: a ``str`` or UTF-8 ``bytes`` (``bytearray`` and ``memoryview`` are read as bytes).
    A ``str`` holding a surrogate code point, which no UTF-8 can carry, is INVALID_UTF8 here, before any
    other check."""
    if isinstance(text, str):
        return check_unicode(text)
    if isinstance(text, bytes):
        return text
    if isinstance(text, (bytearray, memoryview)):
        return bytes(text)
    raise InputError(f"the text must be a str or UTF-8 bytes, not {_kind(text)}", code=MALFORMED_JOB)


def name_arg(name: str, value: Any) -> str:
    """A short name (voice, format, lane, book id): a ``str`` of at most ``MAX_NAME_CHARS``."""
    if not isinstance(value, str):
        raise InputError(f"{name} must be a string, not {_kind(value)}", code=BAD_OPTION)
    if len(value) > MAX_NAME_CHARS:
        raise InputError(f"{name} is {len(value)} characters long; no {name} is longer than {MAX_NAME_CHARS}",
                         code=BAD_OPTION)
    return value


def optional_name_arg(name: str, value: Any) -> str | None:
    """``name_arg``, or ``None`` where that means the default."""
    return None if value is None else name_arg(name, value)


def number_arg(name: str, value: Any, *, low: float, high: float, optional: bool = False,
               integer: bool = False, low_open: bool = False) -> Any:
    """A finite real number (an ``int`` when ``integer``) in [low, high] ((low, high] when ``low_open``).
    ``bool`` is refused: ``True`` is an int to Python but never a meant number."""
    if value is None and optional:
        return None
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        what = "an integer" if integer else "a number"
        raise InputError(f"{name} must be {what}, not {_kind(value)}", code=BAD_OPTION)
    number: Any = value
    try:
        v = int(number) if integer else float(number)
        inside = (v > low if low_open else v >= low) and v <= high and (integer or math.isfinite(v))
    except (OverflowError, ValueError):  # an int too big for a float
        inside = False
    if not inside:
        bracket = "(" if low_open else "["
        shown = repr(value) if len(repr(value)) < 40 else repr(value)[:36] + "..."
        raise InputError(f"{name} must be in {bracket}{low:g}, {high:g}], got {shown}", code=BAD_OPTION)
    return v


def bool_arg(name: str, value: Any, *, optional: bool = False) -> bool | None:
    """``True`` or ``False`` (``None`` too when ``optional``); 1, "yes" and the like are refused."""
    if value is None and optional:
        return None
    if not isinstance(value, bool):
        raise InputError(f"{name} must be true or false, not {_kind(value)}", code=BAD_OPTION)
    return value


def integer_arg(name: str, value: Any, *, optional: bool = False) -> int | None:
    """An ``int`` of any size (not ``bool``); its range is for the caller to check."""
    return number_arg(name, value, low=-math.inf, high=math.inf, optional=optional, integer=True)  # type: ignore[no-any-return]


def options_arg(options: Any) -> dict[str, Any]:
    """Synthesis options: a mapping of option names to numbers (or ``None``: the voice's default). The
    names and ranges are the voices' own (``SynthesisOptions.from_dict``); here only their types."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise InputError(f"options must be a mapping such as {{'speed': 1.2}}, not {_kind(options)}", code=BAD_OPTION)
    out: dict[str, Any] = {}
    for key, value in options.items():
        name = name_arg("an option name", key)
        out[name] = number_arg(f"options[{name[:40]!r}]", value, low=-math.inf, high=math.inf, optional=True)
    return out


def lexicon_arg(lexicon: Any) -> dict[str, str] | None:
    """A pronunciation lexicon's type: a mapping of ``str`` to ``str`` (or ``None``); what the entries say is
    checked by ``pipeline.text.lexicon`` (BAD_LEXICON)."""
    if lexicon is None:
        return None
    if not isinstance(lexicon, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in lexicon.items()):
        raise InputError("lexicon must be a mapping of word -> pronunciation strings, such as {'重庆': 'chong2 qing4'}",
                         code=BAD_OPTION)
    return dict(lexicon)


def seq_arg(after_seq: Any) -> int:
    """``after_seq`` of a resumed stream: -1 (from the start) or a chunk number."""
    return int(number_arg("after_seq", after_seq, low=-1, high=MAX_SEQ, integer=True))


def timeout_arg(name: str, timeout: Any) -> float | None:
    """A wait in seconds: ``None`` (no limit) or a positive finite number."""
    return number_arg(name, timeout, low=0, high=math.inf, optional=True, low_open=True)


def job_id_arg(job_id: Any) -> str:
    """A job id to look up: a ``str`` (one that names no job is JOB_NOT_FOUND where it is looked up; one that no
    UTF-8 can carry, so no key can name, INVALID_UTF8)."""
    if not isinstance(job_id, str):
        raise InputError(f"a job id is a string, not {_kind(job_id)}", code=BAD_OPTION)
    return check_unicode(job_id, "the job id")


def stream_args(after_seq: Any, timeout: Any, block_ms: Any) -> tuple[int, float | None, int]:
    """``Job.stream``'s arguments, checked the same for both SDK faces."""
    block = number_arg("block_ms", block_ms, low=1, high=60_000, integer=True)
    return seq_arg(after_seq), timeout_arg("timeout", timeout), int(block)


def wait_args(timeout: Any, poll_s: Any) -> tuple[float | None, float]:
    """``Job.wait``'s arguments, checked the same for both SDK faces."""
    return timeout_arg("timeout", timeout), float(number_arg("poll_s", poll_s, low=0, high=60, low_open=True))


def read_lexicon(source: str | None) -> Any:
    """A lexicon given on a command line: inline JSON (``{"重庆": "chong2 qing4"}``) or the path of a JSON
    file; ``None`` when not given. Its entries are checked where it is used (``pipeline.text.lexicon``)."""
    import json
    from pathlib import Path

    if not source:
        return None
    try:
        raw = source if source.lstrip().startswith("{") else Path(source).read_text(encoding="utf-8")
        return json.loads(raw)
    except (OSError, ValueError) as exc:
        raise InputError(f"lexicon {source[:60]!r}: not a JSON object or a readable JSON file ({exc})",
                         code=BAD_LEXICON) from None
