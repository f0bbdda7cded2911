"""The Docker sandbox's share of the host: no set-id, file-capability or device file made in a workspace
the host shares (our seccomp profile, dropped capabilities), and the RAM budget it draws from (sized tmpfs,
a memory limit, the owner's memory cgroup), on the real Docker engine."""

from __future__ import annotations

import json
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.sandbox import docker_ops, dockercg, dockerseccomp, rambudget
from engine.sandbox.seccomprules import MODE_ARG, REFUSED_SYSCALLS, SET_ID_BITS
from engine.sandbox.settings import DockerSettings, state_id
from tests.helpers.sandbox import build_test_image, remove_labelled, sys_probe

RUN_ID = f"confine-{os.getpid()}-{secrets.token_hex(3)}"
PAGE = os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    yield build_test_image()
    remove_labelled(RUN_ID)


class Box:
    """One started container made with the sandboxes' hardening_kwargs, the workspace bind-mounted at /w."""

    def __init__(self, image: str, d: DockerSettings, workspace: Path, parent: str | None = None) -> None:
        kwargs: dict[str, Any] = docker_ops.hardening_kwargs(d, None)
        kwargs.update(
            image=image,
            name=f"exechost-test-{RUN_ID}-{secrets.token_hex(3)}",
            command=["sleep", "3600"],
            labels={"exechost.test": RUN_ID},
            volumes={str(workspace): {"bind": "/w", "mode": "rw"}},
            network_mode="none",
        )
        if parent:
            kwargs["cgroup_parent"] = parent
        self.kwargs = kwargs
        docker_ops.create_and_start(kwargs)
        self.container = docker_ops.client().containers.get(kwargs["name"])

    def sh(self, command: str) -> tuple[int, str]:
        result = self.container.exec_run(["sh", "-c", command])
        return result.exit_code, result.output.decode()

    def remove(self) -> None:
        docker_ops.remove(self.kwargs["name"])


def _set_id_files(top: Path) -> list[str]:
    return [str(p) for p in top.rglob("*") if p.lstat().st_mode & (stat.S_ISUID | stat.S_ISGID)]


# --- the profile ---------------------------------------------------------------------------------------


def test_profile_allows_a_mode_only_without_set_id_bits_and_nothing_bwrap_refuses() -> None:
    profile = json.loads(dockerseccomp.profile_json())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"  # an allowlist: what it does not name fails
    rules: dict[str, list[dict[str, Any]]] = {}
    for rule in profile["syscalls"]:
        for name in rule["names"]:
            rules.setdefault(name, []).append(rule)
    for name, index in MODE_ARG.items():
        # Every rule naming a mode-giving call allows it only when the mode has neither set-id bit.
        assert [r["args"] for r in rules[name]] == [
            [{"index": index, "op": "SCMP_CMP_MASKED_EQ", "value": sum(SET_ID_BITS), "valueTwo": 0}]
        ], name
    for name in REFUSED_SYSCALLS:
        assert name not in rules, name
    assert [r["errnoRet"] for r in rules["openat2"]] == [38]  # ENOSYS: libc falls back to openat
    assert [r["errnoRet"] for r in rules["io_setup"]] == [38]  # the host's AIO count: libaio falls back
    assert all(r["args"] for r in rules["socket"] + rules["clone"] + rules["personality"])


# --- no set-id, file-capability or device file in the workspace ------------------------------------------


@pytest.mark.docker
def test_a_sandbox_makes_no_set_id_file_in_the_workspace(image: str, tmp_path: Path) -> None:
    box = Box(image, DockerSettings(image=image), tmp_path)
    try:
        code, out = box.sh(
            "cd /w && cp /bin/busybox sh4 && mkdir d && "
            "for m in 4755 2755 6755 u+s g+s; do "
            "chmod $m sh4 && echo chmod-$m; chmod $m d && echo dir-$m; done; "
            "mknod -m 4755 p1 p && echo mknod-suid; mknod -m 2755 p2 p && echo mknod-sgid; "
            "chmod 700 sh4 && mknod -m 640 fifo p && echo plain-ok; "
            "mknod c1 c 1 3 && echo chardev; true"
        )
        assert code == 0, out
        assert [line for line in out.splitlines() if not line.startswith(("chmod:", "mknod:"))] == [
            "plain-ok"
        ]
        assert _set_id_files(tmp_path) == []
        assert stat.S_IMODE((tmp_path / "sh4").stat().st_mode) == 0o700  # plain modes still work
        assert stat.S_ISFIFO((tmp_path / "fifo").stat().st_mode)
        assert not (tmp_path / "c1").exists()
    finally:
        box.remove()


@pytest.mark.docker
def test_an_operator_keeping_capabilities_still_gets_no_set_id_file_nor_file_capabilities(
    image: str, tmp_path: Path
) -> None:
    """cap_drop narrowed to nothing: Docker's default capabilities come back, but never FSETID, SETFCAP
    (a security.capability xattr is a file capability: a privileged binary on the host) or MKNOD."""
    box = Box(image, DockerSettings(image=image, cap_drop=()), tmp_path)
    try:
        assert box.kwargs["cap_drop"] == list(docker_ops.HOST_FILE_CAPS)
        code, out = box.sh("grep CapBnd /proc/self/status; cd /w && cp /bin/busybox x && chmod 4755 x; true")
        assert code == 0, out
        # stdout and stderr share one stream here, in no fixed order: find the line
        bounding = int(next(line.split()[1] for line in out.splitlines() if line.startswith("CapBnd:")), 16)
        for bit in (4, 27, 31):  # CAP_FSETID, CAP_MKNOD, CAP_SETFCAP
            assert not bounding & (1 << bit), (bit, out)
        assert bounding & (1 << 0)  # CAP_CHOWN: the operator's choice held
        assert "Operation not permitted" in out
        assert _set_id_files(tmp_path) == []
    finally:
        box.remove()


