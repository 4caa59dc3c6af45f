"""Who-am-I detection and settings, in this process (no cluster needed)."""

from __future__ import annotations

import os

import pytest

from rankscope import context
from rankscope.config import Config
from rankscope.errors import UserError


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    context.reset_for_tests()
    yield
    context.reset_for_tests()


def test_rank_from_the_variables_torchrun_ray_train_and_verl_set(monkeypatch):
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "8")
    ctx = context.get_context()
    assert (ctx.rank, ctx.local_rank, ctx.world_size, ctx.rank_source) == (5, 1, 8, "env")
    assert ctx.pid == os.getpid() and ctx.label == "rank 5"


def test_explicit_rank_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("RANK", "5")
    context.set_explicit_rank(rank=2, world_size=4)
    ctx = context.get_context()
    assert (ctx.rank, ctx.world_size, ctx.rank_source) == (2, 4, "explicit")


def test_rank_from_an_initialized_gloo_group(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdv", rank=0, world_size=1)
    try:
        ctx = context.get_context()
        assert (ctx.rank, ctx.world_size, ctx.rank_source) == (0, 1, "torch.distributed")
    finally:
        dist.destroy_process_group()


def test_unknown_rank_is_none_and_labelled_by_pid():
    ctx = context.get_context()
    assert ctx.rank is None and ctx.label.startswith(f"pid {os.getpid()}@")


def test_config_reads_the_environment(monkeypatch):
    monkeypatch.setenv("RANKSCOPE_HEARTBEAT_INTERVAL", "0.5")
    assert Config.from_env().heartbeat_interval == 0.5
    assert Config.from_env(heartbeat_interval=2.0).heartbeat_interval == 2.0


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("RANKSCOPE_HEARTBEAT_INTERVAL", "soon", "is not a valid float"),
        ("RANKSCOPE_LEVEL", "verbose", "is not one of off, light, full"),
        ("RANKSCOPE_DEAD_AFTER", "-1", "dead_after must be > 0"),
    ],
)
def test_bad_settings_say_what_is_wrong(monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(UserError, match=message):
        Config.from_env()
