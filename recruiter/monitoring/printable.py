"""Text from the database made safe to print (terminal views, plain log lines): each character
that would steer a terminal shown as an escape; JSON needs nothing (docs/guides/operations.md).

>>> printable("open [/var/in.csv] \\x1b[2Jcleared\\rhidden\\x00")
'open [/var/in.csv] \\\\x1b[2Jcleared\\\\rhidden\\\\x00'
>>> printable("two\\nlines\\tand a tab"), printable("two\\nlines", lines=False)
('two\\nlines\\tand a tab', 'two\\\\nlines')
>>> printable("a\\u2028b\\u200bc")
'a\\\\u2028b\\\\u200bc'
"""

from __future__ import annotations

_NAMED = {0x0A: "\\n", 0x09: "\\t", 0x0D: "\\r"}
_CONTROL = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
"""C0 controls, DEL and C1 controls (U+009B is a one-character CSI on some terminals)."""
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
"""Marks and overrides that reverse how the text around them reads (trojan-source)."""
_INVISIBLE = [0x2028, 0x2029, *range(0x200B, 0x200E), 0xFEFF]
"""Line separators (a new line to many log viewers) and zero-width characters (look-alikes)."""

_SHOWN: dict[int, str] = {
    code: _NAMED.get(code, f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    for code in [*_CONTROL, *_BIDI, *_INVISIBLE]
}
_KEEP_LINES = _SHOWN | {0x0A: "\n", 0x09: "\t"}


def printable(text: str, *, lines: bool = True) -> str:
    """``text`` with every control character made visible; newlines and tabs too, unless
    ``lines`` (the default: a traceback reads as lines), for text that must stay on one line."""
    return text.translate(_KEEP_LINES if lines else _SHOWN)
