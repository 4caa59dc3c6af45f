"""Ray token authentication for the CLI: send the token a cluster wants, or say in one line why not.

Ray 2.60 turns token authentication on for the clusters it starts, but a process that joins with
an explicit address (`--address`, RAY_ADDRESS) sends no token unless RAY_AUTH_MODE=token is in
its environment: `ray.init` then retries for ~20 s, printing a C++ warning a second, and fails
with a ConnectionError. RAY_BACKEND_LOG_LEVEL does not quiet those warnings (measured: the same
~20 lines with it at `fatal`), so we ask the GCS first, with one short gRPC call, and decide:

- RAY_AUTH_MODE set: it wins, as in Ray; a cluster that wants a token it will not get (or
  refuses the one it gets) gives one clear line.
- RAY_AUTH_MODE unset and the cluster answers without a token: token mode stays off. Ray's own
  CLI rule (`maybe_enable_token_auth_if_token_available`) turns it on whenever a token exists,
  and a token-mode driver of a cluster without authentication cannot create actors (Ray 2.60
  cancels them before they run; the debug tunnel needs one), while ~/.ray/auth_token exists on
  most machines that ever ran `ray.init()`.
- RAY_AUTH_MODE unset and the cluster wants a token: take it where Ray's token loader does
  (RAY_AUTH_TOKEN, else the file at RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token: we ask Ray's
  loader itself), check it with a second call, and turn token mode on for this process.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rankscope.errors import ClusterAuthError

AUTH_MODE_VAR = "RAY_AUTH_MODE"
PROBE_TIMEOUT_S = 3.0
_GET_A_TOKEN = "copy ~/.ray/auth_token from its head node to this machine, or set RAY_AUTH_TOKEN"


def prepare_token_auth(address: str) -> None:
    """Make `ray.init(address=address)` send the token the GCS at HOST:PORT wants.

    Raises `ClusterAuthError` (one line) when it wants one we do not have, refuses ours, or
    when RAY_AUTH_MODE=disabled here. Does nothing when the GCS cannot be asked (ray.init then
    reports as before) or for auth modes other than token/disabled.
    """
    mode = os.environ.get(AUTH_MODE_VAR)
    wanted = None if mode is None else mode.strip().lower()
    if wanted not in (None, "", "token", "disabled"):
        return  # another mode (k8s, ...): Ray's own business
    if _gcs_answers(address, {}) is not False:
        return  # no token wanted (or the GCS could not be asked: ray.init reports as before)
    if wanted not in (None, "token"):
        raise ClusterAuthError(
            f"the cluster at {address} requires a token, but {AUTH_MODE_VAR}={mode!r} here turns "
            f"tokens off: unset {AUTH_MODE_VAR} (or set it to token)"
        )
    header = _token_header()
    if not header:
        raise ClusterAuthError(f"the cluster at {address} requires a token: {_GET_A_TOKEN}")
    if _gcs_answers(address, header) is False:
        raise ClusterAuthError(
            f"the cluster at {address} refused the token from {token_source()}: {_GET_A_TOKEN} "
            "to the cluster's token"
        )
    if wanted is None:
        _enable_token_auth()


def token_source() -> str:
    """Where Ray's token loader takes the token from, in its order of precedence."""
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return "RAY_AUTH_TOKEN"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path:
        return f"RAY_AUTH_TOKEN_PATH ({path})"
    return str(Path.home() / ".ray" / "auth_token")


def _token_header() -> dict[str, str]:
    """{"authorization": "Bearer <token>"} from Ray's own loader, or {} when there is none."""
    from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]
    from ray.exceptions import AuthenticationError

    try:
        header = AuthenticationTokenLoader.instance().get_token_for_http_header(
            ignore_auth_mode=True
        )
    except AuthenticationError:  # RAY_AUTH_TOKEN_PATH names a missing or empty file
        raise ClusterAuthError(
            f"RAY_AUTH_TOKEN_PATH={os.environ.get('RAY_AUTH_TOKEN_PATH', '')} cannot be read or "
            "is empty: point it at a file that holds the cluster's token, or unset it"
        ) from None
    return {str(k): str(v) for k, v in header.items()}


def _gcs_answers(address: str, metadata: dict[str, str]) -> bool | None:
    """True: the GCS answered; False: it refused the (missing) token; None: could not tell."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    with _channel(address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:  # the first call `ray.init` makes, and the one it retries when refused
            stub.GetClusterId(
                gcs_service_pb2.GetClusterIdRequest(),  # type: ignore[attr-defined]
                timeout=PROBE_TIMEOUT_S,
                metadata=list(metadata.items()),
            )
        except grpc.RpcError as exc:
            code = exc.code() if callable(getattr(exc, "code", None)) else None
            return False if code == grpc.StatusCode.UNAUTHENTICATED else None
    return True


def _channel(address: str) -> Any:
    import grpc

    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        from ray._common.tls_utils import load_certs_from_env

        cert_chain, private_key, ca_cert = load_certs_from_env()
        credentials = grpc.ssl_channel_credentials(
            certificate_chain=cert_chain, private_key=private_key, root_certificates=ca_cert
        )
        return grpc.secure_channel(address, credentials)
    return grpc.insecure_channel(address)


def _enable_token_auth() -> None:
    """Token mode for this process and its children, as Ray's CLI turns it on.

    Ray's function for it (`_enable_token_auth` in ray._private.authentication) is private and
    logs a warning, so we take its two steps ourselves: the variable, then RayConfig read again
    so that the C++ side (the token loader, the gRPC clients) sees it.
    """
    from ray._raylet import Config  # type: ignore[attr-defined]

    os.environ[AUTH_MODE_VAR] = "token"
    Config.initialize("")
