"""`rankscope status` at 4,096 ranks: alike ranks share a row, the odd ones keep theirs, `--all`
draws every process (issue 20). Synthetic registry rows, no Ray."""

from __future__ import annotations

from rich.console import Console

from rankscope.context import RankContext
from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress
from rankscope.status.analysis import MAX_ODD_LINES, fold_status, step_bands, stuck_probes
from rankscope.status.render import render_status

NOW = 1_700_000_000.0
RANKS = 4096
GROUP = "10.0.0.1:29500"


def _probe(
    rank: int | None,
    step: int,
    state: ProbeState = ProbeState.ALIVE,
    stepped_ago: float = 0.5,
    actor: str = "RayTrainWorker",
    group: str | None = GROUP,
) -> ProbeStatus:
    node = (rank or 0) // 8
    ctx = RankContext(
        rank, (rank or 0) % 8, RANKS, f"n{node}", f"10.0.{node // 256}.{node % 256}", f"h{node}",
        1000 + (rank if rank is not None else 9000), "job", None, actor, None, "env", group,
    )  # fmt: skip
    seen = NOW - (0.3 if state == ProbeState.ALIVE else 40.0)
    return ProbeStatus(
        ProbeInfo(f"p{rank}-{actor}", ctx, "0.1.0", NOW - 900),
        state,
        NOW - 900,
        seen,
        Progress(step, NOW - stepped_ago),
        0,
        0,
    )


def _job() -> list[ProbeStatus]:
    """4,096 ranks at step 120-121; rank 77 dead, 1000 unresponsive, 2048 stuck at step 90 for
    45 s, 3000 alive and stepping but far behind (step 50); and Ray Train's controller."""
    probes = []
    for rank in range(RANKS):
        if rank == 77:
            probes.append(_probe(rank, 118, ProbeState.DEAD, stepped_ago=41))
        elif rank == 1000:
            probes.append(_probe(rank, 119, ProbeState.UNRESPONSIVE, stepped_ago=40))
        elif rank == 2048:
            probes.append(_probe(rank, 90, stepped_ago=45))
        elif rank == 3000:
            probes.append(_probe(rank, 50))
        else:
            probes.append(_probe(rank, 120 + rank % 2))
    probes.append(_probe(None, 0, actor="TrainController", group=None))
    return probes


def _summary(probes: list[ProbeStatus], **kwargs: object) -> list[tuple[str, str, str, int]]:
    lines = fold_status(probes, NOW, **kwargs)  # type: ignore[arg-type]
    return [
        (
            line.ranks,
            "stuck" if line.stuck else line.state.value,
            "{}-{}".format(*line.steps),
            len(line.processes),
        )
        for line in lines
    ]


