"""Every exception rankscope raises on purpose.

`UserError` and its children are mistakes a user can fix (a bad rank spec, no cluster,
a version mismatch): the CLI prints their message as one line and exits with code 2.
Anything else that escapes is a rankscope bug.
"""

from __future__ import annotations


class RankscopeError(Exception):
    """Base class of every error rankscope raises on purpose."""


class UserError(RankscopeError):
    """Something the user can fix; the message says what is wrong and what to do."""


class BadRankSpec(UserError):
    """A `--ranks` value that does not parse, e.g. `0,3-x`."""


class NoClusterError(UserError):
    """No Ray cluster is running where we looked, or the address does not answer."""


class ClusterAuthError(NoClusterError):
    """The cluster requires a Ray auth token and we have none, or it refuses ours."""


class NoHubError(UserError):
    """The cluster has no rankscope hub: no process called `rankscope.init()`."""


class HubUnavailableError(NoHubError):
    """The hub exists but does not answer now: restarting, gone, or busy past the deadline."""


class VersionMismatchError(UserError):
    """A probe or hub runs another rankscope version than this CLI."""


class CheckpointError(UserError):
    """A checkpoint or config that cannot be read or converted: the message names the file."""


class ConsistencyError(RankscopeError):
    """Tensors that should be equal across ranks are not (`raise_on_mismatch=True`).

    `.report` holds the full `ConsistencyReport`; the message is its summary and table.
    """

    def __init__(self, report: object) -> None:
        super().__init__(str(report))
        self.report = report
