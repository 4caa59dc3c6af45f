"""The verdict's rules on synthetic run data (no Ray): the root cause, and `diagnosis` beside it.

A rank's own exception, the first death, a hang before the deaths it caused, a rank idle in
Ray's loop, a rank at its checkpoint, and one story across the page's sections.
"""

from __future__ import annotations

from dataclasses import replace

from rankscope.cli.output import to_json
from rankscope.report.analysis import build_report
from rankscope.report.diagnosis import is_consequence
from rankscope.report.model import DiagnosisKind, RunData, Severity

NOW = 1_800_000_000.0
GROUP = "10.0.0.1:29500"
KILLED = "Ray: killed with ray.kill: The actor is dead because it was killed by `ray.kill`."
TRACE = 'Traceback (most recent call last):\n  File "/home/u/train.py", line 92, in step\n'


def _process(rank: int | None, state: str = "alive", actor: str = "Worker", seen: float = 5):
    context = {"rank": rank, "pid": 1000 + (rank or 99), "hostname": "n1", "node_ip": "10.0.0.1",
               "group": GROUP if rank is not None else None, "actor_class": actor}  # fmt: skip
    return {
        "info": {"probe_id": f"p{rank}", "context": context},
        "state": state,
        "last_seen": NOW - seen,
        "progress": {"step": 7},
    }


def _error(rank: int, exc: str, message: str, t: float, where: str = "train.py:92", tb=TRACE):
    payload = {"rank": rank, "group": GROUP, "pid": 1000 + rank, "exc_type": exc,
               "message": message, "where": where, "traceback": tb}  # fmt: skip
    return {"kind": "task_error", "time": t, "payload": payload, "probe_id": f"p{rank}"}


def _waiting(ranks: list[int], culprit: int, message: str = "") -> dict:
    text = message or (
        f"ranks {ranks[0]}-{ranks[-1]} wait in all_reduce #4 (float32[8]) for 9.0 s; "
        f"rank {culprit} never entered #4, its last completed collective is #3"
    )
    return {
        "group": GROUP,
        "findings": [{"kind": "hang", "message": text, "ranks": [culprit], "group": GROUP}],
        "groups": [{"group": GROUP, "ranks": [0, 1, 2, 3], "last_seq": 4, "waiting": ranks}],
    }


def _stacks(places: dict[int, str]) -> dict:
    groups = {}
    for rank, headline in places.items():
        groups.setdefault(headline, []).append(
            {"rank": rank, "group": GROUP, "active": True, "pid": 1000 + rank}
        )
    return {
        "groups": [{"headline": h, "members": m, "main_thread": True} for h, m in groups.items()],
        "findings": [],
        "process_count": len(places),
    }


def test_a_rank_that_raised_is_named_with_its_exception_and_line():
    data = RunData(
        "job",
        "hub",
        events=(_error(3, "ValueError", "bad batch", NOW - 10),),
        processes=tuple(_process(r) for r in range(4)),
        hang=(_waiting([0, 1, 2], 3),),
        stacks=(
            _stacks(
                {
                    0: "all_reduce <- step train.py:80",
                    1: "all_reduce <- step train.py:80",
                    2: "all_reduce <- step train.py:80",
                    3: "main_loop worker.py:1069",
                }
            ),
        ),
    )
    report = build_report(data, NOW)
    d = report.diagnosis
    assert d is not None and d.kind is DiagnosisKind.EXCEPTION
    assert (d.ranks, d.where, d.why) == ((3,), "train.py:92", "ValueError: bad batch")
    assert report.verdict.startswith(
        "rank 3 raised ValueError: bad batch (train.py:92); ranks 0-2 wait for it in a collective"
    )
    assert not report.ok
    ranks = next(s for s in report.sections if s.key == "ranks")
    assert "rank 3 raised ValueError: bad batch (train.py:92)" in ranks.findings


