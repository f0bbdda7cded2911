"""`[agents.defaults.sandbox.egress]`: the keys, their checks, per-agent layering, and the name rules."""

from __future__ import annotations

import pytest

from engine.config.egress import BadName, EgressPolicy, approval_entry, decide, normalize, parse_pattern
from engine.config.loader import ConfigError, load_config_text
from engine.sandbox.settings import config_hash, layout, resolve_settings

PIP_NPM = (
    '[agents.defaults.sandbox]\nmode = "all"\n'
    '[agents.defaults.sandbox.egress]\nmode = "allowlist"\n'
    'allow = ["pypi.org", "files.pythonhosted.org", "registry.npmjs.org"]\nask = false\n'
)


def test_pip_and_npm_only() -> None:
    policy = resolve_settings(load_config_text(PIP_NPM), "main").egress
    assert decide(policy, "pypi.org", 443).action == "allow"
    assert decide(policy, "files.pythonhosted.org", 443).action == "allow"
    assert decide(policy, "registry.npmjs.org", 80, tunnel=False).action == "allow"
    assert decide(policy, "pypi.org", 22).action == "deny"  # a name admits 80 and 443 only
    assert decide(policy, "github.com", 443).action == "deny"


def test_defaults_none_and_per_agent_layers() -> None:
    assert resolve_settings(load_config_text(""), "main").egress.mode == "none"
    assert decide(EgressPolicy(), "pypi.org", 443).action == "deny"
    cfg = load_config_text(
        PIP_NPM
        + '[[agents.list]]\nid = "web"\nsandbox.egress.allow = ["example.org"]\nsandbox.egress.ask = true\n'
        '[[agents.list]]\nid = "shy"\nsandbox.egress.mode = "none"\n'
    )
    web = resolve_settings(cfg, "web").egress
    assert web.mode == "allowlist" and web.ask and [p.text for p in web.allow] == ["example.org"]
    assert decide(web, "pypi.org", 443).action == "ask"
    assert resolve_settings(cfg, "shy").egress.mode == "none"


