"""viewpaths.reader, the one translation of the decision's paths: every spelling of a path in a private dir
lands in the agent's copy, as the run's view has it; textnames.file_words looks for files there too."""

from __future__ import annotations

import os
from pathlib import Path

from engine.commands import viewpaths
from engine.commands.analysis import analyze_command as analyze
from engine.commands.textnames import file_words


def _view(tmp_path: Path) -> tuple[Path, Path, tuple[tuple[str, str], ...]]:
    dest, source = tmp_path / "tmp", tmp_path / "copy"
    dest.mkdir()
    source.mkdir()
    return dest, source, ((str(source), str(dest)),)


def test_every_spelling_of_a_private_path_is_the_agents_copy(tmp_path: Path) -> None:
    dest, source, binds = _view(tmp_path)
    (source / "s.sh").write_text("agent\n")
    (dest / "s.sh").write_text("machine\n")
    work = tmp_path / "w"
    work.mkdir()
    os.symlink(str(dest), work / "t")  # a host link into the private dir: the copy in the view
    at = viewpaths.reader(binds, str(work))
    copy = str(source / "s.sh")
    assert at(str(dest / "s.sh")) == copy
    assert at("t/s.sh") == copy
    assert at(f"{work}/t/s.sh") == copy
    assert at(str(dest / "x" / ".." / "s.sh")) == copy
    assert at("plain") == str(work / "plain")  # nothing private on the way: the host's own path


def test_a_cwd_in_the_copy_walks_its_links_in_the_view(tmp_path: Path) -> None:
    """The decision names a workdir in a private dir by the copy's host path; a link in it to the private
    dir's own name (`l -> /tmp/d`) is read in the view: the copy's d, never the machine's."""
    dest, source, binds = _view(tmp_path)
    (source / "d").mkdir()
    (source / "d" / "f").write_text("agent\n")
    (dest / "d").mkdir()
    (dest / "d" / "f").write_text("machine\n")
    os.symlink(str(dest / "d"), source / "l")
    at = viewpaths.reader(binds, str(source))
    assert at("l/f") == str(source / "d" / "f")
    assert at(str(source / "l" / "f")) == str(source / "d" / "f")  # the copy's host name, walked in the view


def test_with_no_private_dirs_it_is_the_hosts_realpath(tmp_path: Path) -> None:
    os.symlink("real", tmp_path / "l")
    assert viewpaths.reader((), str(tmp_path))("l/x") == str(tmp_path / "real" / "x")


def test_a_loop_in_the_view_is_none(tmp_path: Path) -> None:
    dest, source, binds = _view(tmp_path)
    os.symlink("loop", source / "loop")
    assert viewpaths.reader(binds, "/")(str(dest / "loop")) is None


def test_file_words_finds_a_file_only_the_view_has(tmp_path: Path) -> None:
    dest, source, binds = _view(tmp_path)
    (source / "s.sh").write_text("agent\n")  # the machine's dir has none
    text = f"(sh {dest}/s.sh)"
    analysis = analyze(text)
    at = viewpaths.reader(binds, str(tmp_path))
    assert file_words(text, analysis, [str(tmp_path)]) == ([], [])  # looked for on the host: not there
    assert file_words(text, analysis, [str(tmp_path)], at)[0] == [str(dest / "s.sh")]


def test_an_unparsed_text_names_its_private_words(tmp_path: Path) -> None:
    dest, _source, binds = _view(tmp_path)
    text = f"(sh {dest}/s.sh)"
    words = viewpaths.words_of(analyze(text), (), text)
    assert viewpaths.diverging(binds, words, str(tmp_path)) == [f"{dest}/s.sh"]


def test_the_proof_looks_where_the_run_reads(tmp_path: Path) -> None:
    """A script operand that is a file on the host but a directory in the agent's copy (python runs the
    __main__.py it finds there): unproven, as the binder (which reads the copy) binds nothing for it."""
    from engine.commands.bindproof import segment_unproven

    dest, source, binds = _view(tmp_path)
    (dest / "app").write_text("print('machine')\n")
    (source / "app").mkdir()
    (source / "app" / "__main__.py").write_text("print('agent')\n")
    argv = ["python3", str(dest / "app")]
    assert not segment_unproven(argv, str(tmp_path))  # the host's reading: a regular file
    assert segment_unproven(argv, str(tmp_path), viewpaths.reader(binds, str(tmp_path)))


def test_a_nul_in_a_word_names_no_file(tmp_path: Path) -> None:
    assert viewpaths.reader((), str(tmp_path))("a\x00b") is None
