"""A parsed config table checked against its schema: what each key may hold; errors name file, key, line."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.commands.hostenv import inert_env_problem, inherit_env_problem
from engine.commands.interpreters import is_interpreter, runs_others
from engine.commands.safebins import SafeBinProfile
from engine.config.egress import BadName, normalize, parse_pattern
from engine.config.lines import PathParts, render_key
from engine.config.model import ConfigError
from engine.config.schema import (
    MAX_CONTAINER_PREFIX,
    PROFILE_KEYS,
    ULIMIT_NAMES,
    Spec,
    Table,
    container_path_problem,
    is_host_entry,
    is_ip,
    parse_ulimit,
)


class Checker:
    def __init__(self, file: Path, lines: dict[str, int]) -> None:
        self.file = file
        self.lines = lines

    def error(self, parts: PathParts, message: str) -> ConfigError:
        line = None
        for k in range(len(parts), 0, -1):
            line = self.lines.get(render_key(parts[:k]))
            if line is not None:
                break
        return ConfigError(self.file, render_key(parts), line, message)

    def table(self, raw: Any, keys: Mapping[str, Spec | Table], parts: PathParts) -> dict[str, Any]:
        """Validate a table; return {attr: value} for the keys it sets."""
        if not isinstance(raw, dict):
            raise self.error(parts, f"expected a table, got {type_name(raw)}")
        out: dict[str, Any] = {}
        for name, value in raw.items():
            spec = keys.get(name)
            here = [*parts, name]
            if spec is None:
                raise self.error(here, f"unknown key{suggest(name, keys)}")
            if isinstance(spec, Table):
                out[spec.attr] = self.table(value, spec.keys, here)
            else:
                out[spec.attr] = self.value(value, spec, here)
        return out

    def value(self, value: Any, spec: Spec, parts: PathParts) -> Any:
        kind = spec.kind
        if kind in ("str", "enum"):
            if not isinstance(value, str):
                raise self.error(parts, f"expected a string, got {type_name(value)}")
            if kind == "enum":
                # Exact lowercase only: "FULL" would grant nothing in OpenClaw, so it grants nothing here.
                if value not in spec.choices:
                    raise self.error(parts, f"invalid value {value!r} (expected {'|'.join(spec.choices)})")
                return value
            if not value.strip():
                raise self.error(parts, "must not be empty")
            return value
        if kind == "bool":
            if not isinstance(value, bool):
                raise self.error(parts, f"expected true or false, got {type_name(value)}")
            return value
        if kind in ("int", "number"):
            ok = isinstance(value, int) or (kind == "number" and isinstance(value, float))
            if isinstance(value, bool) or not ok:
                want = "an integer" if kind == "int" else "a number"
                raise self.error(parts, f"expected {want}, got {type_name(value)}")
            if spec.clamp is not None:
                return min(max(value, spec.clamp[0]), spec.clamp[1])
            if spec.minimum is not None and value < spec.minimum:
                raise self.error(parts, f"must be at least {_number(spec.minimum)}")
            if spec.maximum is not None and value > spec.maximum:
                raise self.error(parts, f"must be at most {_number(spec.maximum)}")
            return value
        if kind == "size":
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise self.error(parts, f'expected a size like "512m" or bytes, got {type_name(value)}')
            if isinstance(value, str) and not re.fullmatch(r"\d+(\.\d+)?[bkmgBKMG]?", value.strip()):
                raise self.error(parts, f'invalid size {value!r} (expected e.g. "512m", "2g")')
            if isinstance(value, int) and value <= 0:
                raise self.error(parts, "must be positive")
            return value
        if kind == "swap":
            if value == -1 and not isinstance(value, bool):
                return -1
            return self.value(value, replace(spec, kind="size"), parts)
        if kind == "strlist":
            return self.strlist(value, parts)
        if kind == "portlist":
            ok = isinstance(value, list) and all(type(p) is int and 0 <= p <= 65535 for p in value)
            if not ok:
                raise self.error(parts, f"expected a list of TCP ports (0-65535), got {value!r}")
            return list(value)
        if kind == "envkeys":
            for item in self.strlist(value, parts):
                problem = inert_env_problem(item)
                if problem is not None:
                    raise self.error(parts, f"{problem} and can never be inert")
            return list(value)
        if kind == "inheritkeys":
            for item in self.strlist(value, parts):
                problem = inherit_env_problem(item)
                if problem is not None:
                    raise self.error(parts, problem)
            return list(value)
        if kind == "hostdirs":
            for item in self.strlist(value, parts):
                if not (item.startswith("/") or item == "~" or item.startswith("~/")):
                    raise self.error(parts, f"{item!r} is not an absolute directory (or one under ~/)")
                if any(word in ("..", ".") for word in item.split("/")) or "\x00" in item:
                    raise self.error(
                        parts, f"{item!r} holds a `.` or `..` component: name the directory itself"
                    )
                if item.rstrip("/") in ("~", ""):
                    raise self.error(
                        parts, f"{item!r} is the home directory or /: name a directory inside it"
                    )
            return list(value)
        if kind == "privatedirs":
            for item in self.strlist(value, parts):
                named = item.startswith("$") and item[1:].isidentifier()
                if not (named or item.startswith("/") or item.startswith("~/")):
                    raise self.error(
                        parts, f"{item!r} is not an absolute directory, one under ~/ or a $VARIABLE"
                    )
                if item.rstrip("/") in ("~", "") or any(w in ("..", ".") for w in item.split("/")):
                    raise self.error(parts, f"{item!r} is /, the home or holds `.` or `..`: name a directory")
            return list(value)
        if kind == "treesafe":
            for item in self.strlist(value, parts):
                if "/" in item or not item.strip() or is_interpreter(item) or runs_others(item):
                    raise self.error(
                        parts,
                        f"{item!r} is not a program name, or runs other programs or code (a shell, an "
                        "interpreter, a build tool): it can never be safe in a tree the agent can write",
                    )
            return list(value)
        if kind == "safebins":
            for item in self.strlist(value, parts):
                if is_interpreter(item.strip()):
                    raise self.error(
                        parts,
                        f"{item!r} runs code (a shell, an interpreter or a language such as jq) "
                        "and can never be a safe bin",
                    )
            return list(value)
        if kind == "ulimits":
            return self.ulimits(value, parts)
        if kind == "iplist":
            for item in self.strlist(value, parts):
                if not is_ip(item):
                    raise self.error(parts, f"invalid IP address {item!r}")
            return list(value)
        if kind == "hostlist":
            for item in self.strlist(value, parts):
                if not is_host_entry(item):
                    raise self.error(parts, f'invalid host entry {item!r} (expected "name:ip")')
            return list(value)
        if kind == "egresslist":
            for item in self.strlist(value, parts):
                try:
                    parse_pattern(item)
                except ValueError as exc:
                    raise self.error(parts, str(exc)) from None
            return list(value)
        if kind == "resolvemap":
            if not isinstance(value, dict):
                raise self.error(parts, f'expected a table of name = "address", got {type_name(value)}')
            for k, v in value.items():
                try:
                    if normalize(k) != k.lower().rstrip(".") or is_ip(k):
                        raise BadName(f"{k!r} is not a plain host name")
                except BadName as exc:
                    raise self.error([*parts, k], str(exc)) from None
                if not isinstance(v, str) or not is_ip(v):
                    raise self.error([*parts, k], f"expected an IP address, got {v!r}")
            return dict(value)
        if kind == "cpath":
            if not isinstance(value, str):
                raise self.error(parts, f"expected a string, got {type_name(value)}")
            problem = container_path_problem(value)
            if problem is not None:
                raise self.error(parts, problem)
            return value
        if kind == "prefix":
            if not isinstance(value, str):
                raise self.error(parts, f"expected a string, got {type_name(value)}")
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", value):
                raise self.error(parts, f"invalid container name prefix {value!r} (letters, digits, _ . -)")
            if len(value) > MAX_CONTAINER_PREFIX:
                raise self.error(parts, f"must be at most {MAX_CONTAINER_PREFIX} characters")
            return value
        if kind == "strmap":
            if not isinstance(value, dict):
                raise self.error(parts, f"expected a table of strings, got {type_name(value)}")
            for k, v in value.items():
                if not isinstance(v, str):
                    raise self.error([*parts, k], f"expected a string, got {type_name(v)}")
            return dict(value)
        if kind == "profiles":
            return self.profiles(value, parts)
        raise AssertionError(kind)

    def strlist(self, value: Any, parts: PathParts) -> list[str]:
        if not isinstance(value, list):
            raise self.error(parts, f"expected a list of strings, got {type_name(value)}")
        for item in value:
            if not isinstance(item, str) or not item.strip():
                raise self.error(parts, f"expected non-empty strings, got {type_name(item)} {item!r}")
        return list(value)

    def ulimits(self, value: Any, parts: PathParts) -> dict[str, tuple[int, int]]:
        if not isinstance(value, dict):
            raise self.error(parts, f"expected a table of ulimits, got {type_name(value)}")
        out: dict[str, tuple[int, int]] = {}
        for name, item in value.items():
            if name not in ULIMIT_NAMES:
                raise self.error(
                    [*parts, name], f"unknown ulimit (expected one of: {', '.join(ULIMIT_NAMES)})"
                )
            try:
                out[name] = parse_ulimit(item)
            except ValueError as exc:
                raise self.error([*parts, name], str(exc)) from None
        return out

    def profiles(self, value: Any, parts: PathParts) -> dict[str, dict[str, Any]]:
        if not isinstance(value, dict):
            raise self.error(parts, f"expected a table of profiles, got {type_name(value)}")
        out: dict[str, dict[str, Any]] = {}
        for binary, profile in value.items():
            here = [*parts, binary]
            if not isinstance(profile, dict):
                raise self.error(here, f"expected a table, got {type_name(profile)}")
            for key, item in profile.items():
                kind = PROFILE_KEYS.get(key)
                if kind is None:
                    raise self.error([*here, key], f"unknown key{suggest(key, PROFILE_KEYS)}")
                if kind == "strlist":
                    self.strlist(item, [*here, key])
                elif isinstance(item, bool) or not isinstance(item, int) or item < 0:
                    raise self.error([*here, key], "expected a non-negative integer")
            try:
                SafeBinProfile.from_config(profile)
            except ValueError as exc:
                raise self.error(here, str(exc)) from None
            out[binary] = dict(profile)
        return out


def type_name(value: Any) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a table",
    }.get(type(value), type(value).__name__)


def suggest(name: str, keys: Mapping[str, Any]) -> str:
    lowered = {k.lower(): k for k in keys}
    close = lowered.get(name.lower().replace("_", ""))
    if close is None:
        import difflib

        found = difflib.get_close_matches(name, list(keys), n=1)
        close = found[0] if found else None
    return f" (did you mean {close!r}?)" if close else f" (expected one of: {', '.join(keys)})"


def _number(limit: float) -> str:
    """A limit as a config file spells it: 2097152, never 2.09715e+06 (a byte count read back)."""
    return str(int(limit)) if float(limit).is_integer() else f"{limit:g}"
