"""Every incident and healthy scenario by name, in the order the benchmark runs them."""

from __future__ import annotations

from rankscope.demo.incidents.common import Incident


def catalog() -> list[Incident]:
    from rankscope.demo.incidents import actors, healthy, raytrain, verl

    return [*actors.INCIDENTS, *verl.INCIDENTS, *raytrain.INCIDENTS, *healthy.SCENARIOS]


def by_name(name: str) -> Incident:
    for incident in catalog():
        if incident.name == name:
            return incident
    raise KeyError(name)
