"""Read a verl-style trainer config (omegaconf; hydra-core composes a `defaults:` list when
installed), apply `key=value` overrides, and pick out the `Plan` and the model's shape.

Keys rankscope does not know are ignored; a key it reads with a value of the wrong type, an
override of a key that is not in the config, or a file that is not YAML is a `UserError`.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

from rankscope.doctor.config_lint.model import ModelShape, Plan
from rankscope.errors import UserError

__all__ = ["KEYS", "load_config", "load_model_shape", "plan_from_config"]

_A = "actor_rollout_ref"
KEYS: dict[str, str] = {
    "train_batch_size": "data.train_batch_size",
    "max_prompt_length": "data.max_prompt_length",
    "max_response_length": "data.max_response_length",
    "model_path": f"{_A}.model.path",
    "gradient_checkpointing": f"{_A}.model.enable_gradient_checkpointing",
    "activation_offload": f"{_A}.model.enable_activation_offload",
    "ppo_mini_batch_size": f"{_A}.actor.ppo_mini_batch_size",
    "ppo_micro_batch_size_per_gpu": f"{_A}.actor.ppo_micro_batch_size_per_gpu",
    "use_dynamic_bsz": f"{_A}.actor.use_dynamic_bsz",
    "ppo_max_token_len_per_gpu": f"{_A}.actor.ppo_max_token_len_per_gpu",
    "sequence_parallel": f"{_A}.actor.ulysses_sequence_parallel_size",
    "param_offload": f"{_A}.actor.fsdp_config.param_offload",
    "optimizer_offload": f"{_A}.actor.fsdp_config.optimizer_offload",
    "param_dtype": f"{_A}.actor.fsdp_config.mixed_precision.param_dtype",
    "rollout_n": f"{_A}.rollout.n",
    "rollout_tp": f"{_A}.rollout.tensor_model_parallel_size",
    "gpu_memory_utilization": f"{_A}.rollout.gpu_memory_utilization",
    "free_cache_engine": f"{_A}.rollout.free_cache_engine",
    "rollout_dtype": f"{_A}.rollout.dtype",
    "kv_cache_dtype": f"{_A}.rollout.engine_kwargs.vllm.kv_cache_dtype",
    "log_prob_micro_batch_size_per_gpu": f"{_A}.rollout.log_prob_micro_batch_size_per_gpu",
    "ref_log_prob_micro_batch_size_per_gpu": f"{_A}.ref.log_prob_micro_batch_size_per_gpu",
    "critic_ppo_mini_batch_size": "critic.ppo_mini_batch_size",
    "critic_ppo_micro_batch_size_per_gpu": "critic.ppo_micro_batch_size_per_gpu",
    "nnodes": "trainer.nnodes",
    "n_gpus_per_node": "trainer.n_gpus_per_node",
    "checkpoint_dir": "trainer.default_local_dir",
}
"""Each `Plan` field and the config key it is read from (verl's ppo_trainer.yaml names)."""


def load_config(path: str, overrides: list[str]) -> dict[str, Any]:
    """The config as plain data, interpolations resolved, overrides applied."""
    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        text = pathlib.Path(path).read_text()
    except OSError as exc:
        raise UserError(f"--config {path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise UserError(f"--config {path}: not a text file (a YAML trainer config)") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise UserError(f"--config {path}: not valid YAML{at}") from None
    if not isinstance(raw, dict):
        raise UserError(f"--config {path}: must be a mapping of keys (a trainer config)")
    try:
        if "defaults" in raw:
            cfg = _compose(path, overrides)
        else:
            cfg = OmegaConf.create(raw)
            for item in overrides:
                _override(cfg, item)
        data = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        raise UserError(f"--config {path}: {_first_line(exc)}") from None
    assert isinstance(data, dict)
    return {str(k): v for k, v in data.items()}


def _override(cfg: Any, item: str) -> None:
    import yaml
    from omegaconf import OmegaConf

    key, eq, text = item.partition("=")
    if not eq or not key.strip("+"):
        raise UserError(f"override {item!r}: write key=value (e.g. data.train_batch_size=256)")
    add = key.startswith("+")
    key = key.lstrip("+")
    missing = object()
    if not add and OmegaConf.select(cfg, key, default=missing) is missing:
        raise UserError(f"override {key}: not in the config (write +{key}={text} to add it)")
    try:
        value = yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        value = text
    OmegaConf.update(cfg, key, value, merge=True, force_add=add)


def _compose(path: str, overrides: list[str]) -> Any:
    """hydra-core composes the `defaults:` list from the config's folder, as verl's main does."""
    try:
        from hydra import compose, initialize_config_dir
        from hydra.errors import HydraException
    except ImportError:
        raise UserError(
            f"--config {path} has a defaults: list and hydra-core is not installed: "
            "pip install 'rankscope[config]', or pass the composed config verl prints at start"
        ) from None
    folder = str(pathlib.Path(path).resolve().parent)
    try:
        with initialize_config_dir(config_dir=folder, version_base=None):
            return compose(config_name=pathlib.Path(path).stem, overrides=overrides)
    except HydraException as exc:
        raise UserError(f"--config {path}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def plan_from_config(data: dict[str, Any]) -> Plan:
    """The keys the rules read; absent keys keep verl's defaults; wrong types are a UserError."""
    values: dict[str, Any] = {}
    defaults = Plan()
    for name, key in KEYS.items():
        found = _select(data, key)
        if found is None:
            continue
        values[name] = _typed(key, found, type(getattr(defaults, name)), name)
    return Plan(**values)


def _select(data: dict[str, Any], key: str) -> Any:
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return None if node == "???" else node


_INT_FIELDS = {
    "train_batch_size",
    "ppo_mini_batch_size",
    "ppo_micro_batch_size_per_gpu",
    "log_prob_micro_batch_size_per_gpu",
    "ref_log_prob_micro_batch_size_per_gpu",
    "critic_ppo_mini_batch_size",
    "critic_ppo_micro_batch_size_per_gpu",
}


def _typed(key: str, value: Any, kind: type, name: str) -> Any:
    if name in _INT_FIELDS or kind is int:
        kind = int
    elif kind is type(None):
        kind = str
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise UserError(f"{key}: {value!r} is not true/false")
    if kind in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{key}: {value!r} is not a number")
        if kind is int and value != int(value):
            raise UserError(f"{key}: {value!r} is not a whole number")
        return kind(value)
    return str(value)


def load_model_shape(path: str | None, *, explicit: bool) -> ModelShape | None:
    """The model's shape from `path` (a folder with config.json, or the file); None when the
    path is not on this machine (a hub id) unless it was given with --model."""
    if not path:
        return None
    file = pathlib.Path(path)
    if file.is_dir():
        file = file / "config.json"
    if not file.is_file():
        if explicit:
            raise UserError(f"--model {path}: no config.json there")
        return None
    try:
        cfg = json.loads(file.read_text())
        cfg = cfg.get("text_config", cfg) if "hidden_size" not in cfg else cfg
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        return ModelShape(
            hidden_size=hidden,
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            intermediate_size=int(cfg["intermediate_size"]),
            vocab_size=int(cfg["vocab_size"]),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2")),
            source=os.fspath(file),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(
            f"{file}: not a decoder config.json ({type(exc).__name__}: {exc})"
        ) from None
