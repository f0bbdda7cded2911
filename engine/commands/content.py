"""Content binding: the sha256 of every file a decided command will execute or read as code."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from engine.commands import viewpaths
from engine.commands.allowlist import AllowlistResult, SegmentMatch, pin_path
from engine.commands.analysis import CommandAnalysis, Segment
from engine.commands.bindproof import handed_off, segment_unproven, unproven_sources
from engine.commands.boundfiles import ContentBinding, ContentItem
from engine.commands.builtcmd import built_command
from engine.commands.digests import (
    PROGRAM_MAX_BYTES,
    SCRIPT_MAX_BYTES,
    UNREADABLE,
    ContentError,
    digest_path,
)
from engine.commands.filetrust import links_fixed, system_owned
from engine.commands.interpoptions import (
    FILE,
    INLINE,
    MODULE,
    STDIN,
    UNKNOWN,
    family,
    loaded_values,
    program_source,
    python_skips_first_line,
)
from engine.commands.interpreters import name_of
from engine.commands.protected import process_word
from engine.commands.pyenvpin import PyenvError, pyenv_version
from engine.commands.scriptfiles import SHELL_BUILTINS, file_kind, parse_shebang, reader_of, script_operand
from engine.commands.stdinprogram import stdin_program_refusal
from engine.commands.textnames import (
    FILE_WORDS_MAX,
    all_words,
    cd_dirs,
    file_words,
    imports_note,
    names_interpreter,
    plain_segments,
    split_words,
    unpinned_word,
)
from engine.commands.which import DEFAULT_PATH, resolves_through_proc


def _limit(role: str) -> int:
    """How much of a file binding reads: a program's cap for what runs as a binary, else a script's."""
    return PROGRAM_MAX_BYTES if role in ("executable", "interpreter", "wrapper") else SCRIPT_MAX_BYTES


def bind(
    analysis: CommandAnalysis,
    result: AllowlistResult,
    cwd: str,
    env: Mapping[str, str],
    *,
    resolve_program: Callable[[str, str, str], str | None] | None = None,
    command: str | None = None,
    in_view: Callable[[str], str | None] | None = None,
) -> ContentBinding:
    """Digest every executable (pinned binaries, wrappers, `#!` interpreters) and every script operand.
    `in_view`: a word's host path as the run's view resolves it (engine.commands.viewpaths), when that
    can be another file than the host's (the agent's own copy of /tmp): the script bound is the run's."""
    items: list[ContentItem] = []
    problems: list[str] = []
    # Every path read below goes through this one translation: where the run's view has it.
    at = in_view or viewpaths.reader((), cwd)
    path_var = env.get("PATH", DEFAULT_PATH)
    seen: set[tuple[str, tuple[int, ...], int]] = set()
    linked: str | None = None  # a script operand resolved through a link into /proc

    def add(item: ContentItem) -> None:
        key = (item.real, item.where, item.argv_index)
        if key not in seen:
            seen.add(key)
            items.append(item)

    def file_item(role: str, shown: str, real: str, where: tuple[int, ...], index: int, **kw: Any) -> None:
        try:
            digest, size, writable, head = digest_path(real, limit=_limit(role))
        except ContentError as exc:
            problems.append(f"{shown}: {exc}")
            if exc.over or not system_owned(real):
                # Over the cap: bound as unreadable, so the run is refused with this reason (never unbound).
                # Unreadable (mode 0111, a FIFO…) yet changeable: the run is refused rather than unbound.
                add(ContentItem(role, shown, real, UNREADABLE, 0, True, where, index))
            return
        kind = file_kind(head) if head and role in ("executable", "interpreter") else ""
        shebang: tuple[str, ...] = ()
        if kind == "shebang":
            words = parse_shebang(head) or ()
            shebang = _interpreter_words(words, path_var, cwd, resolve_program)
        add(
            ContentItem(
                role,
                shown,
                real,
                digest,
                size,
                writable,
                where,
                index,
                kind,
                shebang,
                kw.get("parent"),
                kw.get("reader", ""),
                kw.get("word", ""),
                skip_first=kw.get("skip_first", False),
            )
        )
        if shebang and role in ("executable", "interpreter"):
            interp = os.path.realpath(shebang[0])
            depth = kw.get("depth", 0)
            if depth >= 3:
                problems.append(f"{shown}: interpreter chain too deep to bind")
                return
            file_item("interpreter", shebang[0], interp, where, -1, parent=real, depth=depth + 1)
            if shebang[0] != interp and not links_fixed(shebang[0]):
                # `#!/w/venv/bin/python`: the agent's link to root's python. Bound by the real file's bytes
                # and run by its real path (verified._run_words), never again through the link.
                _relink(items, where, shebang[0], parent=real)
        elif kind == "shebang":
            problems.append(f"{shown}: its #! interpreter is chosen at run time and cannot be bound")

    def walk(segments: Sequence[Segment], matches: Sequence[SegmentMatch], where: tuple[int, ...]) -> None:
        nonlocal linked
        for index, (segment, match) in enumerate(zip(segments, matches, strict=False)):
            here = (*where, index)
            for wrapper in match.wrapper_paths:
                file_item("wrapper", wrapper, os.path.realpath(wrapper), here, -1)
            if match.resolved_path is not None:
                shown = pin_path(match) or match.resolved_path
                file_item("executable", shown, match.resolved_path, here, 0)
                named = match.named_path or shown
                if named != match.resolved_path and not links_fixed(os.path.abspath(named)):
                    _relink(items, here, named)
            elif segment.argv and segment.inner is None:
                # Not there yet: the approved text would run whatever appears later, so it must stay absent.
                name = segment.argv[0]
                if "/" in name:
                    named = os.path.abspath(os.path.join(cwd, name))
                    add(ContentItem("executable", named, named, None, 0, True, here, -1))
                elif name and name not in SHELL_BUILTINS:
                    add(ContentItem("executable", name, name, None, 0, True, here, -1, search=path_var))
            if segment.inner is not None and match.inner is not None:
                walk(segment.inner.segments, match.inner.segments, here)
                continue
            program = match.resolved_path or segment.argv[0]
            operand = script_operand(segment.argv, segment.argv[0]) or (
                script_operand(segment.argv, program) if program != segment.argv[0] else None
            )
            if operand is None or operand >= len(segment.argv):
                continue
            word = segment.argv[operand]
            named = os.path.join(cwd, word)
            real = os.path.realpath(named)
            shown = os.path.abspath(named)
            seen = in_view(word) if in_view is not None else real
            if seen is None:
                problems.append(f"{shown}: a loop of links in the run's view")
                add(ContentItem("script", shown, real, UNREADABLE, 0, True, here, operand))
                continue
            if seen != real:  # the run's file is the agent's own copy: that one is bound, and shown
                named = real = seen
            if linked is None and resolves_through_proc(os.path.abspath(named)):
                linked = word  # a link into /proc: resolved here, it names the gateway's file
            # After `--` (or a shell's lone `-`, which ends its options too) no option may follow: `-c`
            # there would name a file to run. The copy is then named by its /proc path instead.
            after_dashdash = segment.argv[operand - 1] in ("--", "-")
            reader = "" if after_dashdash else (reader_of(segment.argv[0]) or reader_of(program))
            if not os.path.lexists(named):
                add(ContentItem("script", shown, real, None, 0, True, here, operand))
            elif os.path.isdir(named):
                continue  # the interpreter runs a file it finds inside (`python3 app`): unproven, allow-once
            else:  # a FIFO or a device is not bound: refused below, never left unbound
                # Run through a link, the script is named by what it was bound at: "$0" (and __file__) is
                # then the file the run's view pins, not a name the agent can re-point after the spawn.
                if shown != real:
                    word = real
                skip = reader == "python" and python_skips_first_line(segment.argv[1:operand])
                file_item(
                    "script",
                    shown,
                    real,
                    here,
                    operand,
                    reader=reader,
                    word=word,
                    skip_first=skip,
                )

    walk(analysis.segments, result.segments, ())
    unbound = searched = opaque = refused = False
    notes: list[str] = []
    whole = not analysis.ok  # unparsed: every file the text names is bound whole
    # A plain segment the proof cannot prove (`nohup sh x.sh`, `awk -fp.awk`, `echo x.sh | xargs sh`) may
    # run any file its words name: each is bound whole too, never left unbound on allow-once (issue 27 §5).
    whole = whole or any(
        segment_unproven(s.argv, cwd, at) for s in plain_segments(analysis.segments) if s.argv
    )
    for segment in plain_segments(analysis.segments):
        source = program_source(segment.argv)
        if source is None:
            continue
        for value in loaded_values(segment.argv):
            # `node -r ./hook.js app.js`: the preload runs before the program, so it is bound like it. Only
            # a `./`, `../` or absolute value names a file: any other (`-r h.js`, `-r dotenv/config`) is a
            # search of node_modules up the tree (ruby: $LOAD_PATH), never ./h.js: nothing to bind.
            named = os.path.abspath(os.path.join(cwd, value))
            real = at(value)
            if not value.startswith(("/", "./", "../")):
                if not searched:
                    searched = True
                    notes.append(
                        f"Warning: {name_of(segment.argv[0])} preloads {value!r}, found by a search "
                        "(node_modules up the tree, a load path): it cannot be bound, so allow-always is not "
                        "offered."
                    )
            elif real is None:
                problems.append(f"{named}: a loop of links in the run's view")
                add(ContentItem("loaded", named, named, UNREADABLE, 0, True, (), -1))
            elif os.path.isfile(real):
                file_item("loaded", named, real, (), -1)
            else:
                add(ContentItem("loaded", named, real, None, 0, True, (), -1))
        if source.kind == INLINE and len(segment.argv) > source.index + 1:
            # `python3 -c 'runpy.run_path(sys.argv[1])' s.py`: inline code may run any file its argv names.
            whole = True
        if source.kind in (STDIN, MODULE, UNKNOWN):
            whole = True  # `cat x.sh | sh`, `sh < x.sh`: the program is whatever those files hold
            unbound = unbound or source.kind != UNKNOWN
        if source.kind == UNKNOWN:
            # An option no grammar covers may load anything from anywhere (`node --env-file=.env` sets
            # NODE_OPTIONS, `python3 -X pycache_prefix=./pc` takes the standard library's bytecode from
            # ./pc): the files the text names are bound for this run, but nothing can be saved.
            opaque = True
        elif source.kind == FILE and family(segment.argv[0]) in ("python", "pypy"):
            note = imports_note(segment.argv[source.index], cwd)
            if note:
                notes.append(note)
    refuse = ""
    if whole:
        dirs, lost = cd_dirs(all_words(command or ""), cwd, env)
        if lost is not None:
            problems.append(
                f"the text changes directory ({lost}) to a place exechost cannot follow: the files it "
                "names there are not bound"
            )
            refuse = f"it changes directory ({lost}) to a place exechost cannot follow"
        if not analysis.ok and not refuse:
            refuse = unpinned_word(command or "")
        words, absent = file_words(command if command is not None else "", analysis, dirs, at)
        if len(words) + len(absent) > FILE_WORDS_MAX and not refuse:
            refuse = (
                f"it names {len(words) + len(absent)} files where each may be read as code, more than the "
                f"{FILE_WORDS_MAX} exechost binds"
            )
            problems.append(f"the text names more than {FILE_WORDS_MAX} files: they are not all bound")
            words, absent = words[:FILE_WORDS_MAX], absent[:FILE_WORDS_MAX]
        for word in words:
            named = os.path.abspath(os.path.join(cwd, word))
            real = at(word)
            if real is None:
                problems.append(f"{named}: a loop of links in the run's view")
                add(ContentItem("file", named, named, UNREADABLE, 0, True, (), -1))
            else:
                file_item("file", named, real, (), -1)
        for word in absent:
            named = os.path.abspath(os.path.join(cwd, word))
            add(ContentItem("file", named, at(word) or named, None, 0, True, (), -1))
        unbound = unbound and not words
        if not words and not analysis.ok and names_interpreter(command or ""):
            unbound = True
    text = command or ""
    if not refuse and ("env" in text or "xargs" in text or not text):
        # `env -S"sh s.sh"`, `xargs -a list sh`: the command is built from a string or a file no word names.
        argvs = [s.argv for s in plain_segments(analysis.segments)]
        refuse = built_command([*argvs, all_words(text)] if text else argvs)
        if refuse:
            problems.append(refuse)
    if not refuse:
        # `git show HEAD:s.sh | sh`, `cat s.s? | sh`: a program on a shell's stdin that no literal name holds.
        refuse = stdin_program_refusal(text)
        if refuse:
            problems.append(refuse)
    if any(item.sha256 == UNREADABLE for item in items):
        # Not a regular file (a FIFO hands each run whatever is written into it) or unreadable: no digest
        # holds it, so nothing can be saved; the run itself is refused at the spawn (verified._check).
        notes.append(
            "Warning: a file the command runs or reads as code is not a regular file, cannot be read, or is "
            "larger than content binding reads: it cannot be bound, so allow-always is not offered and the "
            "run is refused."
        )
        refused = True
    # Every word as a shell would split it; the text split at blanks when the analysis has the words
    # already (assignments and redirections are in the text only).
    text = command or ""
    words = (text.split() if analysis.ok else split_words(text)) + [
        w for s in plain_segments(analysis.segments) for w in s.argv
    ]
    through = process_word(words, cwd) or linked
    if through is not None:
        notes.append(
            f"Warning: {through} names a file through /proc or /dev/fd, which each process resolves for "
            "itself (its own cwd, fds, root): exechost cannot bind what the run will read there, so "
            "allow-always is not offered."
        )
        refused = True
    if opaque:
        notes.append(
            "Warning: an interpreter is given an option exechost does not model: what that option loads "
            "cannot be bound, so allow-always is not offered."
        )
    if not refuse:
        # `perl x.pl` whose #! names ./evil, an ELF whose loader the agent writes: started by a path, not
        # from a copy, so even allow-once could not run what was approved.
        refuse = handed_off(items)
        if refuse:
            problems.append(refuse)
    pins: dict[str, str] = {}
    for item in items:
        if item.role == "executable" and os.path.basename(os.path.dirname(item.real)) == "shims":
            try:
                version = pyenv_version(item.real, cwd, env)
            except PyenvError as exc:
                refuse = refuse or str(exc)
                problems.append(str(exc))
                continue
            if version is not None:
                pins["PYENV_VERSION"] = version
    why = unproven_sources(analysis, tuple(items), cwd, command or "", at)
    why += [f"{p}" for p in problems]
    if unbound or searched or opaque:
        why.append("a program comes from stdin, a search path or an option exechost does not model")
    if refused:
        why.append("a file it runs is not a regular file, or is reached through /proc")
    if refuse:
        why.append(refuse)
    return ContentBinding(
        tuple(items),
        analysis,
        result,
        tuple(problems),
        unbound,
        tuple(notes),
        searched or opaque or refused,
        proven=not why,
        unproven=tuple(dict.fromkeys(why)),
        refuse=refuse,
        env=tuple(pins.items()),
    )