def test_the_peers_errors_after_an_exception_are_not_the_cause():
    peer = "Connection closed by peer [10.0.0.1]:4242"
    gloo = 'Traceback:\n  File "/x/torch/distributed/distributed_c10d.py", line 2, in all_reduce\n'
    data = RunData(
        "job",
        "hub",
        events=(
            _error(0, "RuntimeError", peer, NOW - 20, "train.py:80", gloo),
            _error(2, "ValueError", "bad batch", NOW - 21),
            _error(1, "ray.exceptions.RayTaskError(ValueError)", "bad batch", NOW - 19),
        ),
        processes=tuple(_process(r) for r in range(4)),
    )
    d = build_report(data, NOW).diagnosis
    assert d is not None and (d.kind, d.ranks) == (DiagnosisKind.EXCEPTION, (2,))
    assert is_consequence({"exc_type": "RuntimeError", "message": peer, "traceback": gloo})
    assert not is_consequence({"exc_type": "ValueError", "message": "bad batch"})
    assert is_consequence({"exc_type": "ValueError", "message": "bad batch", "echo": True})


def test_the_first_death_is_named_and_the_killed_ones_follow_it():
    data = RunData(
        "job",
        "hub",
        processes=tuple(_process(r, "dead") for r in range(4)),
        deaths={
            **{f"p{r}": KILLED for r in range(3)},
            "p3": "Ray: worker died (SYSTEM_ERROR): connection error code 2.",
        },
        died_at={"p0": NOW - 9.0, "p1": NOW - 9.0, "p2": NOW - 9.0, "p3": NOW - 9.0},
    )
    report = build_report(data, NOW)
    d = report.diagnosis
    assert d is not None and (d.kind, d.ranks, d.culprit) == (DiagnosisKind.DEATH, (3,), "rank 3")
    assert report.verdict.startswith(
        "rank 3 died first: Ray: worker died (SYSTEM_ERROR): connection error code 2.; "
        "then ranks 0-2 died"
    )


def test_a_death_beats_the_failed_collectives_it_caused():
    failed = {"kind": "failed", "message": "ranks 0,2 failed in all_reduce #4: Connection closed "
              "by peer; rank 3 still waits", "ranks": [1], "group": GROUP}  # fmt: skip
    data = RunData(
        "job",
        "hub",
        processes=(_process(0), _process(1, "dead"), _process(2), _process(3)),
        deaths={"p1": "Ray: worker died (SYSTEM_ERROR): killed by signal 9"},
        hang=({"group": GROUP, "findings": [failed], "groups": []},),
    )
    d = build_report(data, NOW).diagnosis
    assert d is not None and (d.kind, d.ranks) == (DiagnosisKind.DEATH, (1,))
    assert d.sentence.startswith("rank 1 is dead: Ray: worker died (SYSTEM_ERROR): killed by")


def test_a_rank_gone_with_its_node_is_named_before_the_peers_it_took_down():
    """A lost node: its rank falls silent at once, but the hub proves it dead only once Ray
    declares the node dead, after its peers failed and were torn down."""
    gone = "Ray: worker died (SYSTEM_ERROR): connection error code 2."
    peers = (_process(0, "dead", seen=5), _process(1, "dead", seen=6), _process(3, "dead", seen=5))
    data = RunData(
        "job",
        "hub",
        processes=(*peers, _process(2, seen=20)),
        deaths={"p0": KILLED, "p1": gone, "p3": KILLED},
        died_at={"p0": NOW - 4.0, "p1": NOW - 5.0, "p3": NOW - 4.0},
    )
    d = build_report(data, NOW).diagnosis
    assert d is not None and (d.kind, d.ranks) == (DiagnosisKind.DEATH, (2,))
    assert d.sentence.startswith("rank 2 went silent first: no heartbeat for 15 s while its peers")
    assert "then ranks 0,1,3 died" in d.sentence
    lost = _process(2, "dead", seen=20)
    lost["info"]["context"]["node_id"] = "n2"  # a node of its own, at the same IP
    node_gone = replace(data, processes=(*peers, lost),
                        deaths={**data.deaths, "p2": "node gone: Ray declared node 10.0.0.2 dead"},
                        died_at={**data.died_at, "p2": NOW - 1.0})  # fmt: skip
    d = build_report(node_gone, NOW).diagnosis  # once proven: dated by its last heartbeat
    assert d is not None and d.ranks == (2,) and d.culprit == "node 10.0.0.1"


