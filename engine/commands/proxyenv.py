"""Proxy URLs a host run inherits, without the credentials they may carry (fresh round 11 a): the
gateway's `https_proxy=http://user:pass@proxy:3128` says where the proxy is, which a run needs, and holds
the operator's proxy password, which it does not. Kept: the scheme and the host and port after the last
`@`; everything before it (the userinfo, whatever its characters) is dropped. A value without `@` carries
no userinfo and is kept as it is. A key the operator names in `[tools.exec] inheritEnv` is kept whole."""

from __future__ import annotations

import re

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)?(.*)$", re.DOTALL)


def is_proxy_key(key: str) -> bool:
    """http_proxy, https_proxy, all_proxy, ftp_proxy and any other `*_PROXY` (any case), not NO_PROXY."""
    upper = key.upper()
    return upper.endswith("_PROXY") and upper != "NO_PROXY"


def without_userinfo(key: str, value: str, named: frozenset[str] = frozenset()) -> str:
    """`value` as a host run inherits it: a proxy URL's userinfo dropped unless `named` (the operator's
    `inheritEnv`, upper case) holds the key."""
    if "@" not in value or not is_proxy_key(key) or key.upper() in named:
        return value
    m = _SCHEME.match(value)
    scheme, rest = (m.group(1) or "", m.group(2)) if m else ("", value)
    host = re.split(r"[/?#]", rest.rsplit("@", 1)[1], maxsplit=1)[0]
    return scheme + host
