"""What git runs without an ask: an allowlist of subcommands, each with an allowlist of the options known
to be inert, read the way git's own option parser reads them (issue 27 §4, round 8).

Nothing here lists what is dangerous. A word is accepted only when it is, exactly, an option this table
names for that subcommand (or its mode): an abbreviation (`--exe` for `--exec`), an option naming a
program, a strategy, a hook, an editor, a pager or an upload/receive-pack, a state-machine continuation
(`--continue`, `--skip`, `--edit-todo`: they run what git's state files under .git say, which nobody
vetted), a subcommand or mode not listed — each is simply not in the table, so the command asks."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# One spec is a string of tokens: `--name` a flag; `--name=` an option taking a value (the next word, or
# after `=`); `--name[=]` one taking a value only after `=`; `-x`, `-x=`, `-x[=]` the same for a short
# option (a value stuck to it or, for `-x=`, the next word); `#` the numeric `-<n>` (log's `-3`).
_FLAG, _VALUE, _OPTIONAL = "flag", "value", "optional"


@dataclass(frozen=True)
class Spec:
    """The options of one subcommand (or one of its modes) known to be inert."""

    long: dict[str, str]
    short: dict[str, str]
    numeric: bool = False


def _spec(*texts: str) -> Spec:
    long: dict[str, str] = {}
    short: dict[str, str] = {}
    numeric = False
    for word in " ".join(texts).split():
        if word == "#":
            numeric = True
            continue
        kind = _OPTIONAL if word.endswith("[=]") else _VALUE if word.endswith("=") else _FLAG
        name = word.removesuffix("[=]").removesuffix("=")
        (long if name.startswith("--") else short)[name if name.startswith("--") else name[1]] = kind
    return Spec(long, short, numeric)


_DIFF = (
    "-p -u --patch -s --no-patch -U= --unified= --raw --patch-with-raw --patch-with-stat --stat[=] "
    "--numstat --shortstat --dirstat[=] --compact-summary --summary --name-only --name-status -z "
    "--color[=] --no-color --word-diff[=] --word-diff-regex= --color-words[=] --color-moved[=] "
    "--no-color-moved --no-renames -M[=] --find-renames[=] -C[=] --find-copies[=] --find-copies-harder "
    "-B[=] --break-rewrites[=] -D --irreversible-delete -l= -R -a --text -w -b --ignore-all-space "
    "--ignore-space-change --ignore-blank-lines --ignore-space-at-eol --ignore-cr-at-eol --minimal "
    "--patience --histogram --diff-algorithm= --anchored= --indent-heuristic --no-indent-heuristic "
    "--abbrev[=] --no-abbrev --full-index --binary --exit-code --quiet --relative[=] --no-relative "
    "--diff-filter= -S= -G= --pickaxe-all --pickaxe-regex --src-prefix= --dst-prefix= --no-prefix "
    "--default-prefix --line-prefix= --no-ext-diff --no-textconv --check --ws-error-highlight= "
    "--ita-invisible-in-index --ita-visible-in-index --function-context -W --inter-hunk-context= "
    "--ignore-submodules[=] --submodule[=]"
)
_REVS = (
    "# --oneline --format= --pretty[=] -n= --max-count= --skip= --since= --after= --until= --before= "
    "--author= --committer= --grep= --all-match --invert-grep -i --regexp-ignore-case -E "
    "--extended-regexp -F --fixed-strings --basic-regexp --merges --no-merges --min-parents= "
    "--max-parents= --no-min-parents --no-max-parents --first-parent --all --branches[=] --tags[=] "
    "--remotes[=] --glob= --exclude= --not --graph --decorate[=] --no-decorate --source --follow "
    "--reverse --date= --relative-date --abbrev-commit --no-abbrev-commit --parents --children "
    "--left-right --left-only --right-only --cherry-pick --cherry-mark --cherry --boundary --topo-order "
    "--date-order --author-date-order --simplify-by-decoration --full-history --dense --sparse "
    "--simplify-merges --ancestry-path --log-size -L= --encoding= --notes[=] --no-notes -g "
    "--walk-reflogs --reflog --no-walk[=] --do-walk -m --cc -c --combined-all-paths --diff-merges= "
    "--no-diff-merges --mailmap --use-mailmap --no-mailmap --show-linear-break[=] --show-signature "
    "--expand-tabs[=] --no-expand-tabs --since-as-filter= --single-worktree --remove-empty --stdin"
)
_LOG = (_DIFF, _REVS)
_FETCHING = (
    "--all -p --prune -P --prune-tags -t --tags -n --no-tags -q --quiet -v --verbose --dry-run "
    "--depth= --deepen= --shallow-since= --shallow-exclude= --unshallow --update-shallow -f --force "
    "--atomic --progress --no-progress --no-write-fetch-head --write-fetch-head --set-upstream --filter= "
    "-4 -6 --ipv4 --ipv6 -j= --jobs= --no-recurse-submodules --recurse-submodules[=]"
)
_MERGING = (
    "--ff --no-ff --ff-only --commit --no-commit --squash --no-squash --no-edit --stat --no-stat "
    "--log[=] --no-log --signoff --no-signoff --allow-unrelated-histories --autostash --no-autostash "
    "--no-verify --cleanup= --rerere-autoupdate --no-rerere-autoupdate --no-gpg-sign"
)
_BLAME = (
    "-L= -l -t -s -e -w -M[=] -C[=] -p --porcelain --line-porcelain --incremental -b --root --show-stats "
    "--show-name --show-number -n -f --abbrev= -c --date= --since= --reverse= --first-parent "
    "--encoding= --ignore-rev= --color-lines --color-by-age --progress --no-progress --score-debug"
)

# Subcommands that run nothing but what vetted config names, with their inert options; a dict value is a
# subcommand with modes (its first operand): "" is the mode when no operand is given. Options that write
# outside the repository (`--output`, `-o`, `config --global|--file`, `apply --directory`) are not here
# either: the operator's config there is trusted by every later vet.
_TABLE: dict[str, Spec | dict[str, Spec]] = {
    "status": _spec(
        "-s --short -b --branch --show-stash --porcelain[=] --long -v --verbose -u[=] --untracked-files[=] "
        "--ignored[=] -z --column[=] --no-column --ahead-behind --no-ahead-behind --renames --no-renames "
        "--find-renames[=] --ignore-submodules[=]"
    ),
    "log": _spec(*_LOG),
    "show": _spec(*_LOG),
    "whatchanged": _spec(*_LOG),
    "rev-list": _spec(_REVS, "--count --objects --objects-edge --header --timestamp --quiet --disk-usage"),
    "shortlog": _spec(_REVS, "-s --summary -e --email --committer --group= -w[=]"),
    "diff": _spec(_DIFF, "--cached --staged --merge-base -1 -2 -3 -0 --base --ours --theirs"),
    "diff-files": _spec(_DIFF, "-q -0 -1 -2 -3 --base --ours --theirs"),
    "diff-index": _spec(_DIFF, "--cached --merge-base -m"),
    "diff-tree": _spec(_DIFF, "-r -t --root -m -c --cc -v --no-commit-id --always --merge-base --stdin"),
    "range-diff": _spec(*_LOG, "--creation-factor= --no-dual-color"),
    "add": _spec(
        "-n --dry-run -v --verbose -f --force -u --update -A --all --no-all --ignore-removal "
        "--no-ignore-removal -N --intent-to-add --refresh --ignore-errors --ignore-missing --renormalize "
        "--chmod= --sparse"
    ),
    "commit": _spec(
        "-a --all -m= --message= -F= --file= -q --quiet -v --verbose --amend --no-edit --allow-empty "
        "--allow-empty-message -s --signoff --no-signoff --author= --date= -C= --reuse-message= --fixup= "
        "--squash= --reset-author --no-verify -n --only -o --include -i --dry-run --short --porcelain "
        "--long -z -u[=] --untracked-files[=] --cleanup= --trailer= --no-gpg-sign --status --no-status"
    ),
    "branch": _spec(
        "-a --all -r --remotes -l --list -v --verbose -q --quiet -d --delete -D -m --move -M -c --copy -C "
        "-f --force --show-current --contains= --no-contains= --merged= --no-merged= --points-at= --sort= "
        "--format= --color[=] --no-color --column[=] --no-column --abbrev= --no-abbrev -t --track[=] "
        "--no-track -u= --set-upstream-to= --unset-upstream --create-reflog -i --ignore-case --omit-empty"
    ),
    "checkout": _spec(
        "-q --quiet -b= -B= --orphan= -f --force -m --merge --detach -t --track[=] --no-track --ours "
        "--theirs --conflict= --progress --no-progress --overlay --no-overlay --guess --no-guess "
        "--ignore-skip-worktree-bits --ignore-other-worktrees --no-recurse-submodules"
    ),
    "switch": _spec(
        "-c= -C= --create= --force-create= -d --detach --guess --no-guess -f --force --discard-changes -m "
        "--merge --conflict= -q --quiet --progress --no-progress -t --track[=] --no-track --orphan= "
        "--ignore-other-worktrees --no-recurse-submodules"
    ),
    "restore": _spec(
        "-s= --source= -W --worktree -S --staged -q --quiet --progress --no-progress --ours --theirs -m "
        "--merge --conflict= --overlay --no-overlay --ignore-unmerged --ignore-skip-worktree-bits "
        "--no-recurse-submodules"
    ),
    "reset": _spec("-q --quiet --soft --mixed --hard --merge --keep -N --refresh --no-refresh"),
    "rev-parse": _spec(
        "--show-toplevel --show-prefix --show-cdup --git-dir --absolute-git-dir --git-common-dir "
        "--is-inside-work-tree --is-inside-git-dir --is-bare-repository --is-shallow-repository "
        "--abbrev-ref[=] --short[=] --verify -q --quiet --symbolic --symbolic-full-name --all "
        "--branches[=] --tags[=] --remotes[=] --glob= --exclude= --show-object-format[=] --show-ref-format "
        "--local-env-vars --git-path= --default= --sq --sq-quote --not --since= --after= --until= "
        "--before= --revs-only --no-revs --flags --no-flags --path-format= --show-superproject-working-tree "
        "--shared-index-path --end-of-options"
    ),
    "ls-files": _spec(
        "-c --cached -d --deleted -m --modified -o --others -i --ignored -s --stage -u --unmerged -k "
        "--killed -z -t -v -f --directory --no-empty-directory --eol --exclude-standard -x= --exclude= "
        "-X= --exclude-from= --exclude-per-directory= --error-unmatch --full-name --abbrev[=] --debug "
        "--deduplicate --format= --sparse --resolve-undo"
    ),
    "ls-tree": _spec(
        "-d -r -t -l --long -z --name-only --name-status --object-only --full-name --full-tree --abbrev[=] "
        "--format="
    ),
    "cat-file": _spec("-t -s -e -p --batch --batch-check --batch-all-objects --allow-unknown-type -Z"),
    "tag": _spec(
        "-l --list -n[=] --sort= --format= --contains= --no-contains= --merged= --no-merged= --points-at= "
        "-a --annotate -m= --message= -F= --file= -d --delete -f --force -v --verify --column[=] "
        "--no-column -i --ignore-case --color[=] --create-reflog --cleanup= --no-sign --omit-empty"
    ),
    "fetch": _spec(_FETCHING, "--multiple -k --keep --refetch --refmap="),
    "pull": _spec(_FETCHING, _MERGING, "--rebase --no-rebase"),
    "push": _spec(
        "--all --branches --mirror --tags --follow-tags --no-follow-tags -n --dry-run --porcelain -d "
        "--delete -f --force --force-with-lease[=] --no-force-with-lease --force-if-includes "
        "--no-force-if-includes -u --set-upstream -q --quiet -v --verbose --progress --no-progress --prune "
        "--atomic --no-atomic --no-verify --repo= -o= --push-option= --no-signed --thin --no-thin -4 -6 "
        "--ipv4 --ipv6 --recurse-submodules[=] --no-recurse-submodules"
    ),
    "merge": _spec(_MERGING, "-n -m= -F= --file= -q --quiet -v --verbose --progress --no-progress "),
    "rebase": _spec(
        "-q --quiet -v --verbose --onto= --keep-base --no-keep-base --autostash --no-autostash --autosquash "
        "--no-autosquash --fork-point --no-fork-point --root -f --force-rebase --no-ff "
        "--committer-date-is-author-date --reset-author-date --ignore-date --ignore-whitespace --signoff "
        "--stat -n --no-stat --no-verify --update-refs --no-update-refs --no-rebase-merges --apply -m "
        "--merge --empty= --reapply-cherry-picks --no-reapply-cherry-picks --allow-empty-message "
        "--keep-empty --no-keep-empty --whitespace= -C= --no-gpg-sign"
    ),
    "cherry-pick": _spec(
        "-n --no-commit -x -m= --mainline= -s --signoff --ff --allow-empty --allow-empty-message "
        "--keep-redundant-commits --empty= --rerere-autoupdate --no-rerere-autoupdate --cleanup= "
        "--no-gpg-sign"
    ),
    "revert": _spec(
        "-n --no-commit --no-edit -m= --mainline= -s --signoff --rerere-autoupdate --no-rerere-autoupdate "
        "--cleanup= --reference --no-gpg-sign"
    ),
    "stash": {
        "": _spec("-q --quiet"),
        "list": _spec(*_LOG),
        "show": _spec(*_LOG, "--include-untracked --only-untracked --no-include-untracked"),
        "push": _spec(
            "-k --keep-index --no-keep-index -u --include-untracked -a --all -q --quiet -m= --message= "
            "--staged -S"
        ),
        "save": _spec("-k --keep-index --no-keep-index -u --include-untracked -a --all -q --quiet"),
        "pop": _spec("--index -q --quiet"),
        "apply": _spec("--index -q --quiet"),
        "drop": _spec("-q --quiet"),
        "clear": _spec(""),
        "branch": _spec(""),
        "create": _spec(""),
    },
    "remote": {
        "": _spec("-v --verbose"),
        "show": _spec("-n -v --verbose"),
        "get-url": _spec("--push --all"),
        "add": _spec("-t= -m= --tags --no-tags"),
        "rename": _spec("--progress --no-progress"),
        "remove": _spec(""),
        "rm": _spec(""),
        "set-url": _spec("--push --add --delete"),
        "set-head": _spec("-a --auto -d --delete"),
        "set-branches": _spec("--add"),
        "prune": _spec("-n --dry-run"),
    },
    "worktree": {"list": _spec("--porcelain -v --verbose -z --expire="), "prune": _spec("-n -v --expire=")},
    "reflog": {"": _spec(*_LOG), "show": _spec(*_LOG), "exists": _spec("")},
    "notes": {"": _spec(""), "list": _spec(""), "show": _spec("")},
    "sparse-checkout": {"list": _spec("")},
    "bisect": {"log": _spec("")},
    "submodule": {
        "status": _spec("--cached -q --quiet"),
        "summary": _spec("--cached --files -n= --summary-limit="),
    },
    "config": _spec(
        "--get --get-all --get-regexp --get-urlmatch --list -l --local --worktree --show-origin "
        "--show-scope --name-only -z --null --type= --bool --int --bool-or-int --path --expiry-date "
        "--default= --no-includes --unset --unset-all --add --replace-all --fixed-value --no-type"
    ),
    "init": _spec("-q --quiet --bare --initial-branch= -b= --object-format= --shared[=]"),
    "clone": _spec(
        "-q --quiet -v --verbose --no-checkout -n --bare --mirror --depth= --shallow-since= "
        "--shallow-exclude= --single-branch --no-single-branch --no-tags -b= --branch= --origin= -o= "
        "--filter= --sparse --reject-shallow --no-reject-shallow --progress --no-progress -l --local "
        "--no-local --no-hardlinks --dissociate --no-recurse-submodules"
    ),
    "ls-remote": _spec("-h --heads -t --tags -b --branches --refs -q --quiet --get-url --symref --sort="),
    "blame": _spec(_BLAME),
    "annotate": _spec(_BLAME),
    "describe": _spec(
        "--all --tags --contains --abbrev= --candidates= --exact-match --debug --long --match= --exclude= "
        "--always --first-parent --dirty[=] --broken[=]"
    ),
    "grep": _spec(
        "# -i --ignore-case -I -w --word-regexp -v --invert-match -h -H --full-name -E -G -P -F "
        "--extended-regexp --basic-regexp --perl-regexp --fixed-strings -n --line-number --column -l "
        "--files-with-matches --name-only -L --files-without-match -z --null -o --only-matching -c --count "
        "--color[=] --no-color --break --heading -p --show-function -A= -B= -C= --after-context= "
        "--before-context= --context= -W --function-context --threads= -f= -e= --and --or --not "
        "--all-match -q --quiet --cached --untracked --exclude-standard --no-exclude-standard "
        "--max-depth= -r --recursive -a --text --no-textconv -m= --max-count= --no-recurse-submodules"
    ),
    "mv": _spec("-f --force -k -n --dry-run -v --verbose --sparse"),
    "rm": _spec("-f --force -n --dry-run -r --cached --ignore-unmatch -q --quiet --sparse"),
    "clean": _spec("-n --dry-run -f --force -d -x -X -q --quiet -e= --exclude="),
    "merge-base": _spec("-a --all --octopus --independent --is-ancestor --fork-point"),
    "show-ref": _spec(
        "--head --tags --heads --branches --verify --exists -d --dereference -s --hash[=] --abbrev[=] -q "
        "--quiet"
    ),
    "for-each-ref": _spec(
        "--count= --sort= --format= --color[=] --points-at= --merged= --no-merged= --contains= "
        "--no-contains= --ignore-case --omit-empty --exclude="
    ),
    "symbolic-ref": _spec("-q --quiet --short -d --delete -m= --no-recurse --recurse"),
    "version": _spec("--build-options"),
    "count-objects": _spec("-v --verbose -H --human-readable"),
    "name-rev": _spec("--tags --refs= --exclude= --all --name-only --no-undefined --always"),
    "cherry": _spec("-v --abbrev[=]"),
    "check-ignore": _spec("-q --quiet -v --verbose --stdin -z -n --non-matching --no-index"),
    "check-attr": _spec("-a --all --cached --stdin -z --source="),
    "verify-commit": _spec("-v --verbose --raw"),
    "verify-tag": _spec("-v --verbose --raw --format="),
    "write-tree": _spec("--missing-ok --prefix="),
    "help": _spec("-a --all -g --guides -c --config -m --man"),
    "fsck": _spec(
        "--full --strict --unreachable --dangling --no-dangling --root --tags --cache --connectivity-only "
        "--name-objects --progress --no-progress --no-reflogs --verbose"
    ),
    "gc": _spec("--aggressive --auto --prune[=] --no-prune -q --quiet --force --keep-largest-pack"),
    "apply": _spec(
        "--stat --numstat --summary --check --index --cached --intent-to-add -3 --3way -R --reverse "
        "--reject -z -p= -C= --unidiff-zero --apply --no-add --allow-empty --exclude= --include= "
        "--ignore-space-change --ignore-whitespace --whitespace= -v --verbose -q --quiet --recount"
    ),
    "format-patch": _spec(
        *_LOG,
        "-n --numbered -N --no-numbered --start-number= --stdout --cover-letter --no-cover-letter -v= "
        "--reroll-count= --subject-prefix= --rfc -s --signoff -k --keep-subject --thread[=] --no-thread "
        "--base= --zero-commit --no-stat",
    ),
    "archive": _spec("# --format= --prefix= -l --list -v --verbose --worktree-attributes"),
}
# Subcommands whose operands name a repository or URL git fetches from or pushes to: each is checked as a
# URL (a `<helper>::` or unknown `scheme://` runs git-remote-<helper>), and a legacy remote defined in
# .git/remotes/ or .git/branches/ (files no vet reads) makes them ask.
REMOTE_SUBCOMMANDS = frozenset({"fetch", "pull", "push", "ls-remote", "clone", "remote"})
_NUMERIC = re.compile(r"-[0-9]+")


def subcommands() -> frozenset[str]:
    return frozenset(_TABLE)


def problems(sub: str, rest: Sequence[str]) -> list[str]:
    """Why git's argv after the subcommand is not known to run nothing: [] when every word is an option
    of the table (as git parses it: exact long names, `=` or the next word as a value, clustered and
    stuck short options) or an operand, and the subcommand and its mode are in the table."""
    entry = _TABLE.get(sub)
    if entry is None:
        return [f"`git {sub}`, not a subcommand known to run no program"]
    modes = entry if isinstance(entry, dict) else None
    spec = entry if isinstance(entry, Spec) else modes.get("") if modes is not None else None
    moded = modes is None
    i = 0
    while i < len(rest):
        word = rest[i]
        i += 1
        if word in ("--", "--end-of-options") or not word.startswith("-") or word == "-":
            if not moded and modes is not None:
                if word.startswith("-") or word not in modes:
                    return [f"`git {sub} {word}`, not a mode of {sub} known to run no program"]
                spec, moded = _merge(spec, modes[word]), True
                continue
            if word in ("--", "--end-of-options"):
                break  # everything after it is an operand: revisions and paths
            continue
        if spec is None:
            return [f"`git {sub}` without a mode, which is not known to run no program"]
        taken = _option(spec, word, rest[i] if i < len(rest) else None)
        if taken is None:
            return [f"`git {sub} {word}`, not an option known to run no program"]
        i += taken
    if modes is not None and not moded and "" not in modes:
        return [f"`git {sub}` without a mode, which is not known to run no program"]
    return []


def _merge(base: Spec | None, mode: Spec) -> Spec:
    if base is None:
        return mode
    return Spec({**base.long, **mode.long}, {**base.short, **mode.short}, base.numeric or mode.numeric)


def _option(spec: Spec, word: str, nxt: str | None) -> int | None:
    """How many more words `word` takes (0 or 1) when it is an inert option of `spec`; None if not."""
    if word.startswith("--"):
        name, eq, _ = word.partition("=")
        kind = spec.long.get(name)
        if kind is None or (eq and kind == _FLAG):
            return None
        return 1 if kind == _VALUE and not eq and nxt is not None else 0
    if spec.numeric and _NUMERIC.fullmatch(word):
        return 0
    # parse-options reads a cluster letter by letter: a flag, then the next letter; an option taking a
    # value takes the rest of the word (or, when nothing is stuck to one that needs it, the next word).
    for index, letter in enumerate(word[1:], start=1):
        kind = spec.short.get(letter)
        if kind is None:
            return None
        if kind != _FLAG:
            stuck = index + 1 < len(word)
            return 1 if kind == _VALUE and not stuck and nxt is not None else 0
    return 0