def _relink(items: list[ContentItem], where: tuple[int, ...], named: str, parent: str | None = None) -> None:
    """Mark the executable just bound at `where` (or the `#!` interpreter of `parent`) as reached through
    the agent's link (ContentItem.linked)."""
    for i, item in enumerate(items):
        if parent is not None:
            mine = item.role == "interpreter" and item.parent == parent
        else:
            mine = item.role == "executable" and item.argv_index == 0
        if mine and item.where == where and item.sha256:
            if not item.writable:
                items[i] = replace(item, path=named, writable=True, linked=True)
            elif item.path != named:
                items[i] = replace(item, path=named)


def _interpreter_words(
    words: tuple[str, ...],
    path_var: str,
    cwd: str,
    resolve_program: Callable[[str, str, str], str | None] | None,
) -> tuple[str, ...]:
    """The interpreter a `#!` line runs, as words to run it with; an `env NAME` line resolved through PATH
    now (it would be searched again at run time, where an agent could plant another one). Empty when the
    line cannot be bound (`env -S …`, a relative interpreter)."""
    if not words or not words[0].startswith("/"):
        return ()
    interp, arg = words[0], (words[1] if len(words) > 1 else None)
    if name_of(interp) != "env":
        return (interp,) if arg is None else (interp, arg)
    if arg is None or arg.startswith("-") or " " in arg or "=" in arg:
        return ()
    found = (resolve_program or _which)(arg, cwd, path_var)
    return (found,) if found else ()


def _which(name: str, cwd: str, path_var: str) -> str | None:
    import shutil

    found = shutil.which(name, path=path_var)
    return os.path.abspath(found) if found else None
