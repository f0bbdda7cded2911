from engine.commands import hostenv, proxyenv


def test_userinfo_is_dropped_from_proxy_urls() -> None:
    f = proxyenv.without_userinfo
    assert f("HTTPS_PROXY", "http://op:PASS@proxy:3128") == "http://proxy:3128"
    assert f("https_proxy", "http://op:PASS@proxy:3128/") == "http://proxy:3128"
    assert f("all_proxy", "socks5://op:p/a@ss@proxy:1080") == "socks5://proxy:1080"
    assert f("ftp_proxy", "op:PASS@proxy:21") == "proxy:21"
    assert f("HTTP_PROXY", "http://proxy:3128") == "http://proxy:3128"
    assert f("NO_PROXY", "a@b") == "a@b"
    assert f("HTTPS_PROXY", "http://op:PASS@proxy:3128", frozenset({"HTTPS_PROXY"})) == (
        "http://op:PASS@proxy:3128"
    )


def test_host_env_inherits_proxies_without_credentials() -> None:
    base = {"PATH": "/usr/bin", "HTTPS_PROXY": "http://op:PASS@proxy:3128", "http_proxy": "http://u:p@h:1"}
    env = hostenv.sanitize_host_env(base).env
    assert env["HTTPS_PROXY"] == "http://proxy:3128"
    assert env["http_proxy"] == "http://h:1"
    kept = hostenv.sanitize_host_env(base, inherit=["https_proxy"]).env
    assert kept["HTTPS_PROXY"] == "http://op:PASS@proxy:3128"