def test_a_silent_rank_its_peers_failed_with_is_gone_before_any_death():
    failed = {"kind": "failed", "message": "ranks 0,1,3 failed in all_reduce #9: Connection "
              "closed by peer", "ranks": [2], "group": GROUP}  # fmt: skip
    data = RunData(
        "job",
        "hub",
        processes=(_process(0, seen=1), _process(1, seen=1), _process(2, seen=14), _process(3)),
        hang=({"group": GROUP, "findings": [failed], "groups": []},),
    )
    d = build_report(data, NOW).diagnosis
    assert d is not None and (d.kind, d.ranks) == (DiagnosisKind.DEATH, (2,))
    assert d.sentence.startswith("rank 2 went silent: no heartbeat for 13 s")
    quiet = replace(data, hang=())  # silent, but nothing points at it: no verdict of its own
    d = build_report(quiet, NOW).diagnosis
    assert d is None or d.kind != DiagnosisKind.DEATH


def test_a_hang_whose_culprit_lives_goes_before_the_deaths_that_followed():
    data = RunData(
        "job",
        "hub",
        processes=(_process(0, "dead"), _process(1), _process(2), _process(3)),
        deaths={"p0": "Ray: killed with ray.kill"},
        hang=(_waiting([1, 2], 3),),
        stacks=(_stacks({3: "load_batch data.py:41"}),),
    )
    d = build_report(data, NOW).diagnosis
    assert d is not None and (d.kind, d.ranks, d.where) == (DiagnosisKind.HANG, (3,), "data.py:41")


def test_a_desync_the_judge_raised_before_a_death_is_the_cause_of_that_death():
    """gloo aborts a process whose peer sent another size: rank 1 dies after the group judge
    raised the desync; the live hang analysis reads the living only and no longer sees it."""
    desync = {"rule": "desync", "severity": "critical", "rank": 2, "group": GROUP,
              "message": "group 0: rank 2 called all_reduce #41 with float32[579] at "
              "train.py:258; ranks 0,1,3 with float32[578]"}  # fmt: skip
    data = RunData(
        "job",
        "hub",
        events=({"kind": "alert", "time": NOW - 8, "payload": desync, "probe_id": "p0"},),
        processes=(_process(0), _process(1, "dead", seen=7), _process(2), _process(3)),
        deaths={"p1": "Ray: worker died (SYSTEM_ERROR): killed by signal 6"},
    )
    d = build_report(data, NOW).diagnosis
    assert d is not None
    assert (d.kind, d.ranks, d.where) == (DiagnosisKind.MISMATCH, (2,), "train.py:258")
    # gloo aborted rank 1 before the judge looked: a desync just after the death caused it
    later = replace(data, events=({**data.events[0], "time": NOW - 1},))
    d = build_report(later, NOW).diagnosis
    assert d is not None and (d.kind, d.ranks) == (DiagnosisKind.MISMATCH, (2,))
    # a hang raised after the death followed it (the dead rank never came)
    hang = {**desync, "rule": "hang", "message": "ranks 0,2,3 wait in all_reduce #41 for 10 s"}
    after = replace(data, events=({**data.events[0], "time": NOW - 1, "payload": hang},))
    d = build_report(after, NOW).diagnosis
    assert d is not None and (d.kind, d.ranks) == (DiagnosisKind.DEATH, (1,))


def test_a_mismatch_is_the_story_though_every_rank_died_after_it():
    """verl: gloo aborts rank 1 at once, the driver kills the rest; the dead ranks' last
    records still show rank 2's call of another size."""
    mismatch = {"kind": "mismatch", "ranks": [2], "message": "rank 2 called all_reduce #41 with "
                "float32[579] at train.py:258; ranks 0,1,3 with float32[578]"}  # fmt: skip
    data = RunData(
        "job",
        "hub",
        processes=tuple(_process(r, "dead") for r in range(4)),
        deaths={
            "p1": "Ray: worker died (SYSTEM_ERROR): killed by signal 6",
            **{f"p{r}": KILLED for r in (0, 2, 3)},
        },
        hang=({"group": GROUP, "findings": [mismatch], "groups": []},),
    )
    d = build_report(data, NOW).diagnosis
    assert d is not None
    assert (d.kind, d.ranks, d.where) == (DiagnosisKind.MISMATCH, (2,), "train.py:258")