def _text(renderable: object, width: int = 120) -> list[str]:
    console = Console(width=width, record=True, color_system=None, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return [line.rstrip() for line in console.export_text().splitlines()]


def test_4096_ranks_fold_into_a_row_with_the_odd_ranks_apart():
    assert _summary(_job()) == [
        ("0-76,78-999,1001-2047,2049-2999,3001-4095", "alive", "120-121", 4092),
        ("77", "dead", "118-118", 1),
        ("1000", "unresponsive", "119-119", 1),
        ("2048", "stuck", "90-90", 1),
        ("3000", "alive", "50-50", 1),  # far behind its group: a band of its own
        ("-", "alive", "0-0", 1),  # processes without a rank come last
    ]


def test_status_at_4096_ranks_prints_a_screen_and_all_prints_every_process():
    lines = _text(render_status("02000000", _job(), {"p77-RayTrainWorker": "exited"}, now=NOW))
    assert len(lines) < 20, "\n".join(lines)
    assert any(line.startswith("alike ranks share a row (xN: N processes;") for line in lines)
    [folded] = [line for line in lines if "x4092" in line]
    assert folded.split() == [
        "0..4095", "512", "nodes", "x4092", "RayTrainWorker", "alive", "0.3s", "120-121", "0.5s",
    ]  # fmt: skip
    rows = {line.split()[0]: line.split() for line in lines[3:] if line.strip()}
    assert rows["77"][:5] == ["77", "10.0.0.9", "1077", "RayTrainWorker", "dead"]
    assert rows["1000"][4] == "unresponsive" and rows["2048"][4] == "stuck"
    assert rows["3000"][6] == "50"
    contiguous = [_probe(rank, 120) for rank in range(20)]
    short = _text(render_status("02000000", contiguous, now=NOW))
    assert ["0-19", "3", "nodes", "x20"] in [line.split()[:4] for line in short], short
    assert "rank 77 (pid 1077) died: exited" in lines
    assert any(line.startswith("stuck: alive, but no step for 30 s") for line in lines)
    assert len(fold_status(_job(), NOW, fold=False)) == RANKS + 1  # --all: a row each
    small = _job()[:40]  # drawing 4,096 rows takes seconds (benchmarks/bench_status.py)
    everything = _text(render_status("02000000", small, now=NOW, show_all=True))
    assert sum("RayTrainWorker" in line for line in everything) == 40
    assert not any("alike ranks" in line for line in everything)


def test_small_jobs_keep_a_row_per_process():
    probes = [_probe(rank, 120) for rank in range(16)]
    assert all(not line.folded for line in fold_status(probes, NOW, fold=False))

    def rows(probes: list[ProbeStatus]) -> int:
        return sum("RayTrainWorker" in line for line in _text(render_status("j", probes, now=NOW)))

    assert rows(probes) == 16
    assert rows([*probes, _probe(16, 120)]) == 1  # past 16: folded


def test_many_dead_ranks_show_the_first_each_and_fold_the_rest():
    probes = [_probe(rank, 7, ProbeState.DEAD) for rank in range(100)]
    probes += [_probe(rank, 120) for rank in range(100, 200)]
    summary = _summary(probes)
    assert summary[:MAX_ODD_LINES] == [(str(r), "dead", "7-7", 1) for r in range(MAX_ODD_LINES)]
    assert summary[MAX_ODD_LINES:] == [
        (f"{MAX_ODD_LINES}-99", "dead", "7-7", 100 - MAX_ODD_LINES),
        ("100-199", "alive", "120-120", 100),
    ]
    deaths = {p.info.probe_id: "the job ended" for p in probes[:100]}
    lines = _text(render_status("02000000", probes, deaths, now=NOW))
    assert sum("died: the job ended" in line for line in lines) == 16
    assert lines[-1] == "... 84 more deaths (--all shows them)"


def test_step_bands_split_at_the_widest_jumps_only():
    probes = [_probe(r, s) for r, s in enumerate([5, 6, 7, 100, 101, 300, 900, 2000, 2001])]
    bands = [[p.progress.step for p in band] for band in step_bands(probes)]
    # jumps over the slack (2, or 1% of 2001 = 20): 93, 199, 600, 1100; the 3 widest cut
    assert bands == [[5, 6, 7, 100, 101], [300], [900], [2000, 2001]]
    assert [len(b) for b in step_bands(probes[:3])] == [3]  # 5..7: within the slack
    assert step_bands([]) == []


def test_stuck_needs_a_group_that_steps_and_a_rank_that_stepped_before():
    probes = [_probe(0, 50, stepped_ago=60), _probe(1, 80), _probe(2, 0, stepped_ago=60)]
    assert stuck_probes(probes, NOW, 30.0) == {"p0-RayTrainWorker"}
    idle = [_probe(r, 50, stepped_ago=60) for r in range(3)]  # evaluation: all pause
    assert stuck_probes(idle, NOW, 30.0) == set()
    other_group = [_probe(0, 50, stepped_ago=60), _probe(1, 80, group="10.0.0.2:29500")]
    assert stuck_probes(other_group, NOW, 30.0) == set()