def test_mode_is_in_the_config_hash_and_the_lists_are_not() -> None:
    def digest(text: str) -> str:
        settings = resolve_settings(load_config_text(text), "main")
        return config_hash(settings, layout(settings, "main", "main"))

    base = '[agents.defaults.sandbox]\nmode = "all"\n'
    assert digest(base) != digest(base + '[agents.defaults.sandbox.egress]\nmode = "open"\n')
    assert digest(PIP_NPM) == digest(PIP_NPM.replace('"pypi.org", ', ""))  # lists apply live


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('mode = "on"', "expected none|allowlist|open"),
        ('allow = ["*"]', "only as a leading"),
        ('allow = ["*.com"]', "two labels"),
        ('allow = ["127.1"]', "another spelling"),
        ('allow = ["pypi.org:99999"]', "bad port"),
        ('deny = ["user@host.org"]', "invalid"),
        ("ask = 1", "expected true or false"),
        ('resolve = { "mirror.local" = "not-an-ip" }', "expected an IP address"),
        ('resolve = { "10.0.0.1" = "10.0.0.1" }', "not a plain host name"),
        ('resolve = ["x"]', "expected a table"),
        ("allowed = []", "unknown key"),
    ],
)
def test_bad_values_name_the_key(toml: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        load_config_text(f"[agents.defaults.sandbox.egress]\n{toml}\n")
    assert "agents.defaults.sandbox.egress." in str(info.value)


def test_egress_with_a_docker_network_is_refused() -> None:
    with pytest.raises(ConfigError, match=r'needs docker\.network = "none"'):
        load_config_text(
            '[agents.defaults.sandbox.docker]\nnetwork = "bridge"\n'
            '[agents.defaults.sandbox.egress]\nmode = "open"\n'
        )


def test_name_normalisation() -> None:
    assert normalize("PyPI.org.") == "pypi.org"
    assert normalize("bücher.example") == "xn--bcher-kva.example"
    assert normalize("[::1]") == "::1"
    for bad in ("", "a..b", "-a.org", "a.org..", "127.1", "2130706433", "0x7f.1", "a b.org", "x" * 300):
        with pytest.raises(BadName):
            normalize(bad)


def test_idna_2008_names_still_match_their_entries() -> None:
    """The legitimate side of UTS 46 non-transitional: a Unicode entry admits the A-label clients send and
    its other spellings (case, full-width letters, an ideographic full stop), ASCII names with `_` still
    pass, and what IDNA 2008 refuses (a symbol, a bare joiner, an A-label that is no U-label's) is refused."""
    allow = ["bücher.example", "faß.de"]
    policy = EgressPolicy.from_config({"mode": "allowlist", "allow": allow, "ask": False})
    for name in ("xn--bcher-kva.example", "BÜCHER.example", "ｂücher．example", "bücher.example。", "faß.de"):
        assert decide(policy, normalize(name), 443).action == "allow", name
    assert normalize("faß.de") == "xn--fa-hia.de"
    assert decide(policy, normalize("fass.de"), 443).action == "deny"
    assert normalize("XN--Strae-OQA.de") == "xn--strae-oqa.de"
    assert normalize("_acme-challenge.example.org") == "_acme-challenge.example.org"
    for bad in ("☃.net", "xn--n3h.net", "a\u200db.example", "xn--zz.de"):
        with pytest.raises(BadName):
            normalize(bad)


def test_patterns() -> None:
    wild = parse_pattern("*.PythonHosted.org")
    assert wild.matches("files.pythonhosted.org", 443, True)
    assert not wild.matches("pythonhosted.org", 443, True)
    assert not wild.matches("evilpythonhosted.org", 443, True)
    assert parse_pattern("mirror.local:8080").matches("mirror.local", 8080, False)
    assert parse_pattern("mirror.local:8080").matches("mirror.local", 8080, True)
    assert not parse_pattern("mirror.local:8080").matches("mirror.local", 443, True)
    assert parse_pattern("any.port:*").matches("any.port", 5432, True)
    assert parse_pattern("[2001:db8::1]:443").matches("2001:db8::1", 443, True)
    # allow-always saves exactly what was asked for: `name:80` never opens 443, and a plain request's
    # approval (`http://name:port`) never a tunnel to its port.
    assert approval_entry("pypi.org", 443) == "pypi.org:443"
    assert approval_entry("example.org", 80, tunnel=False) == "http://example.org:80"
    assert approval_entry("mirror.local", 8080) == "mirror.local:8080"
    assert approval_entry("2001:db8::1", 80, tunnel=False) == "http://[2001:db8::1]:80"
    saved = parse_pattern(approval_entry("example.org", 80, tunnel=False))
    assert saved.matches("example.org", 80, False)
    assert not saved.matches("example.org", 80, True) and not saved.matches("example.org", 443, True)
    tunnel = parse_pattern(approval_entry("example.org", 443))
    assert tunnel.matches("example.org", 443, True) and not tunnel.matches("example.org", 80, True)


def test_an_http_entry_admits_plain_requests_only() -> None:
    for text in ("http://example.org", "HTTP://example.org:80", "http://*.org.example"):
        entry = parse_pattern(text)
        name = "a.org.example" if entry.wildcard else "example.org"
        assert entry.matches(name, 80, False) and not entry.matches(name, 80, True), text
    assert parse_pattern("http://example.org:8080").matches("example.org", 8080, False)
    policy = EgressPolicy.from_config({"mode": "open", "deny": ["http://evil.org"]})
    assert decide(policy, "evil.org", 443, tunnel=True).action == "deny"  # (a deny entry denies tunnels too)
    with pytest.raises(ConfigError):
        load_config_text('[agents.defaults.sandbox.egress]\nmode = "open"\nallow = ["https://x.org"]\n')


def test_a_port_less_allow_entry_means_what_a_url_without_a_port_means() -> None:
    """`name` admits plain http:// to 80 and tunnels (CONNECT, SOCKS5) to 443; nothing else: `CONNECT
    name:80` is an uninspected tunnel to a plain-HTTP port (any Host inside), so it needs `name:80`."""
    bare = parse_pattern("example.org")
    assert bare.matches("example.org", 80, False) and bare.matches("example.org", 443, True)
    assert not bare.matches("example.org", 80, True) and not bare.matches("example.org", 443, False)
    policy = EgressPolicy.from_config({"mode": "allowlist", "allow": ["example.org"], "ask": False})
    assert decide(policy, "example.org", 80, tunnel=True).action == "deny"
    assert decide(policy, "example.org", 443, tunnel=False).action == "deny"
    assert decide(policy, "example.org", 8443, tunnel=True).action == "deny"
    policy = EgressPolicy.from_config({"mode": "allowlist", "allow": ["example.org:80"], "ask": False})
    assert decide(policy, "example.org", 80, tunnel=True).action == "allow"


def test_a_port_less_deny_entry_refuses_every_port() -> None:
    policy = EgressPolicy.from_config({"mode": "open", "deny": ["evil.org", "*.evil.org"]})
    for port, tunnel in ((80, False), (443, True), (8443, True), (80, True), (22, True)):
        assert decide(policy, "evil.org", port, tunnel=tunnel).action == "deny", port
        assert decide(policy, "a.evil.org", port, tunnel=tunnel).action == "deny", port
    policy = EgressPolicy.from_config({"mode": "open", "deny": ["evil.org:25"]})
    assert decide(policy, "evil.org", 443).action == "allow"
    assert decide(policy, "evil.org", 25).action == "deny"


def test_ports_are_ascii_digits_only() -> None:
    for bad in ("ok.org:\u00b9", "ok.org:\u0663", "ok.org:+80", "ok.org: 80", "ok.org:080080"):
        with pytest.raises(ValueError, match="bad port"):
            parse_pattern(bad)
    with pytest.raises(ConfigError):
        load_config_text('[agents.defaults.sandbox.egress]\nmode = "open"\nallow = ["ok.org:\u00b2"]\n')


def test_deny_wins_and_open_mode() -> None:
    policy = EgressPolicy.from_config({"mode": "open", "deny": ["*.evil.org", "evil.org"]})
    assert decide(policy, "anything.org", 443).action == "allow"
    assert decide(policy, "a.evil.org", 443).action == "deny"
    policy = EgressPolicy.from_config({"mode": "allowlist", "allow": ["ok.org"], "deny": ["ok.org"]})
    assert decide(policy, "ok.org", 443).action == "deny"


def test_explain_shows_the_way_out() -> None:
    from engine.sandbox import admin

    shown = admin.explain(load_config_text(PIP_NPM + 'resolve = { "mirror.lan" = "10.0.0.5" }\n'))
    egress = shown["egress"]
    assert egress["mode"] == "allowlist" and egress["allow"][0] == "pypi.org" and not egress["ask"]
    assert egress["resolve"] == {"mirror.lan": "10.0.0.5"} and egress["proxy"] == "http://127.0.0.1:3128"
    assert egress["socket"].endswith("/proxy.sock")
    assert admin.explain(load_config_text(""))["egress"]["socket"] is None
    assert admin.explain(load_config_text(""))["egress"]["maxConnections"] == 256