def test_a_rank_idle_in_rays_loop_ended_its_work_early():
    data = RunData(
        "job",
        "hub",
        processes=tuple(_process(r) for r in range(4)),
        hang=(_waiting([0, 1, 2], 3),),
        stacks=(_stacks({0: "all_reduce <- step train.py:80", 3: "main_loop worker.py:1069"}),),
    )
    d = build_report(data, NOW).diagnosis
    assert d is not None and (d.kind, d.ranks) == (DiagnosisKind.MISMATCH, (3,))
    assert d.sentence.startswith("rank 3 has no task running (idle in Ray's worker loop)")


def test_rank_less_pool_workers_are_no_finding_and_do_not_crowd_the_table():
    pool = [_process(None, state, actor="") for state in ("alive", "dead")]
    pool[1]["info"]["probe_id"] = "pool2"
    data = RunData("job", "hub", processes=(*(_process(r) for r in range(4)), *pool))
    report = build_report(data, NOW)
    assert report.ok and report.diagnosis is None
    ranks = next(s for s in report.sections if s.key == "ranks")
    [table] = ranks.tables
    assert all(not row[0].startswith("pid ") for row in table.rows)
    assert "2 Ray worker processes with no rank and no actor (1 ended) not shown" in table.omitted


def test_one_story_no_section_looks_healthy_beside_a_failing_verdict():
    stall = {"group": GROUP, "waiting": [0, 1, 2], "where": "all_reduce <- step train.py:80",
             "elsewhere": [3], "message": "ranks 0-2 wait in all_reduce <- step train.py:80; "
             "rank 3 is elsewhere: load_batch data.py:41"}  # fmt: skip
    stacks = _stacks({0: "all_reduce <- step train.py:80", 3: "load_batch data.py:41"})
    data = RunData(
        "job",
        "hub",
        processes=tuple(_process(r) for r in range(4)),
        hang=({"group": GROUP, "findings": [], "groups": []},),
        stacks=({**stacks, "findings": [stall]},),
    )
    report = build_report(data, NOW)
    d = report.diagnosis
    assert d is not None and (d.kind, d.ranks, d.where) == (DiagnosisKind.HANG, (3,), "data.py:41")
    hang = next(s for s in report.sections if s.key == "hang")
    assert hang.ok and not hang.healthy and hang.level is Severity.WARN
    assert "no rank is stuck" not in hang.summary
    assert "the verdict (hang: rank 3) comes from the stacks data" in hang.notes[0]
    from rankscope.report.render import render_html

    page = render_html(report)
    assert 'id="section-hang" class="noted"' in page


def test_the_diagnosis_is_in_the_json_beside_the_sentence():
    data = RunData(
        "job",
        "hub",
        events=(_error(3, "ValueError", "bad batch", NOW - 10),),
        processes=tuple(_process(r) for r in range(4)),
    )
    out = to_json("report", build_report(data, NOW))
    import json

    body = json.loads(out)["data"]
    assert body["verdict"].startswith("rank 3 raised ValueError")
    assert body["diagnosis"]["kind"] == "exception"
    assert body["diagnosis"]["ranks"] == [3]
    assert body["diagnosis"]["where"] == "train.py:92"
    assert body["diagnosis"]["level"] == "fail"


def test_a_healthy_run_has_no_diagnosis():
    data = RunData("job", "hub", processes=tuple(_process(r) for r in range(4)))
    report = build_report(data, NOW)
    assert report.ok and report.diagnosis is None
    assert report.verdict.startswith("no finding")


