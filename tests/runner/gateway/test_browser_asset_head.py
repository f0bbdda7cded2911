"""A noVNC file's answer reaches the operator's browser with only the headers the door allows (round 13 a's
lead: the container is hostile and every door shares one origin; a `Service-Worker-Allowed: /` from it
would let a worker take every later noVNC link of every browser)."""

from __future__ import annotations

from runner.gateway.browser_proxy import asset_head


def test_only_the_allowed_headers_pass_and_the_doors_policy_is_added() -> None:
    raw = (
        b"HTTP/1.0 200 OK\r\nServer: WebSockify Python/3.11.2\r\nContent-type: text/javascript\r\n"
        b"Content-Length: 12\r\nService-Worker-Allowed: /\r\nSet-Cookie: a=b\r\n"
        b"Access-Control-Allow-Origin: *\r\nLast-Modified: Sat, 28 Nov 2026 10:00:00 GMT\r\n\r\n"
    )
    head = asset_head(raw)
    assert head is not None and head.endswith(b"\r\n\r\n")
    lines = head[:-4].split(b"\r\n")
    assert lines[0] == b"HTTP/1.0 200 OK"
    names = {line.partition(b":")[0].lower() for line in lines[1:]}
    assert names == {
        b"content-type",
        b"content-length",
        b"last-modified",
        b"content-security-policy",
        b"x-content-type-options",
        b"cache-control",
        b"connection",
    }
    assert b"Content-Security-Policy: sandbox; worker-src 'none'" in head
    assert b"Service-Worker" not in head and b"Set-Cookie" not in head and b"Server" not in head


def test_a_head_that_is_no_http_answer_is_refused() -> None:
    for raw in (b"garbage\r\n\r\n", b"HTTP/2 200\r\n\r\n", b"HTTP/1.1 200 OK\x00\r\n\r\n", b"\r\n\r\n"):
        assert asset_head(raw) is None, raw
