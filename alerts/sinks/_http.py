"""Minimal JSON over HTTP with the standard library (urllib): the venv has neither requests nor httpx."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from alerts.exceptions import AlertSinkError

_SCHEMES = ("http://", "https://")


def safe_url(url: str) -> str:
    """Return ``url`` without user info and query (they may hold credentials), for messages and logs."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _request(
    sink: str, method: str, url: str, body: Any, timeout_s: float, headers: Mapping[str, str]
) -> Any:
    if not url.startswith(_SCHEMES):
        raise AlertSinkError(sink, f"{safe_url(url)!r}: only http:// and https:// URLs are allowed")
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(  # noqa: S310 - scheme checked above
        url, data=data, method=method, headers={"Content-Type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - scheme checked above
            payload = resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode(errors="replace")
        raise AlertSinkError(sink, f"{method} {safe_url(url)}: HTTP {exc.code} {detail.strip()}") from exc
    except (urllib.error.URLError, OSError) as exc:  # refused, DNS, timeout
        reason = getattr(exc, "reason", exc)
        raise AlertSinkError(sink, f"{method} {safe_url(url)}: {reason}") from exc
    if not payload:
        return None
    try:
        return json.loads(payload)
    except ValueError:
        return payload.decode(errors="replace")


def post_json(
    sink: str, url: str, body: Any, timeout_s: float, headers: Mapping[str, str] | None = None
) -> Any:
    """POST ``body`` as JSON; return the decoded JSON reply (or text, or None).

    Raises:
        AlertSinkError: non-2xx status, connection failure or timeout (``timeout_s``, s).
    """
    return _request(sink, "POST", url, body, timeout_s, headers or {})


def get_json(sink: str, url: str, timeout_s: float, headers: Mapping[str, str] | None = None) -> Any:
    """GET ``url`` and return the decoded JSON reply.

    Raises:
        AlertSinkError: non-2xx status, connection failure or timeout.
    """
    return _request(sink, "GET", url, None, timeout_s, headers or {})