def _saving_job(waited: float, moving: dict[str, str]) -> RunData:
    """Rank 0 in save_checkpoint while ranks 1-3 wait for it in a barrier."""
    stall = {"group": GROUP, "waiting": [1, 2, 3], "where": "barrier <- step train.py:80",
             "elsewhere": [0], "message": "ranks 1-3 wait in barrier <- step train.py:80; "
             "rank 0 is elsewhere: save_checkpoint ckpt.py:12"}  # fmt: skip
    stacks = _stacks({0: "save_checkpoint ckpt.py:12", 1: "barrier <- step train.py:80"})
    for g in stacks["groups"]:
        for m in g["members"]:
            m["waited_s"] = waited if m["rank"] else None
    return RunData(
        "job",
        "hub",
        processes=tuple(_process(r) for r in range(4)),
        stacks=({**stacks, "findings": [stall]},),
        moving=moving,
    )


def test_a_rank_that_moves_while_its_group_waits_is_slow_not_stuck():
    report = build_report(_saving_job(18.0, {"p0": "it reads or writes storage"}), NOW)
    d = report.diagnosis
    assert d is not None and (d.kind, d.level, d.ranks) == (DiagnosisKind.SLOW, Severity.WARN, (0,))
    assert d.sentence.startswith(
        "rank 0 is slow, not stuck: busy in save_checkpoint ckpt.py:12 while its group has "
        "waited 18 s (it reads or writes storage between two looks"
    )
    assert report.ok  # a note: exit 0
    stacks = next(s for s in report.sections if s.key == "stacks")
    assert stacks.ok and stacks.level is Severity.WARN and "rank 0 is elsewhere" in stacks.notes[0]


def test_a_checkpoint_the_hang_analysis_also_sees_is_slow_whatever_it_calls_the_group():
    """Past 5 s the live hang report sees the barrier too, and names torch's group ("0"), not
    the ranks' rendezvous: rank 0 that moved is still slow, not a hang."""
    saving = _saving_job(18.0, {"p0": "it reads or writes storage"})
    hang = {"findings": [{"kind": "hang", "group": "0", "ranks": [0], "message": "group 0 (4 "
            "ranks): ranks 1-3 wait in barrier #9 for 18.0 s; rank 0 never entered #9"}],
            "groups": [{"group": "0", "ranks": [0, 1, 2, 3], "waiting": [1, 2, 3]}]}  # fmt: skip
    d = build_report(replace(saving, hang=(hang,)), NOW).diagnosis
    assert d is not None and (d.kind, d.level, d.ranks) == (DiagnosisKind.SLOW, Severity.WARN, (0,))
    stuck = build_report(replace(saving, hang=(hang,), moving={}), NOW).diagnosis
    assert stuck is not None and stuck.kind is DiagnosisKind.HANG


def test_a_rank_that_does_not_move_or_waited_too_long_is_stuck():
    for data in (_saving_job(18.0, {}), _saving_job(400.0, {"p0": "its call stack changed"})):
        report = build_report(data, NOW)
        assert report.diagnosis is not None and report.diagnosis.kind is DiagnosisKind.HANG
        assert not report.ok


def test_what_counts_as_moving():
    import genericpath

    import torch

    from rankscope.context import RankContext
    from rankscope.hang.motion import moved
    from rankscope.hang.worker import motion_of
    from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress
    from rankscope.stacks.model import Frame

    def spin(line: int) -> list[Frame]:
        return [Frame("spin", "/u/train.py", line, False), Frame("main", "/u/train.py", 5, False)]

    assert motion_of(spin(10), 0) == motion_of(spin(11), 0)  # a spin goes nowhere
    polling = [Frame("exists", genericpath.__file__, 19, True), *spin(10)]
    assert motion_of(polling, 0) == motion_of(spin(12), 0)  # nor a loop polling a file
    for inner in (Frame("save", "/u/ckpt.py", 3, False), Frame("save", torch.__file__, 3, True)):
        assert motion_of([inner, *spin(10)], 0) != motion_of(spin(10), 0)  # work moves
    assert motion_of(spin(10), 0) != motion_of(spin(10), 4096)  # storage moved
    ctx = RankContext(0, 0, 4, "n0", "10.0.0.1", "h0", 100, "job", None, "W", None, "env", GROUP)

    def row(probe: str, step: int, motion: str) -> ProbeStatus:
        info = ProbeInfo(probe, ctx, "0", NOW)
        return ProbeStatus(
            info, ProbeState.ALIVE, NOW, NOW, Progress(step, NOW), 0, 0, {"motion": motion}
        )

    before = [row("a", 1, "aa:0"), row("b", 1, "bb:0"), row("c", 1, "cc:0"), row("d", 1, "dd:0")]
    after = [row("a", 2, "aa:0"), row("b", 1, "b2:0"), row("c", 1, f"cc:{2 << 20}"),
             row("d", 1, "dd:4096")]  # fmt: skip
    assert moved(before, after) == {
        "a": "its step moved",
        "b": "its call stack changed",
        "c": "it reads or writes storage",
    }


