"""The dashboard's trust boundary: who may drive it, whom it may contact, how remote text shows.

- Host check (DNS rebinding): a page on an attacker's domain that resolves to 127.0.0.1 talks
  to the dashboard with that domain as Host. Only loopback hosts, the address the server binds
  and the names in Streamlit's `server.allowedHosts` are served (as Jupyter's server does).
  Streamlit itself refuses the websocket of any other Host once that list is set
  (.streamlit/config.toml sets it to the loopback names); app.py checks again, which also
  covers a server started without that config file.
- Scrape allow-list: KVVIZ_SCRAPE_ALLOW (comma-separated host names and addresses/CIDRs;
  unset: any host) bounds what the Node and Fleet pages and `kvviz scrape` contact. A name is
  matched as written; an address or CIDR is matched against the address actually connected to
  (checked after connect, so a name that re-resolves elsewhere is still caught).
- Remote strings (scraped bodies, node messages, Prometheus errors) are shown as plain text:
  `plain_markdown` escapes everything Markdown would act on.

Stdlib only.
"""
from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kvviz.core.errors import KvvizError

SCRAPE_ALLOW_ENV = "KVVIZ_SCRAPE_ALLOW"
IpNet = ipaddress.IPv4Network | ipaddress.IPv6Network
_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_]([a-z0-9_-]{0,62}))*$")
_WILDCARDS = {"0.0.0.0", "::", ""}


class ScrapeNotAllowedError(KvvizError):
    """A host outside KVVIZ_SCRAPE_ALLOW (or a malformed allow-list)."""


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        addr = ipaddress.ip_address(text.split("%", 1)[0].strip("[]"))
    except ValueError:
        return None
    mapped = getattr(addr, "ipv4_mapped", None)
    return mapped or addr


@dataclass(frozen=True)
class ScrapeAllow:
    """Parsed KVVIZ_SCRAPE_ALLOW. `anything` when the variable is unset, has no entry or `*`."""

    names: frozenset[str] = frozenset()
    nets: tuple[IpNet, ...] = ()
    anything: bool = True
    source: str = ""

    @classmethod
    def parse(cls, text: str | None) -> ScrapeAllow:
        if text is None or not text.strip():
            return cls()
        names: set[str] = set()
        nets: list[IpNet] = []
        for entry in (e.strip().lower().rstrip(".") for e in text.split(",")):
            if not entry:
                continue
            if entry == "*":
                return cls(source=text)
            try:
                nets.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            if not _NAME.match(entry):
                raise ScrapeNotAllowedError(
                    f"{SCRAPE_ALLOW_ENV}: {entry!r} is neither a host name nor an address/CIDR")
            names.add(entry)
        if not names and not nets:  # only commas and spaces: as if unset
            return cls()
        return cls(frozenset(names), tuple(nets), anything=False, source=text)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ScrapeAllow:
        return cls.parse((os.environ if env is None else env).get(SCRAPE_ALLOW_ENV))

    def _refuse(self, what: str) -> ScrapeNotAllowedError:
        return ScrapeNotAllowedError(
            f"{what} is not in {SCRAPE_ALLOW_ENV}={self.source.strip()!r}")

    def _net_has(self, addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        return any(addr.version == n.version and addr in n for n in self.nets)

    def check_host(self, host: str) -> None:
        """Before connecting: refuse a host no entry can allow. A name not listed by name is
        left to `check_peer` when CIDRs are listed (its address is known only after connect)."""
        if self.anything:
            return
        host = host.lower().rstrip(".")
        if host in self.names:
            return
        addr = _ip(host)
        if addr is not None:
            if not self._net_has(addr):
                raise self._refuse(f"host {host}")
        elif not self.nets:
            raise self._refuse(f"host {host}")

    def check_peer(self, host: str, peer: str) -> None:
        """After connecting to `host` at address `peer`."""
        if self.anything or host.lower().rstrip(".") in self.names:
            return
        addr = _ip(peer)
        if addr is None or not self._net_has(addr):
            raise self._refuse(f"host {host} (address {peer})")


def check_scrape_url(url: str, env: Mapping[str, str] | None = None) -> None:
    """Raise ScrapeNotAllowedError when KVVIZ_SCRAPE_ALLOW rules out the URL's host."""
    import urllib.parse

    ScrapeAllow.from_env(env).check_host(urllib.parse.urlsplit(url).hostname or "")


def _host_of(header: str) -> str:
    """`Host` header value -> host without port, lower case (`[::1]:8501` -> `::1`)."""
    h = header.strip().lower()
    if h.startswith("["):
        return h[1:h.find("]")] if "]" in h else h[1:]
    if h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h.rstrip(".")


def dashboard_host_ok(host_header: str | None, *, server_address: str | None = None,
                      extra: Iterable[str] = ()) -> bool:
    """May a browser request carrying this Host header drive the dashboard?

    Yes for loopback addresses and `localhost` (and `*.localhost`), for the address the server
    binds, and for the `extra` names (server.allowedHosts: `*` allows all, `*.example.com`
    any subdomain). When the server
    binds every interface (0.0.0.0, :: or unset, Streamlit's default), any IP-literal Host is
    also served: DNS rebinding needs a name. No header at all (not a browser: AppTest, bare
    mode) passes.
    """
    if host_header is None or not host_header.strip():
        return True
    host = _host_of(host_header)
    allowed = {e.strip().lower().rstrip(".") for e in extra if e.strip()}
    if "*" in allowed or host in allowed:
        return True
    if any(p.startswith("*.") and host.endswith(p[1:]) for p in allowed):
        return True
    if host == "localhost" or host.endswith(".localhost"):
        return True
    addr = _ip(host)
    if addr is not None and addr.is_loopback:
        return True
    bind = (server_address or "").strip().lower().strip("[]")
    if bind and host == bind.rstrip("."):
        return True
    return addr is not None and bind in _WILDCARDS


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~:$=^&\"'])")
# GFM turns bare URLs (http://, https://, www.) and e-mail addresses into links whatever the
# backslashes: an invisible word joiner inside each keeps them text.
_AUTOLINK = re.compile(r"(?i)\b(h)(ttps?:)(?=//[^\s/])|\b(w)(ww\.)(?=\w)|(?<=\w)(@)(?=\w)")


def plain_markdown(text: object, max_chars: int = 2000) -> str:
    """`text` escaped so that Streamlit's Markdown shows it literally: every ASCII punctuation
    Markdown, GFM, LaTeX or Streamlit directives act on gets a backslash; bare URLs and e-mail
    addresses (which GFM links anyway) get an invisible word joiner (U+2060); newlines become
    spaces; control characters are dropped; long text is cut at `max_chars`."""
    s = "".join(ch if ch.isprintable() else " " for ch in str(text))
    if len(s) > max_chars:
        s = s[:max_chars] + "..."
    s = _AUTOLINK.sub(lambda m: "\u2060".join(g for g in m.groups() if g is not None)
                      + ("\u2060" if m.group(5) else ""), s)
    return _MD_SPECIAL.sub(r"\\\1", s)
