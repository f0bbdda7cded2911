"""config.toml writes through tomlkit, keeping comments and layout; validated before anything is written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from engine import statefs
from engine.config.lines import split_key
from engine.config.loader import load_config_text
from engine.config.model import Config, ConfigError


def set_config_value(path: str | Path, dotted_key: str, value: Any) -> Config:
    """Set (or, with None, remove) one key through tomlkit, keeping comments and layout.

    `agents.list[<id>].…` addresses an agent by id (created when missing). The result is validated
    before anything is written; a bad value raises ConfigError and leaves the file untouched.
    """
    # tomlkit costs ~20 ms to import and only writes need it (every CLI verb loads the config to read it).
    import tomlkit
    import tomlkit.exceptions

    target = Path(path)
    with statefs.file_lock(target):
        text = statefs.read_text(target) or ""
        try:
            doc = tomlkit.parse(text)
        except tomlkit.exceptions.ParseError as exc:
            raise ConfigError(target, "", getattr(exc, "line", None), f"invalid TOML: {exc}") from exc
        container: Any = doc
        parts = _parse_dotted(target, dotted_key)
        for i, part in enumerate(parts[:-1]):
            if isinstance(part, tuple):  # ("agents.list", id)
                container = _agent_table(doc, part[1])
                continue
            nxt = container.get(part)
            if nxt is None:
                if value is None:
                    return load_config_text(text, target)
                nxt = tomlkit.table(is_super_table=i < len(parts) - 2)
                container[part] = nxt
            container = nxt
        last = parts[-1]
        assert isinstance(last, str)
        if value is None:
            if last in container:
                del container[last]
        else:
            container[last] = value
        new_text = tomlkit.dumps(doc)
        cfg = load_config_text(new_text, target)
        statefs.atomic_write(target, new_text)
        return cfg


def _parse_dotted(file: Path, dotted_key: str) -> list[str | tuple[str, str]]:
    m = re.fullmatch(r"agents\.list\[([^\]]+)\]\.(.+)", dotted_key.strip())
    head: list[str | tuple[str, str]] = []
    rest = dotted_key.strip()
    if m:
        head, rest = [("agents.list", m.group(1).strip())], m.group(2)
    parsed = split_key(rest + " =", 0)
    if parsed is None or rest[parsed[1] :].strip():
        raise ConfigError(file, dotted_key, None, "not a valid dotted key")
    return [*head, *parsed[0]]


def _agent_table(doc: Any, agent_id: str) -> Any:
    import tomlkit

    agents = doc.get("agents")
    if agents is None:
        agents = tomlkit.table(is_super_table=True)
        doc["agents"] = agents
    entries = agents.get("list")
    if entries is None:
        entries = tomlkit.aot()
        agents["list"] = entries
    for entry in entries:
        if str(entry.get("id", "")).strip() == agent_id:
            return entry
    entry = tomlkit.table()
    entry["id"] = agent_id
    entries.append(entry)
    return entry