def test_an_environment_difference_names_the_odd_rank_and_what_differs():
    skew = {"what": "NCCL_SOCKET_IFNAME", "odd_ones": ["rank 3"], "group": GROUP,
            "message": "NCCL_SOCKET_IFNAME differs across ranks (2 values); rank 3 has lo "
            "where most have eth0"}  # fmt: skip
    data = RunData(
        "job",
        "hub",
        processes=tuple(_process(r) for r in range(4)),
        environment=({"processes": [], "findings": [skew], "unanswered": []},),
    )
    d = build_report(data, NOW).diagnosis
    assert d is not None and d.kind is DiagnosisKind.ENVIRONMENT
    assert (d.culprit, d.ranks, d.where) == ("rank 3", (3,), "NCCL_SOCKET_IFNAME")


def test_work_waiting_on_another_jobs_resources_names_the_holder():
    holder = {"kind": "actor", "id": "a1", "name": "Hog", "node_id": "n1",
              "resources": {"CPU": 4.0}, "job_id": "02000000"}  # fmt: skip
    mine = {"kind": "actor", "id": "a2", "name": "Trainer", "node_id": "n1",
            "resources": {"CPU": 1.0}, "job_id": "job"}  # fmt: skip
    waiting = {"demand": {"kind": "actor", "name": "train.Worker", "job_id": "job"},
               "verdict": "waiting", "reason": "CPU held", "holders": [holder]}  # fmt: skip
    own = {**waiting, "holders": [mine]}  # a pipeline waiting for its own work: no finding
    assert build_report(RunData("job", "hub", pending=({"verdicts": [own]},)), NOW).ok
    report = build_report(RunData("job", "hub", pending=({"verdicts": [waiting]},)), NOW)
    d = report.diagnosis
    assert d is not None and (d.kind, d.culprit) == (
        DiagnosisKind.WAITING,
        "actor Hog of job 02000000",
    )
    assert report.verdict.startswith(
        "actor Worker waits for resources another job holds: actor Hog of job 02000000 (CPU: 4)"
    )


def test_a_throughput_that_only_fluctuates_is_a_note_and_a_drop_fails():
    def health(value: float) -> dict:
        f = {"kind": "throughput_drift", "ranks": [], "step": 40, "value": value,
             "evidence": "tokens/s fluctuates by 19%", "advice": "the input"}  # fmt: skip
        return {"findings": [f]}

    calm = build_report(RunData("job", "hub", health=(health(0.19),)), NOW)
    assert calm.ok and calm.diagnosis is None
    monitor = next(s for s in calm.sections if s.key == "monitor")
    assert monitor.level is Severity.WARN and "fluctuates" in monitor.notes[0]
    drop = build_report(RunData("job", "hub", health=(health(-0.3),)), NOW)
    assert not drop.ok and drop.diagnosis is not None
    assert drop.diagnosis.kind is DiagnosisKind.THROUGHPUT_DRIFT


