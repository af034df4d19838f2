"""The paper's three workload profiles (Table II): social media, web-server records, game traffic.

Each profile makes realistic message values; a pool of values is generated once (seeded) and cycled,
so generating load costs nothing per message.

* ``social``: short text posts, 40-280 characters (a tweet-like length distribution), UTF-8.
* ``weblog``: Apache combined log format access records, about 200 bytes.
* ``game``: compact JSON game events (player, action, position, tick), under 100 bytes.
"""

from __future__ import annotations

import json
import random
from typing import Literal

Profile = Literal["social", "weblog", "game"]
PROFILES: tuple[Profile, ...] = ("social", "weblog", "game")

_WORDS = [
    "kafka",
    "stream",
    "audit",
    "today",
    "great",
    "news",
    "just",
    "launched",
    "new",
    "feature",
    "love",
    "this",
    "weekend",
    "coffee",
    "team",
    "release",
    "data",
    "platform",
    "amazing",
    "check",
    "out",
    "thanks",
    "everyone",
    "happy",
    "monday",
    "working",
    "from",
    "home",
    "live",
    "now",
    "update",
    "breaking",
    "weather",
    "match",
    "goal",
    "win",
    "city",
    "music",
    "concert",
    "tickets",
    "photo",
    "travel",
    "friends",
    "family",
]
_PATHS = (
    "/",
    "/index.html",
    "/api/v1/orders",
    "/api/v1/users/42",
    "/static/app.js",
    "/static/style.css",
    "/login",
    "/search?q=kafka",
    "/products/1337",
    "/cart",
    "/checkout",
    "/images/logo.png",
)
_AGENTS = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/126.0 Safari/537.36",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148 Safari/604.1",
)
_REFERRERS = (
    "-",
    "https://www.example.com/",
    "https://shop.example.com/products?page=2",
    "https://search.example.org/?q=kafka+audit",
)
_ACTIONS = ("move", "shoot", "jump", "chat", "pickup", "spawn", "hit")


def _social(rng: random.Random) -> bytes:
    n = max(40, min(280, int(rng.lognormvariate(4.4, 0.5))))
    words: list[str] = []
    while len(" ".join(words)) < n:
        words.append(rng.choice(_WORDS))
    text = " ".join(words)[:n]
    if rng.random() < 0.3:
        text = text[: n - 7] + " #kafka"
    return text.encode()


def _weblog(rng: random.Random) -> bytes:
    ip = ".".join(str(rng.randint(1, 254)) for _ in range(4))
    t = f"22/Nov/2026:{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} +0000"
    method = rng.choice(("GET", "GET", "GET", "POST"))
    status = rng.choice((200, 200, 200, 200, 304, 404, 500))
    line = (
        f'{ip} - - [{t}] "{method} {rng.choice(_PATHS)} HTTP/1.1" {status} {rng.randint(200, 50000)} '
        f'"{rng.choice(_REFERRERS)}" "{rng.choice(_AGENTS)}"'
    )
    return line.encode()


def _game(rng: random.Random) -> bytes:
    event = {
        "p": rng.randint(1, 99999),
        "a": rng.choice(_ACTIONS),
        "x": round(rng.uniform(0, 1000), 1),
        "y": round(rng.uniform(0, 1000), 1),
        "t": rng.randint(0, 10**6),
    }
    return json.dumps(event, separators=(",", ":")).encode()


_MAKERS = {"social": _social, "weblog": _weblog, "game": _game}


def message_pool(
    profile: Profile, size: int = 1024, seed: int = 0, message_bytes: int | None = None
) -> list[bytes]:
    """Return ``size`` message values of ``profile`` (deterministic for a seed).

    Args:
        profile: ``social``, ``weblog`` or ``game``.
        size: Number of distinct values.
        seed: RNG seed.
        message_bytes: If given, pad or cut every value to exactly this many bytes (the paper's M).

    Raises:
        ValueError: for an unknown profile (the message lists the allowed ones).
    """
    if profile not in _MAKERS:
        raise ValueError(f"unknown workload profile {profile!r}: allowed are {', '.join(PROFILES)}")
    rng = random.Random(f"{profile}-{seed}")
    pool = [_MAKERS[profile](rng) for _ in range(size)]
    if message_bytes is not None:
        pool = [(v * (message_bytes // max(1, len(v)) + 1))[:message_bytes] for v in pool]
    return pool
