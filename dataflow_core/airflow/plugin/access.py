"""Who may read the pane explorer's pages: one dependency on the whole plugin app (`guard`),
asking Airflow's own auth manager, failing closed.

- **Login**: every request must carry what Airflow's api-server accepts (its session cookie
  or a bearer token), checked by Airflow's own `get_user`. If Airflow's auth cannot be
  imported or is not initialised, every request is refused (503) with one line: the plugin
  never serves without a check. The only way round is a setting named for what it does,
  `DATAFLOW_PLUGIN_ALLOW_ANONYMOUS=I_UNDERSTAND_ANYONE_CAN_READ_EVERY_PIPELINE` (any other
  value is refused, so a typo does not open the door).
- **Authorization**: a user reads a pipeline's pages only if the auth manager gives them read
  access (`is_authorized_dag(method="GET")`) to every DAG of that pipeline
  (`pipeline_dag_ids`: its daily and micro-batch DAGs). The Data Docs site holds every
  pipeline's validations, so it needs read access to every pipeline.
- **Data Docs in a sandbox**: the site is served with `Content-Security-Policy: sandbox
  allow-scripts ...` (an opaque origin: its pages' scripts cannot act as the user on Airflow's
  origin, read its cookies or call its API). A sandboxed page's own requests carry no
  SameSite cookie, so a logged-in reader is redirected to the same site under a signed,
  short-lived path (`/data-docs/signed/<token>/...`): relative links keep the token, which
  admits to the Data Docs only, for `DATA_DOCS_TOKEN_S`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException, Request

from dataflow_core.airflow.dag_ids import pipeline_dag_ids

ANONYMOUS_SETTING = "DATAFLOW_PLUGIN_ALLOW_ANONYMOUS"
ANONYMOUS_VALUE = "I_UNDERSTAND_ANYONE_CAN_READ_EVERY_PIPELINE"
DATA_DOCS_TOKEN_S = 3600
DATA_DOCS_SALT = "dataflow-data-docs"
SIGNED_PREFIX = "signed"  # /data-docs/signed/<token>/<file>
DATA_DOCS_CSP = ("sandbox allow-scripts allow-popups allow-popups-to-escape-sandbox; default-src 'self'; "
                 "script-src 'self' 'unsafe-inline' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
                 "img-src 'self' data:; font-src 'self' data:; connect-src 'none'; form-action 'none'; "
                 "base-uri 'none'; object-src 'none'; frame-ancestors 'self'")


@dataclass
class Access:
    """What the guard decided for one request: who (None when anonymous access is allowed)
    and the pipelines they may read, in registration order."""

    user: Any
    pipelines: list[str] = field(default_factory=list)
    anonymous: bool = False


def anonymous_allowed() -> bool:
    raw = os.environ.get(ANONYMOUS_SETTING, "").strip()
    if not raw:
        return False
    if raw != ANONYMOUS_VALUE:
        raise HTTPException(500, f"${ANONYMOUS_SETTING}={raw!r}: set it to {ANONYMOUS_VALUE} to let anyone read "
                                 "every pipeline without logging in, or unset it")
    return True


def _airflow_auth() -> tuple[Any, Any, Any]:
    """Airflow's `get_user`, its bearer scheme and the auth manager; 503 when any is missing."""
    try:
        from airflow.api_fastapi.app import get_auth_manager
        from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

        return get_user, bearer_scheme, get_auth_manager()
    except (ImportError, RuntimeError) as exc:
        raise HTTPException(503, "the Dataflow plugin refuses every request: Airflow's auth manager is not "
                                 f"available to check logins ({str(exc).splitlines()[0] if str(exc) else exc!r}); "
                                 "run it inside Airflow's api-server") from None


def may_read(auth_manager: Any, user: Any, pipeline: str) -> bool:
    """Read access (GET) to every DAG of the pipeline, as Airflow's auth manager decides."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    return all(auth_manager.is_authorized_dag(method="GET", details=DagDetails(id=dag_id, team_name=_team(dag_id)),
                                              user=user) for dag_id in pipeline_dag_ids(pipeline))


def _team(dag_id: str) -> str | None:
    from airflow.configuration import conf

    if not conf.getboolean("core", "multi_team", fallback=False):
        return None
    from airflow.models.dag import DagModel

    return DagModel.get_team_name(dag_id)


def _secret() -> str:
    from airflow.configuration import conf

    secret = conf.get("api", "secret_key", fallback="") or ""
    if not secret:
        raise HTTPException(503, "the Dataflow plugin cannot sign Data Docs links: set [api] secret_key")
    return secret


def data_docs_token(user: Any) -> str:
    """A signed path segment admitting `user` to the Data Docs for DATA_DOCS_TOKEN_S."""
    from itsdangerous import URLSafeTimedSerializer

    return URLSafeTimedSerializer(_secret(), salt=DATA_DOCS_SALT).dumps(str(user.get_id()))


def _token_user(token: str) -> str:
    from itsdangerous import BadSignature, URLSafeTimedSerializer

    try:
        return URLSafeTimedSerializer(_secret(), salt=DATA_DOCS_SALT).loads(token, max_age=DATA_DOCS_TOKEN_S)
    except BadSignature:
        raise HTTPException(401, "this Data Docs link has expired or is not ours: open the Data Docs again "
                                 "from Airflow (Browse -> Data Docs)") from None


async def guard(request: Request) -> None:
    """The whole app's dependency: 401 without a login, 403 without read access to the
    pipeline asked for (or, for the Data Docs, to every pipeline), 503 when Airflow's auth is
    not there. Leaves the decision in `request.state.dataflow_access`."""
    import starlette.concurrency

    from dataflow_core.airflow.plugin.explorer import pipelines

    route = getattr(request.scope.get("route"), "path", "")
    names = list(pipelines())
    if anonymous_allowed():
        request.state.dataflow_access = Access(None, names, anonymous=True)
        return
    get_user, bearer_scheme, auth_manager = _airflow_auth()
    if route.startswith(f"/data-docs/{SIGNED_PREFIX}/"):  # the token was given to a reader of every pipeline
        request.state.dataflow_access = Access(_token_user(request.path_params.get("token", "")), names)
        return
    user = await get_user(request, None, await bearer_scheme(request))
    readable = await starlette.concurrency.run_in_threadpool(
        lambda: [n for n in names if may_read(auth_manager, user, n)])
    wanted = request.query_params.get("pipeline")
    if wanted and wanted not in readable:
        raise HTTPException(403, f"pipeline {wanted!r}: you have no read access to its DAGs "
                                 f"({', '.join(pipeline_dag_ids(wanted))}); ask an Airflow admin")
    if route.startswith("/data-docs") and readable != names:
        raise HTTPException(403, "the Data Docs hold every pipeline's validations: they need read access to "
                                 "every pipeline's DAGs; ask an Airflow admin")
    if names and not readable:
        raise HTTPException(403, "you have no read access to any pipeline's DAGs; ask an Airflow admin")
    request.state.dataflow_access = Access(user, readable)
