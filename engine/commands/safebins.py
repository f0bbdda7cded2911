"""Safe bins: stdin-only filters allowed without an allowlist entry, each with an argument profile."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from engine.commands.interpreters import is_interpreter
from engine.errors import InvalidInput

# The reference's defaults; grep and sort have profiles below but stay opt-in. jq is a language (it
# reads the environment, files and modules), so like a shell it is never a safe bin: the config refuses it.
DEFAULT_SAFE_BINS: frozenset[str] = frozenset({"cut", "uniq", "head", "tail", "tr", "wc"})
DEFAULT_TRUSTED_DIRS: tuple[str, ...] = ("/bin", "/usr/bin")
# Programs that interpret their arguments as code: never a safe bin, whatever the config says.
ALWAYS_REJECTED = frozenset({"awk", "gawk", "mawk", "nawk", "sed", "gsed"})


@dataclass(frozen=True)
class SafeBinProfile:
    """What a safe bin may be given: flags are modelled one by one, everything unknown is refused."""

    min_positional: int = 0
    max_positional: int = 0
    value_flags: frozenset[str] = frozenset()  # take one value: `-n 5`, `-n5`, `--lines=5`, `--lines 5`
    bool_flags: frozenset[str] = frozenset()  # take none: `-l`, `-rc`, `--count`
    denied_flags: frozenset[str] = frozenset()  # known and refused: `-o`, `--files0-from`
    pair_value_flags: frozenset[str] = frozenset()  # take two values: jq `--arg name value`
    numeric_short: bool = False  # obsolete `head -5`
    denied_text: tuple[str, ...] = field(default=())  # regexes refused in any value or positional

    @classmethod
    def from_config(cls, raw: Mapping[str, Any]) -> SafeBinProfile:
        """Build from a `tools.exec.safeBinProfiles.<bin>` table (reference key names + booleanFlags)."""

        def flags(key: str) -> frozenset[str]:
            values = raw.get(key) or []
            if not isinstance(values, list) or not all(
                isinstance(v, str) and v.startswith("-") for v in values
            ):
                raise InvalidInput(f"{key} must be a list of flags starting with '-'")
            return frozenset(values)

        unknown = set(raw) - {
            "minPositional",
            "maxPositional",
            "allowedValueFlags",
            "deniedFlags",
            "booleanFlags",
        }
        if unknown:
            raise InvalidInput(f"unknown profile keys: {', '.join(sorted(unknown))}")
        low, high = raw.get("minPositional", 0), raw.get("maxPositional", 0)
        if not isinstance(low, int) or not isinstance(high, int) or low < 0 or high < low:
            raise InvalidInput("minPositional/maxPositional must be integers with 0 <= min <= max")
        return cls(low, high, flags("allowedValueFlags"), flags("booleanFlags"), flags("deniedFlags"))


def _f(*names: str) -> frozenset[str]:
    return frozenset(names)


DEFAULT_SAFE_BIN_PROFILES: dict[str, SafeBinProfile] = {
    "cut": SafeBinProfile(
        value_flags=_f(
            "-b", "-c", "-f", "-d", "--bytes", "--characters", "--fields", "--delimiter", "--output-delimiter"
        ),
        bool_flags=_f("-s", "-n", "-z", "--only-delimited", "--complement", "--zero-terminated"),
    ),
    "uniq": SafeBinProfile(
        value_flags=_f("-f", "-s", "-w", "--skip-fields", "--skip-chars", "--check-chars"),
        bool_flags=_f(
            "-c",
            "-d",
            "-D",
            "-u",
            "-i",
            "-z",
            "--count",
            "--repeated",
            "--unique",
            "--ignore-case",
            "--zero-terminated",
            "--group",
            "--all-repeated",
        ),
    ),
    "head": SafeBinProfile(
        value_flags=_f("-n", "-c", "--lines", "--bytes"),
        bool_flags=_f("-q", "-v", "-z", "--quiet", "--silent", "--verbose", "--zero-terminated"),
        numeric_short=True,
    ),
    "tail": SafeBinProfile(
        value_flags=_f("-n", "-c", "--lines", "--bytes"),
        bool_flags=_f(
            "-q",
            "-v",
            "-z",
            "--quiet",
            "--silent",
            "--verbose",
            "--zero-terminated",
        ),
        # Following never ends: a safe bin must finish on its own.
        denied_flags=_f("-f", "-F", "--follow", "--retry", "--pid", "-s", "--sleep-interval"),
        numeric_short=True,
    ),
    "tr": SafeBinProfile(
        min_positional=1,
        max_positional=2,
        bool_flags=_f(
            "-c", "-C", "-d", "-s", "-t", "--complement", "--delete", "--squeeze-repeats", "--truncate-set1"
        ),
    ),
    "wc": SafeBinProfile(
        value_flags=_f("--total"),
        bool_flags=_f(
            "-c", "-m", "-l", "-L", "-w", "--bytes", "--chars", "--lines", "--max-line-length", "--words"
        ),
        denied_flags=_f("--files0-from"),
    ),
    "sort": SafeBinProfile(
        value_flags=_f(
            "-k",
            "-t",
            "-S",
            "--key",
            "--field-separator",
            "--buffer-size",
            "--parallel",
            "--batch-size",
            "--sort",
        ),
        bool_flags=_f(
            "-b",
            "-d",
            "-f",
            "-g",
            "-i",
            "-h",
            "-M",
            "-n",
            "-R",
            "-r",
            "-V",
            "-s",
            "-u",
            "-z",
            "-c",
            "-C",
            "--ignore-leading-blanks",
            "--dictionary-order",
            "--ignore-case",
            "--general-numeric-sort",
            "--ignore-nonprinting",
            "--human-numeric-sort",
            "--month-sort",
            "--numeric-sort",
            "--random-sort",
            "--reverse",
            "--version-sort",
            "--stable",
            "--unique",
            "--zero-terminated",
            "--check",
            "--debug",
        ),
        denied_flags=_f(
            "--compress-program",
            "--files0-from",
            "--output",
            "--random-source",
            "--temporary-directory",
            "-T",
            "-o",
            "-m",
            "--merge",
        ),
    ),
    "grep": SafeBinProfile(
        value_flags=_f(
            "--regexp",
            "--max-count",
            "--after-context",
            "--before-context",
            "--context",
            "--devices",
            "--binary-files",
            "--exclude",
            "--include",
            "--label",
            "-e",
            "-m",
            "-A",
            "-B",
            "-C",
            "-D",
        ),
        bool_flags=_f(
            "-i",
            "-v",
            "-c",
            "-n",
            "-o",
            "-w",
            "-x",
            "-E",
            "-F",
            "-G",
            "-P",
            "-h",
            "-H",
            "-l",
            "-L",
            "-q",
            "-s",
            "-z",
            "-a",
            "-b",
            "--ignore-case",
            "--invert-match",
            "--count",
            "--line-number",
            "--only-matching",
            "--word-regexp",
            "--line-regexp",
            "--extended-regexp",
            "--fixed-strings",
            "--basic-regexp",
            "--perl-regexp",
            "--no-filename",
            "--with-filename",
            "--files-with-matches",
            "--files-without-match",
            "--quiet",
            "--silent",
            "--no-messages",
            "--null-data",
            "--text",
            "--byte-offset",
            "--color",
            "--colour",
        ),
        denied_flags=_f(
            "--file",
            "--exclude-from",
            "--dereference-recursive",
            "--directories",
            "--recursive",
            "-f",
            "-d",
            "-r",
            "-R",
        ),
    ),
}

_PATH_LIKE = re.compile(r"^(\.{1,2}/|~|/|[A-Za-z]:\\)")


def _literal_ok(value: str, profile: SafeBinProfile) -> bool:
    if _PATH_LIKE.match(value) or "${" in value:
        return False  # `${…}` passed along quoted still reads as an expansion to whoever sees it next
    return not any(re.search(pattern, value) for pattern in profile.denied_text)


def _long_flag(name: str, profile: SafeBinProfile) -> str | None:
    """GNU unique-prefix resolution over every known long flag; None when unknown or ambiguous."""
    known = [
        f
        for f in (*profile.value_flags, *profile.bool_flags, *profile.denied_flags, *profile.pair_value_flags)
        if f.startswith("--")
    ]
    if name in known:
        return name
    hits = [flag for flag in known if flag.startswith(name)]
    return hits[0] if len(hits) == 1 else None


def validate_safe_bin_argv(args: Sequence[str], profile: SafeBinProfile) -> str | None:
    """None when `args` (argv[1:]) fit the profile, else why not. Fail closed on anything unmodelled."""
    positional: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            positional.extend(args[i:])
            break
        if word == "-" or not word.startswith("-"):
            positional.append(word)
            continue
        if word.startswith("--"):
            name, has_value, value = word.partition("=")
            flag = _long_flag(name, profile)
            if flag is None:
                return f"unknown option {name}"
            if flag in profile.denied_flags:
                return f"option {flag} is not allowed"
            if flag in profile.bool_flags:
                if has_value:
                    return f"option {flag} takes no value"
                continue
            arity = 2 if flag in profile.pair_value_flags else 1
            values = [value] if has_value else []
            values += list(args[i : i + arity - len(values)])
            i += arity - (1 if has_value else 0)
            if len(values) != arity or not all(_literal_ok(v, profile) for v in values):
                return f"option {flag} has a missing or unsafe value"
            continue
        if profile.numeric_short and word[1:].isdigit():
            continue
        cluster = word[1:]
        for at, letter in enumerate(cluster):
            flag = "-" + letter
            if flag in profile.denied_flags:
                return f"option {flag} is not allowed"
            if flag in profile.bool_flags:
                continue
            if flag in profile.value_flags:
                rest = cluster[at + 1 :]
                if not rest:
                    if i >= len(args):
                        return f"option {flag} needs a value"
                    rest = args[i]
                    i += 1
                if not _literal_ok(rest, profile):
                    return f"option {flag} has an unsafe value"
                break
            return f"unknown option {flag}"
    if not profile.min_positional <= len(positional) <= profile.max_positional:
        low, high = profile.min_positional, profile.max_positional
        return f"takes {low}..{high} operands (file operands are not allowed)"
    for word in positional:
        if word != "-" and not _literal_ok(word, profile):
            return f"unsafe operand {word!r}"
    return None


@lru_cache(maxsize=64)
def safe_bin_names(configured: frozenset[str]) -> frozenset[str]:
    """The configured safe bins that may be one: never a shell, interpreter or code-running tool."""
    wanted = {name.strip().lower() for name in configured if name.strip()}
    return frozenset(n for n in wanted if not is_interpreter(n)) - ALWAYS_REJECTED