@pytest.mark.docker
def test_a_sandbox_sees_sys_read_only_even_keeping_capabilities(image: str, tmp_path: Path) -> None:
    """/sys read-only whole in every container (fresh round 17 a, the host view's /sys): Docker mounts sysfs
    read-only in an unprivileged container, whatever capabilities the operator leaves it (cap_drop
    narrowed to nothing here) and whatever its uid (the image's root here)."""
    box = Box(image, DockerSettings(image=image, cap_drop=()), tmp_path)
    try:
        code, out = box.sh(sys_probe(own_tmpfs=True))
        assert code == 0, out
        assert out.splitlines() == ["END"], out
    finally:
        box.remove()


# --- the RAM budget --------------------------------------------------------------------------------------


def _df(out: str) -> dict[str, int]:
    return {line.split()[-1]: int(line.split()[1]) * 1024 for line in out.splitlines()[1:] if line.split()}


def test_tmpfs_entries_get_a_size_unless_they_name_one() -> None:
    assert rambudget.docker_tmpfs(("/tmp", "/run:mode=755", "/var/tmp:size=64m,mode=1777")) == {
        "/tmp": f"size={rambudget.TMPFS_BYTES}",
        "/run": f"mode=755,size={rambudget.TMPFS_BYTES}",
        "/var/tmp": "size=64m,mode=1777",
    }


@pytest.mark.docker
def test_a_default_sandbox_pins_at_most_its_agents_share_of_ram(image: str, tmp_path: Path) -> None:
    box = Box(image, DockerSettings(image=image), tmp_path)
    try:
        code, out = box.sh(
            "df -k /tmp /var/tmp /run /dev/shm; cat /sys/fs/cgroup/memory/memory.limit_in_bytes"
        )
        assert code == 0, out
        lines = out.splitlines()
        sizes = _df("\n".join(lines[:-1]))
        budget = rambudget.TMPFS_BYTES
        assert sizes == {"/tmp": budget, "/var/tmp": budget, "/run": budget, "/dev/shm": rambudget.SHM_BYTES}
        quarter = rambudget.mem_total() // rambudget.AGENT_MEMORY_SHARE
        assert int(lines[-1]) == quarter // PAGE * PAGE
    finally:
        box.remove()


@pytest.mark.docker
def test_the_operator_sets_the_memory_limit_and_tmpfs_sizes(image: str, tmp_path: Path) -> None:
    d = DockerSettings(image=image, memory="300m", tmpfs=("/tmp:size=32m,mode=1777", "/run"))
    box = Box(image, d, tmp_path)
    try:
        code, out = box.sh("df -k /tmp /run; cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
        assert code == 0, out
        lines = out.splitlines()
        assert _df("\n".join(lines[:3])) == {"/tmp": 32 * 1024 * 1024, "/run": rambudget.TMPFS_BYTES}
        assert lines[3:] == [str(300 * 1024 * 1024)]
        assert box.kwargs["tmpfs"]["/tmp"] == "size=32m,mode=1777"  # other options kept
    finally:
        box.remove()


@pytest.mark.docker
@pytest.mark.skipif(not dockercg.usable(), reason="needs a writable v1 pids hierarchy (cgroup_parent)")
def test_an_owners_containers_together_are_capped_at_its_share(image: str, tmp_path: Path) -> None:
    """An agent names as many session scopes as it likes: its containers sit in one owner group whose
    memory cap is a quarter of the host's RAM (the install's: half), whatever each container's limit."""
    owner = f"agent-{RUN_ID}"
    parent = dockercg.parent_for(owner)
    assert parent is not None
    boxes = [Box(image, DockerSettings(image=image), tmp_path, parent) for _ in range(2)]
    try:
        ram = rambudget.mem_total()
        assert dockercg.memory_cap(parent) == ram // rambudget.AGENT_MEMORY_SHARE // PAGE * PAGE
        group, install = parent.rsplit("/", 1)[0], parent.rsplit("/", 2)[0]
        # the owner's group is the one its bwrap sandboxes and host runs count in (bwraplimits)
        assert group == f"/exechost-{state_id()}/{owner}"
        assert dockercg.memory_cap(install) == ram // rambudget.INSTALL_MEMORY_SHARE // PAGE * PAGE
        for box in boxes:  # each container's memory group is a child of the owner's
            code, out = box.sh("cat /proc/self/cgroup")
            assert code == 0 and f"memory:{parent}/" in out, out
    finally:
        for box in boxes:
            box.remove()
        dockercg.sweep()
    assert not (dockercg.MEMORY_BASE / group.lstrip("/")).exists()  # an emptied owner group is swept
    assert not (dockercg.CPU_BASE / group.lstrip("/")).exists()  # (the cpu groups runc made too)


def test_explain_shows_the_limits_and_profile_a_container_gets() -> None:
    from engine.config.loader import load_config_text
    from engine.sandbox import admin

    shown = admin.explain(load_config_text('[agents.defaults.sandbox]\nmode = "all"\n'))["docker"]["applied"]
    assert shown["memory"] == rambudget.mem_total() // rambudget.AGENT_MEMORY_SHARE
    assert shown["tmpfs"]["/tmp"] == f"size={rambudget.TMPFS_BYTES}" and shown["seccomp"].startswith(
        "exechost"
    )
    cfg = '[agents.defaults.sandbox]\nmode = "all"\n[agents.defaults.sandbox.docker]\nmemory = "1g"\n'
    assert admin.explain(load_config_text(cfg))["docker"]["applied"]["memory"] == "1g"