def test_a_rank_paused_in_a_debugger_is_a_breakpoint():
    stacks = _stacks({0: "all_reduce <- step train.py:80", 3: "readline <- step train.py:151"})
    for g in stacks["groups"]:
        if g["headline"].startswith("readline"):
            g["frames"] = [{"function": "readline", "filename": "/usr/lib/python3.11/pdb.py",
                            "lineno": 1, "library": True},
                           {"function": "step", "filename": "/u/train.py", "lineno": 151,
                            "library": False}]  # fmt: skip
    data = RunData(
        "job",
        "hub",
        processes=tuple(_process(r) for r in range(4)),
        hang=(_waiting([0, 1, 2], 3),),
        stacks=(stacks,),
    )
    d = build_report(data, NOW).diagnosis
    assert d is not None and (d.kind, d.ranks, d.where) == (
        DiagnosisKind.BREAKPOINT,
        (3,),
        "train.py:151",
    )
    assert d.sentence.startswith("rank 3 is paused in a debugger at train.py:151")
    # the hang analysis names torch's group ("0"), the stacks the ranks' rendezvous
    named_by_torch = {**data.hang[0], "group": "0"}
    named_by_torch["findings"] = [{**named_by_torch["findings"][0], "group": "0"}]
    d = build_report(replace(data, hang=(named_by_torch,)), NOW).diagnosis
    assert d is not None and d.kind is DiagnosisKind.BREAKPOINT


def test_a_straggler_its_group_waits_for_is_a_straggler_not_a_hang():
    data = _saving_job(1.0, {"p0": "its collectives moved on"})
    straggler = {"kind": "straggler", "ranks": [0], "step": None, "value": 2.0,
                 "evidence": "rank 0 computes 2.0x the median", "advice": "look"}  # fmt: skip
    data = replace(data, health=({"findings": [straggler]},))
    report = build_report(data, NOW)
    d = report.diagnosis
    assert d is not None and (d.kind, d.ranks) == (DiagnosisKind.STRAGGLER, (0,))
    stacks = next(s for s in report.sections if s.key == "stacks")
    assert stacks.ok and "rank 0 is elsewhere" in stacks.notes[0]  # no hang beside it
    alone = build_report(_saving_job(1.0, {"p0": "its collectives moved on"}), NOW)
    assert alone.ok and alone.diagnosis is not None and alone.diagnosis.kind is DiagnosisKind.SLOW


def test_a_straggler_that_now_moves_only_in_its_own_code_is_slow_there_not_a_straggler():
    """Rank 0 straggled, then stopped stepping: it spins in its own code while its group waits.
    The straggler finding of its earlier steps is still there; it says nothing of the wait."""
    straggler = {"kind": "straggler", "ranks": [0], "step": None, "value": 2.0,
                 "evidence": "rank 0 computes 2.0x the median", "advice": "look"}  # fmt: skip
    for moved in ("its call stack changed", "it reads or writes storage"):
        data = replace(_saving_job(6.0, {"p0": moved}), health=({"findings": [straggler]},))
        d = build_report(data, NOW).diagnosis
        assert d is not None and (d.kind, d.ranks) == (DiagnosisKind.SLOW, (0,)), d
        assert d.where == "ckpt.py:12" and "busy in save_checkpoint ckpt.py:12" in d.sentence


def test_a_rank_whose_collectives_moved_on_between_looks_moved():
    from rankscope.context import RankContext
    from rankscope.hang.model import CallState, CollectiveRecord, RecorderSnapshot
    from rankscope.hang.motion import moved
    from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress

    ctx = RankContext(0, 0, 4, "n0", "10.0.0.1", "h0", 100, "job", None, "W", None, "env", GROUP)

    def row(seq: int) -> ProbeStatus:
        record = CollectiveRecord("0", seq, "all_reduce", ((8,),), ("float32",), NOW, NOW,
                                  CallState.COMPLETED, "train.py:9")  # fmt: skip
        summaries = {"motion": "aa:0", "collectives": RecorderSnapshot((record,), {}, 0, True)}
        info = ProbeInfo("a", ctx, "0", NOW)
        return ProbeStatus(info, ProbeState.ALIVE, NOW, NOW, Progress(1, NOW), 0, 0, summaries)

    assert moved([row(4)], [row(9)]) == {"a": "its collectives moved on"}
    assert moved([row(4)], [row(4)]) == {}


