"""The pane explorer plugin's FastAPI app behind Airflow's real auth manager, in a process of
its own (Airflow's configuration and auth manager are process-wide), without the rest of an
api-server: `python -m tests.plugin_server PORT TOKENS_FILE`.

Airflow's api-server mounts the plugin app at its `url_prefix` (`init_plugins`); so does this
server, after `init_auth_manager` as the api-server does. The environment configures Airflow
(AIRFLOW_HOME, `[core] auth_manager`, its users, `[api_auth] jwt_secret`, `[api] secret_key`);
the JWTs Airflow's auth manager signs for each user are written to TOKENS_FILE as JSON.

`PerDagAuthManager` is Airflow's simple auth manager with per-DAG grants, as a real auth
manager (FAB, Keycloak) has them: `[core] auth_manager` may name any auth manager class, and
the simple one only knows roles. Its user `billing_reader` (role viewer) reads only the
DAGs named for pipeline billing.
"""

from __future__ import annotations

import json
import sys

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

PER_DAG_USERS = {"billing_reader": "__billing"}  # user -> the suffix of the DAG ids they may read


class PerDagAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        suffix = PER_DAG_USERS.get(user.get_id())
        if suffix is not None and not (details and details.id and details.id.endswith(suffix)):
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)


def main(port: int, tokens_file: str) -> None:
    import uvicorn
    from fastapi import FastAPI

    from airflow import settings
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.models.revoked_token import RevokedToken

    RevokedToken.__table__.create(settings.engine, checkfirst=True)  # the one table token checks read
    root = FastAPI()
    auth_manager = init_auth_manager(root)
    from dataflow_core.airflow.plugin.airflow_plugin import DataflowPlugin

    for sub in DataflowPlugin.fastapi_apps:
        root.mount(sub["url_prefix"], sub["app"])
    tokens = {user.get_id(): auth_manager.generate_jwt(user) for user in auth_manager.get_users()}
    with open(tokens_file, "w") as f:
        json.dump(tokens, f)
    uvicorn.run(root, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
