"""Upload the dashboards to a running Grafana with grafana-client (HTTP API, service-account token).

Idempotent: each dashboard keeps its fixed uid and is saved with ``overwrite: true``, so pushing again
replaces it (Grafana bumps its version); the folder is looked up by title and created only if missing.
Grafana HTTP API: ``GET/POST /api/folders``, ``POST /api/dashboards/db``
(https://grafana.com/docs/grafana/latest/developers/http_api/dashboard/).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kafka_plumbing.errors import ConfigError, KafkaAuditError


class GrafanaPushError(KafkaAuditError):
    """Grafana refused or could not take the dashboards (the message names the URL, never the token)."""


class GrafanaAuthError(GrafanaPushError):
    """Grafana rejected the token: HTTP 401 (unknown / expired token) or 403 (token lacks permission)."""


@dataclass(frozen=True)
class PushedDashboard:
    """One saved dashboard: its uid, Grafana's version number after the save, and its URL path."""

    uid: str
    title: str
    version: int | None
    url: str


def safe_url(url: str) -> str:
    """Return ``url`` without user info (``http://user:pass@host`` -> ``http://host``), for messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def folder_uid(title: str) -> str:
    """Return the uid a folder created by us gets: the title lower-cased, non-alphanumerics as ``-``."""
    uid = re.sub(r"[^a-z0-9_-]+", "-", title.lower()).strip("-")[:40]
    return uid or "kafka-audit"


def _api(url: str, token: str, timeout_s: float) -> Any:
    from grafana_client import GrafanaApi

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"--url {safe_url(url)!r}: expected the Grafana base URL, http(s)://host[:port][/path]"
        )
    if not token:
        raise ConfigError("--token is empty: pass a Grafana service-account token (Editor role or better)")
    # grafana-client appends "api" to the URL path: "/grafana" must end in "/" to give "/grafana/api".
    path = parts.path if parts.path in ("", "/") or parts.path.endswith("/") else parts.path + "/"
    base = urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
    return GrafanaApi.from_url(base, credential=token, timeout=timeout_s)


def _call(url: str, what: str, fn: Any, *args: Any) -> Any:
    """Run one grafana-client call, translating its exceptions into ours (URL named, token never)."""
    from grafana_client.client import GrafanaClientError, GrafanaException, GrafanaUnauthorizedError
    from niquests.exceptions import RequestException

    where = safe_url(url)
    try:
        return fn(*args)
    except GrafanaUnauthorizedError:
        raise GrafanaAuthError(
            f"Grafana at {where} rejected the token (HTTP 401 Unauthorized) while {what}: "
            "check that the service-account token is valid and not expired"
        ) from None
    except GrafanaClientError as exc:
        if exc.status_code == 403:
            raise GrafanaAuthError(
                f"Grafana at {where} rejected the token (HTTP 403 Forbidden) while {what}: the token's "
                "service account needs the Editor role (or folders:create, dashboards:write)"
            ) from None
        raise GrafanaPushError(f"Grafana at {where}: {what} failed: {exc.message}") from None
    except GrafanaException as exc:
        raise GrafanaPushError(f"Grafana at {where}: {what} failed: {exc.message}") from None
    except RequestException as exc:
        raise GrafanaPushError(
            f"cannot reach Grafana at {where} while {what}: {type(exc).__name__}"
        ) from None


def ensure_folder(api: Any, url: str, title: str) -> str:
    """Return the uid of the folder titled ``title``, creating it if missing.

    Raises:
        GrafanaAuthError: token rejected (401/403).
        GrafanaPushError: any other failure.
    """
    folders = _call(url, "listing folders", api.folder.get_all_folders) or []
    for folder in folders:
        if folder.get("title") == title:
            return str(folder["uid"])
    created = _call(url, f"creating folder {title!r}", api.folder.create_folder, title, folder_uid(title))
    return str(created["uid"])


def push(
    url: str,
    token: str,
    models: dict[str, dict[str, Any]],
    folder: str = "kafka-audit",
    timeout_s: float = 10.0,
) -> list[PushedDashboard]:
    """Save every dashboard JSON model of ``models`` (by uid) into ``folder`` of the Grafana at ``url``.

    Args:
        url: Grafana base URL, e.g. ``http://grafana:3000`` (a sub-path like ``/grafana`` is kept).
        token: Service-account token (sent as ``Authorization: Bearer``; never logged or printed).
        models: Dashboard JSON models by uid (:func:`dashboards.build.dashboards`).
        folder: Folder title (created if missing).
        timeout_s: Timeout of each HTTP request, s.

    Returns:
        One entry per dashboard saved, in ``models`` order.

    Raises:
        ConfigError: bad ``url`` or empty ``token``.
        GrafanaAuthError: Grafana answered 401 or 403.
        GrafanaPushError: any other HTTP or connection failure.
    """
    api = _api(url, token, timeout_s)
    uid_of_folder = ensure_folder(api, url, folder)
    saved = []
    for uid, model in models.items():
        body = {
            "dashboard": {**model, "id": None, "uid": uid},
            "folderUid": uid_of_folder,
            "overwrite": True,
            "message": "kafka-audit dashboards push",
        }
        reply = _call(url, f"saving dashboard {uid!r}", api.dashboard.update_dashboard, body) or {}
        saved.append(
            PushedDashboard(uid, model.get("title", uid), reply.get("version"), reply.get("url", ""))
        )
    return saved