def test_a_sharp_monitor_finding_is_named_before_a_trend_and_a_straggler_says_where():
    drift = {"kind": "throughput_drift", "ranks": [1], "step": 85, "value": -0.3,
             "evidence": "rank 1 steps/s dropped 30%", "advice": "look"}  # fmt: skip
    spike = {"kind": "loss_spike", "ranks": [2], "step": 40, "value": 9.0,
             "evidence": "rank 2 loss 30x its median", "advice": "the batch"}  # fmt: skip
    report = build_report(RunData("job", "hub", health=({"findings": [drift, spike]},)), NOW)
    d = report.diagnosis
    assert d is not None and (d.kind, d.ranks, d.where) == (
        DiagnosisKind.LOSS_SPIKE,
        (2,),
        "step 40",
    )
    monitor = next(s for s in report.sections if s.key == "monitor")
    assert monitor.findings[0].startswith("loss_spike: rank 2 loss")  # the page agrees
    # the next all_reduce spreads it: rank 1 spikes 3 steps later and is listed first
    spread = {**spike, "ranks": [1], "step": 43, "evidence": "rank 1 loss 12x its median"}
    report = build_report(RunData("job", "hub", health=({"findings": [spread, spike]},)), NOW)
    assert report.diagnosis is not None and report.diagnosis.ranks == (2,)
    straggler = {"kind": "straggler", "ranks": [2], "step": None, "value": 2.0,
                 "evidence": "rank 2 computes 2.0x the median", "advice": "look"}  # fmt: skip
    place = {"group": None, "rank": 2, "place": "compute train.py:221", "share": 0.48,
             "peers_share": 0.0, "seconds": 1.5}  # fmt: skip
    health = ({"findings": [drift, straggler]},)
    report = build_report(RunData("job", "hub", health=health, odd_places=(place,)), NOW)
    d = report.diagnosis
    assert d is not None and (d.kind, d.ranks) == (DiagnosisKind.STRAGGLER, (2,))
    assert d.where == "compute train.py:221" and "48% of its time" in d.why


def test_a_live_memory_trend_that_leaks_is_a_leak_at_the_resource():
    leak = {"metric": "rss", "leak": True, "reason": "+20 MiB/step since step 3"}
    reply = {"snapshot": {"pid": 12, "rss": 2 << 30}, "leaks": [leak]}
    profile = {"data": {"memory": {"ranks": [{"pid": 12, "label": "rank 2"}]},
                        "replies": [reply]}}  # fmt: skip
    report = build_report(RunData("job", "hub", artifacts={"memory-live": profile}), NOW)
    d = report.diagnosis
    assert d is not None and (d.kind, d.ranks, d.where) == (DiagnosisKind.LEAK, (2,), "rss")


def test_a_straggler_alert_of_a_job_that_marks_no_steps_says_where_its_time_goes():
    said = "rank 2 last to arrive at 9 of 12 collectives (75%, chance is 25%)"
    alert = {"rule": "straggler", "severity": "warning", "rank": 2, "group": "g", "message": said}
    events = ({"kind": "alert", "time": NOW - 5, "payload": alert},)
    place = {"group": "g", "rank": 2, "place": "compute train.py:221", "share": 0.5,
             "peers_share": 0.02, "seconds": 1.5}  # fmt: skip
    d = build_report(RunData("job", "hub", events=events, odd_places=(place,)), NOW).diagnosis
    assert d is not None and (d.kind, d.ranks, d.where) == (
        DiagnosisKind.STRAGGLER,
        (2,),
        "compute train.py:221",
    )
    assert d.why.endswith("it spends 50% of its time in compute train.py:221, its peers 2% "
                          "(sampled 1.5 s)")  # fmt: skip


def test_an_error_burst_names_the_rank_and_the_line_that_logged_it():
    burst = {"rule": "error_burst", "severity": "error", "rank": 2, "message": "rank 2: 12 ERROR "
             "records in 60 s, the last: reading shard 7 failed (train.py:148)"}  # fmt: skip
    data = RunData(
        "job",
        "hub",
        processes=tuple(_process(r) for r in range(4)),
        events=({"kind": "alert", "time": NOW - 5, "payload": burst, "probe_id": "p2"},),
    )
    d = build_report(data, NOW).diagnosis
    assert d is not None and (d.kind, d.ranks, d.where) == (
        DiagnosisKind.ERROR_BURST,
        (2,),
        "train.py:148",
    )
