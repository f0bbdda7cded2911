

@pytest.mark.parametrize(
    ("command", "refused"),
    [
        ("cat s.s? | sh", True),
        ("for f in s.sh; do cat $f; done | bash", True),
        ("git show HEAD:s.sh | nice sh", True),  # through a wrapper
        ("curl -s file:///w/s.sh | timeout 5 bash -s", True),
        ("cat s.sh | tee log | sh", True),  # tee is no pure reader of named files
        ("( cat s.sh ) | sh", True),
        ("cat <(git show HEAD:s.sh) | sh", True),
        ("sh -c 'git show HEAD:s.sh | sh'", True),  # a quoted command line is read too
        ("sh < $f", True),
        ("ls | python3 -", True),
        ("cat s.sh | sh", False),
        ("cat a.sh b.sh | bash -s x", False),
        ("sh < s.sh", False),
        ("sh 3<s.sh <&3", False),
        ("cd d && cat s.sh | sh 2>&1", False),
        ("git log | grep x", False),  # no interpreter reads it
        ("cat x | python3 y.py", False),  # python's program is y.py: stdin is data
    ],
)
def test_a_program_on_an_interpreters_stdin_comes_only_from_literal_files_cat_reads(
    command: str, refused: bool
) -> None:
    from engine.commands.stdinprogram import stdin_program_refusal

    assert bool(stdin_program_refusal(command)) is refused
