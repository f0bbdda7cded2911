"""tmux-style key names, hex bytes and bracketed paste encoded into the bytes a terminal sends."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

ESC = "\x1b"
PASTE_START = f"{ESC}[200~"
PASTE_END = f"{ESC}[201~"

# DECCKM (application cursor mode, `ESC[?1h`) switches unmodified cursor keys to SS3 sequences.
_SS3_KEYS = {
    "up": f"{ESC}OA",
    "down": f"{ESC}OB",
    "right": f"{ESC}OC",
    "left": f"{ESC}OD",
    "home": f"{ESC}OH",
    "end": f"{ESC}OF",
}

_NAMED = {
    "enter": "\r",
    "return": "\r",
    "tab": "\t",
    "escape": ESC,
    "esc": ESC,
    "space": " ",
    "bspace": "\x7f",
    "backspace": "\x7f",
    "up": f"{ESC}[A",
    "down": f"{ESC}[B",
    "right": f"{ESC}[C",
    "left": f"{ESC}[D",
    "home": f"{ESC}[1~",
    "end": f"{ESC}[4~",
    "pageup": f"{ESC}[5~",
    "pgup": f"{ESC}[5~",
    "ppage": f"{ESC}[5~",
    "pagedown": f"{ESC}[6~",
    "pgdn": f"{ESC}[6~",
    "npage": f"{ESC}[6~",
    "insert": f"{ESC}[2~",
    "ic": f"{ESC}[2~",
    "delete": f"{ESC}[3~",
    "del": f"{ESC}[3~",
    "dc": f"{ESC}[3~",
    "btab": f"{ESC}[Z",
    "f1": f"{ESC}OP",
    "f2": f"{ESC}OQ",
    "f3": f"{ESC}OR",
    "f4": f"{ESC}OS",
    "f5": f"{ESC}[15~",
    "f6": f"{ESC}[17~",
    "f7": f"{ESC}[18~",
    "f8": f"{ESC}[19~",
    "f9": f"{ESC}[20~",
    "f10": f"{ESC}[21~",
    "f11": f"{ESC}[23~",
    "f12": f"{ESC}[24~",
    "kp/": f"{ESC}Oo",
    "kp*": f"{ESC}Oj",
    "kp-": f"{ESC}Om",
    "kp+": f"{ESC}Ok",
    "kp7": f"{ESC}Ow",
    "kp8": f"{ESC}Ox",
    "kp9": f"{ESC}Oy",
    "kp4": f"{ESC}Ot",
    "kp5": f"{ESC}Ou",
    "kp6": f"{ESC}Ov",
    "kp1": f"{ESC}Oq",
    "kp2": f"{ESC}Or",
    "kp3": f"{ESC}Os",
    "kp0": f"{ESC}Op",
    "kp.": f"{ESC}On",
    "kpenter": f"{ESC}OM",
}

_MODIFIABLE = frozenset(
    "up down left right home end pageup pgup ppage pagedown pgdn npage insert ic delete del dc".split()  # noqa: SIM905
)
_HEX_RE = re.compile(r"[0-9a-f]{1,2}")


@dataclass
class _Mods:
    ctrl: bool = False
    alt: bool = False
    shift: bool = False

    def any(self) -> bool:
        return self.ctrl or self.alt or self.shift

    def xterm(self) -> int:
        return 1 + (1 if self.shift else 0) + (2 if self.alt else 0) + (4 if self.ctrl else 0)


@dataclass
class KeyEncoding:
    """The bytes to write, plus per-token warnings worded as the reference words them."""

    data: bytes
    warnings: list[str] = field(default_factory=list)


def _parse_mods(token: str) -> tuple[_Mods, str, bool]:
    mods = _Mods()
    rest = token
    seen = False
    while len(rest) > 2 and rest[1] == "-":
        mod = rest[0].lower()
        if mod == "c":
            mods.ctrl = True
        elif mod == "m":
            mods.alt = True
        elif mod == "s":
            mods.shift = True
        else:
            break
        seen = True
        rest = rest[2:]
    return mods, rest, seen


def _ctrl_char(char: str) -> str | None:
    if len(char) != 1:
        return None
    if char == "?":
        return "\x7f"
    code = ord(char.upper())
    if 64 <= code <= 95:
        return chr(code & 0x1F)
    return None


def _encode_token(raw: str, warnings: list[str], cursor_mode: str) -> str:
    token = raw.strip()
    if not token:
        return ""
    if len(token) == 2 and token.startswith("^"):
        ctrl = _ctrl_char(token[1])
        if ctrl:
            return ctrl
    mods, base, had_mods = _parse_mods(token)
    lower = base.lower()
    if lower == "tab" and mods.shift:
        return f"{ESC}[Z"
    if cursor_mode == "application" and not mods.any() and lower in _SS3_KEYS:
        return _SS3_KEYS[lower]
    seq = _NAMED.get(lower)
    if seq is not None:
        if lower in _MODIFIABLE and mods.any():
            # Bare cursor sequences omit the first CSI parameter; xterm modifiers need it.
            param = seq[2:-1] or "1"
            return f"{ESC}[{param};{mods.xterm()}{seq[-1]}"
        return ESC + seq if mods.alt else seq
    if len(base) == 1:
        value = base.upper() if mods.shift and "a" <= base <= "z" else base
        if mods.ctrl:
            value = _ctrl_char(value) or value
        return ESC + value if mods.alt else value
    if had_mods:
        warnings.append(f'Unknown key "{base}" for modifiers; sending literal.')
    return base


def parse_hex_byte(raw: str) -> int | None:
    """`0x1b` or `1b` -> 27; anything else -> None."""
    lower = raw.strip().lower()
    digits = lower[2:] if lower.startswith("0x") else lower
    if not _HEX_RE.fullmatch(digits):
        return None
    return int(digits, 16)


def needs_cursor_mode(keys: Sequence[str] | None) -> bool:
    """True when an unmodified arrow/home/end key is requested: its bytes depend on DECCKM."""
    for raw in keys or ():
        token = raw.strip()
        if not token:
            continue
        mods, base, _ = _parse_mods(token)
        if not mods.any() and base.lower() in _SS3_KEYS:
            return True
    return False


def encode_key_token(raw: str, cursor_mode: str = "normal") -> KeyEncoding:
    """One key token on its own (used when keys are sent with a delay between them)."""
    warnings: list[str] = []
    return KeyEncoding(_encode_token(raw, warnings, cursor_mode).encode("utf-8"), warnings)


def encode_keys(
    *,
    keys: Sequence[str] | None = None,
    hex_bytes: Sequence[str] | None = None,
    literal: str | None = None,
    cursor_mode: str = "normal",
) -> KeyEncoding:
    """Literal text, then hex bytes, then named keys: the reference's order."""
    warnings: list[str] = []
    raw_bytes = bytearray()
    for raw in hex_bytes or ():
        value = parse_hex_byte(raw)
        if value is None:
            warnings.append(f"Invalid hex byte: {raw}")
            continue
        raw_bytes.append(value)
    named = "".join(_encode_token(token, warnings, cursor_mode) for token in keys or ())
    data = (literal or "").encode("utf-8") + bytes(raw_bytes) + named.encode("utf-8")
    return KeyEncoding(data, warnings)


def encode_paste(text: str, bracketed: bool = True) -> str:
    """Bracketed paste (`ESC[200~ … ESC[201~`) so shells and editors don't run pasted newlines."""
    if not bracketed:
        return text
    # A pasted end marker would end the paste early and let the rest run as typed keys.
    return f"{PASTE_START}{text.replace(PASTE_END, '')}{PASTE_END}"
