"""Healthy scenarios: no "fail" diagnosis and no alert may come (a "slow" note is fine)."""

from __future__ import annotations

from functools import partial

from rankscope.demo.incidents import actors, raytrain, verl
from rankscope.demo.incidents.common import Incident

SCENARIOS: list[Incident] = [
    Incident(
        name="healthy-steady",
        client="actors",
        description="4 ranks stepping steadily",
        run=partial(actors.run_group, fault=""),
        expected=None,
    ),
    Incident(
        name="healthy-idle",
        client="verl",
        description="verl-style idle workers: 20 steps, then 60 s with no step or collective",
        run=verl.run_idle,
        expected=None,
    ),
    Incident(
        name="healthy-startup-raytrain",
        client="raytrain",
        description="a TorchTrainer starting (placement group made and committed), then steady",
        run=partial(raytrain.run_fault, fault=""),
        expected=None,
    ),
    Incident(
        name="healthy-startup-verl",
        client="verl",
        description="a verl worker group starting (its pool's placement group), then steady",
        run=partial(verl.run_fault, fault=""),
        expected=None,
    ),
    Incident(
        name="healthy-checkpoint",
        client="actors",
        description="rank 0 saves a checkpoint for 20 s while the others wait in a barrier",
        run=partial(actors.run_group, fault="checkpoint", faulty=0),
        expected=None,
    ),
]
