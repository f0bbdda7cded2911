"""A sandbox's share of the host's open-file table: nofile x pidsLimit within 1/fileTableShare of file-max."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.config.loader import load_config_text
from engine.config.model import ConfigError
from engine.config.schema import DEFAULT_ULIMITS
from engine.sandbox import filetable
from engine.sandbox.errors import SandboxError
from engine.sandbox.settings import DockerSettings, merge_docker, resolve_settings


def test_the_default_nofile_is_lowered_to_fit_the_share() -> None:
    d = DockerSettings()
    soft, hard = filetable.nofile(d)
    assert hard * (d.pids_limit or 0) <= filetable.file_max() // filetable.DEFAULT_SHARE or hard == 64
    assert soft <= hard <= DEFAULT_ULIMITS["nofile"][1]


def test_a_smaller_share_gives_a_larger_nofile() -> None:
    d = DockerSettings()
    wide = replace(d, file_table_share=2)
    assert filetable.nofile(wide)[1] >= filetable.nofile(d)[1]


def test_an_operators_nofile_within_the_share_is_kept() -> None:
    d = merge_docker({"ulimits": {"nofile": "100:200"}, "pids_limit": 16}, None)
    assert filetable.nofile(d) == (100, 200)
    assert filetable.ulimits(d)["nofile"] == (100, 200)
    assert filetable.ulimits(d)["core"] == DEFAULT_ULIMITS["core"]


@pytest.mark.parametrize("nofile", ["1048576", "-1"])
def test_an_operators_nofile_past_the_share_refuses_the_start_saying_which_key(nofile: str) -> None:
    d = merge_docker({"ulimits": {"nofile": nofile}}, None)
    with pytest.raises(SandboxError, match=r"docker\.ulimits nofile .*fileTableShare"):
        filetable.nofile(d)


def test_the_share_is_a_config_key_reaching_the_settings() -> None:
    text = "[agents.defaults.sandbox.docker]\nfileTableShare = 4\n"
    d = resolve_settings(load_config_text(text), "main").docker
    assert d.file_table_share == 4
    assert DockerSettings().file_table_share == filetable.DEFAULT_SHARE


@pytest.mark.parametrize("value", ["1", "0", '"a lot"'])
def test_a_share_of_the_whole_table_or_none_is_refused_with_its_key(value: str) -> None:
    with pytest.raises(ConfigError, match="fileTableShare"):
        load_config_text(f"[agents.defaults.sandbox.docker]\nfileTableShare = {value}\n")
