"""Store URLs as they may be shown: every secret-bearing part redacted by one function.

Every surface that prints a store URL (a store's `url` and `repr`, its errors, the CLI, the
`agentrewind ui` banner and its `/api/store`, logs) shows `redact_url(url)`: the password of
the user info, and the value of each query parameter that carries a secret (libpq's
`password` and `sslpassword`, redis-py's `password`, and any parameter named like a
password, secret, token or key) become `***`. A libpq keyword string (`host=... password=...`)
is redacted the same way. File paths (`sslkey`, `passfile`) name where a secret is, not the
secret, and are kept.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

__all__ = ["SECRET_PARAMETERS", "is_secret_parameter", "redact_url"]

SECRET_PARAMETERS = frozenset(
    {"password", "sslpassword", "pass", "pwd", "secret", "token", "auth", "api_key", "apikey"}
)
"""Query parameters whose value is a secret (compared case-insensitively)."""
_SECRET_WORDS = ("password", "secret", "token", "apikey", "api_key", "credential")
_PATHS = frozenset({"sslkey", "sslcert", "sslrootcert", "sslcrl", "passfile"})
_KEYWORD = re.compile(r"""(?P<key>[A-Za-z_]+)\s*=\s*(?P<value>'(?:[^'\\]|\\.)*'|\S+)""")
MASK = "***"


def is_secret_parameter(name: str) -> bool:
    """Whether a URL query (or libpq keyword) parameter `name` carries a secret."""
    lowered = name.lower()
    if lowered in _PATHS:
        return False
    return lowered in SECRET_PARAMETERS or any(w in lowered for w in _SECRET_WORDS)


def redact_url(url: str) -> str:
    """`url` with its password and every secret-bearing query parameter replaced by `***`."""
    if "://" not in url:
        if "=" not in url:
            return url  # a file path (SQLite) or a name
        return _KEYWORD.sub(_redact_keyword, url)  # a libpq keyword/value string
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # a malformed netloc: show nothing after the scheme's host part
        return url.split("://", 1)[0] + "://" + MASK
    netloc = parts.netloc
    if password is not None:
        userinfo, _, hostport = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{MASK}@{hostport}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(is_secret_parameter(k) for k, _ in pairs):
            query = "&".join(
                f"{quote(k, safe='')}={MASK if is_secret_parameter(k) else quote(v, safe='/:,')}"
                for k, v in pairs
            )
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _redact_keyword(m: re.Match[str]) -> str:
    return f"{m.group('key')}={MASK}" if is_secret_parameter(m.group("key")) else m.group(0)
