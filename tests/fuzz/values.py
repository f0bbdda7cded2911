"""What the wire fuzzer sends: JSON values aimed at decoders and handlers, frames built from them, and
byte-level mutations of frames. Seeded (`random.Random`), so a run can be replayed from its seed."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

# Only commands that write nothing: a fuzzed operator may allowlist, override to security=full or approve
# whatever it sent, so whatever a `command` field can hold must be harmless when it runs.
COMMANDS = (
    "true",
    "echo fuzz",
    "ls",
    "pwd",
    "printf x",
    "head -c 10 /dev/null",
    "wc -l /dev/null",
    "cat /dev/null",
    "sleep 0.1",
    "id -u",
    "date",
    "echo a && echo b",
    "echo $(true)",
)
TEXTS = (
    "",
    " ",
    "x",
    "main",
    "agent:main:fuzz",
    "/tmp",
    "/",
    ".",
    "..",
    "../../etc/passwd",
    "*",
    "**",
    "~",
    "-1",
    "always",
    "allow-once",
    "allow-always",
    "deny",
    "full",
    "allowlist",
    "on-miss",
    "gateway",
    "sandbox",
    "node",
    "é😀",
    "\u202e\u200b",
    "\x1b[2J\x1b]52;c;aGk=\x07",
    "a\x00b",
    "\x00",
    "\ud800",  # a lone surrogate: json.dumps writes it as an escape, which json.loads accepts
    "\udfff tail",
    "x" * 5000,
)
NUMBERS: tuple[Any, ...] = (
    0,
    -1,
    1,
    7,
    1500,
    2**31,
    2**53 + 1,
    2**63,
    -(2**63) - 1,
    10**30,
    0.5,
    -0.0,
    1e300,
    float("nan"),
    float("inf"),
    float("-inf"),
    True,
    False,
    None,
)
HARD_SCALARS = ("1e400", "-1e400", "1" * 400, "NaN", "Infinity", "-Infinity", '"\\ud83d"', '"\\udc00x"')
_KEY = re.compile(r"""["']([a-z][A-Za-z0-9]{1,30}(?:\.[a-z]+)?)["']""")


def keys_from(*globs: str) -> list[str]:
    """Every camelCase word quoted in these sources: the parameter names their handlers read."""
    found: set[str] = set()
    for pattern in globs:
        for path in REPO.glob(pattern):
            found.update(_KEY.findall(path.read_text()))
    return sorted(found)


class Values:
    """Random JSON-ish values, biased towards what breaks decoders and towards ids seen in answers."""

    def __init__(self, rng: random.Random, keys: list[str]) -> None:
        self.rng = rng
        self.keys = keys
        self.seen: list[Any] = []  # ids, slugs and session ids from earlier answers, reused as values
        # Values no encoder writes (lone surrogates, NaN, 10**30) are refused before any handler: only some
        # frames carry them, so that most reach the handlers.
        self.hostile = True

    def remember(self, value: Any, depth: int = 0) -> None:
        if depth > 4 or len(self.seen) > 2000:
            if len(self.seen) > 2000:
                del self.seen[:1000]
            return
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, str) and key.lower().endswith(("id", "slug", "key", "name")) and item:
                    self.seen.append(item)
                else:
                    self.remember(item, depth + 1)
        elif isinstance(value, list):
            for item in value[:20]:
                self.remember(item, depth + 1)

    def text(self) -> str:
        r = self.rng.random()
        if r < 0.25 and self.seen:
            base = str(self.rng.choice(self.seen))
            return base if self.rng.random() < 0.7 else base[: self.rng.randint(0, len(base))]
        if r < 0.35:
            return self.rng.choice(COMMANDS)
        if r < 0.45:
            text = "".join(chr(self.rng.randint(0, 0x10FFFF)) for _ in range(self.rng.randint(1, 12)))
        else:
            text = self.rng.choice(TEXTS)
        return text if self.hostile else clean(text)

    def command(self) -> str:
        cmd = self.rng.choice(COMMANDS)
        r = self.rng.random()
        if r < 0.1:
            cmd += self.rng.choice(("\x00", "\ud800", " \udc00", "\n", "\r\n", " #é"))
        return cmd if self.hostile else clean(cmd)

    def scalar(self) -> Any:
        r = self.rng.random()
        if r < 0.5:
            return self.text()
        number = self.rng.choice(NUMBERS)
        if not self.hostile and isinstance(number, int | float) and not abs(number) < 2**62:
            return 1
        return number

    def value(self, depth: int = 0) -> Any:
        r = self.rng.random()
        if depth > 3 or r < 0.6:
            return self.scalar()
        if r < 0.75:
            return [self.value(depth + 1) for _ in range(self.rng.randint(0, 4))]
        if r < 0.8:
            return self.nested(self.rng.choice((8, 63, 65, 200) if self.hostile else (3, 8)))
        return self.params(depth + 1)

    def nested(self, depth: int) -> Any:
        value: Any = 1
        for _ in range(depth):
            value = [value] if self.rng.random() < 0.5 else {"a": value}
        return value

    def params(self, depth: int = 0) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for _ in range(self.rng.randint(0, 5)):
            key = self.rng.choice(self.keys) if self.rng.random() < 0.9 else self.text()
            out[key] = self.command() if key == "command" else self.value(depth)
        return out


def clean(text: str) -> str:
    """`text` without lone surrogates (what a well-behaved peer can send)."""
    return "".join(c for c in text if not 0xD800 <= ord(c) <= 0xDFFF)


def dumps(value: Any) -> bytes:
    """As a hostile peer writes it: lone surrogates as escapes, NaN and Infinity as bare words."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=True).encode()


def mutate(rng: random.Random, line: bytes) -> bytes:
    """One byte-level change to an encoded frame (never a newline inside it: one frame stays one line)."""
    r = rng.random()
    data = bytearray(line)
    if not data:
        return b"{"
    at = rng.randrange(len(data))
    if r < 0.2:
        data[at] = rng.randrange(256)
    elif r < 0.35:
        del data[at:]
    elif r < 0.5:
        data[at:at] = rng.choice((b"\\ud800", b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\x00", b"\\u0000"))
    elif r < 0.65:
        numbers = [m.span() for m in re.finditer(rb"-?\d+(\.\d+)?", bytes(data))]
        if numbers:
            start, end = rng.choice(numbers)
            data[start:end] = rng.choice(HARD_SCALARS).encode()
    elif r < 0.8:
        strings = [m.span() for m in re.finditer(rb'"[^"\\]*"', bytes(data))]
        if strings:
            start, end = rng.choice(strings)
            data[start:end] = rng.choice(
                (*HARD_SCALARS, "[]", "{}", "null", "true", '"' + "y" * 300 + '"')
            ).encode()
    elif r < 0.9:
        deep = rng.choice((70, 5000))  # past our limit; past the C parser's recursion guard
        data[at:at] = b"[" * deep + b"1" + b"]" * deep
    else:
        data = bytearray(rng.randbytes(rng.randint(1, 64)))
    return bytes(data).replace(b"\n", b" ")
