"""Who may use the routes of `vtx serve` that translate, detect, parse or take suggestions,
and how often: api keys (`--api-keys FILE`) and a rate limit (`--req-limit`, texts a minute),
as LibreTranslate's flags of those names; whether a request may come without one
(`--api-keys-optional`, LibreTranslate's default), and the origins whose requests need none
(`--keyless-origin`, LibreTranslate's `--require-api-key-origin`).

The limit counts each known key's requests apart, and all others by the address they come
from (a key the server does not hold buys no bucket of its own). That address is the
connection's, or, when the connection comes from a `--trusted-proxy`, the one its
`X-Forwarded-For` names: a header anyone else sends is ignored, so it buys no bucket either.
The buckets, refusals and bans live in a `vtx.serve.limit_store` store.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import math
import re
from pathlib import Path
from typing import Mapping

from vtx.errors import DataError
from vtx.serve.limit_store import LimitStore, MemoryStore
from vtx.serve.requests import RequestError, shown

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclasses.dataclass(frozen=True)
class KeyLimits:
    """A key's own limits, from its line of the keys file; None: the server's flag's."""

    req_limit: int | None = None  # texts a minute (as --req-limit; 0: none)
    char_limit: int | None = None  # characters a request (as --char-limit; 0: none)


def read_api_keys(path: str | Path) -> dict[str, KeyLimits]:
    """The keys of `path` and their limits: a key a line, then optionally its own limits,
    `KEY req_limit=120 char_limit=5000`; blank lines and lines starting with '#' are skipped.

    Raises:
        OSError: the file cannot be read.
        DataError: it holds no key, a key twice, or a setting other than `req_limit=N` or
            `char_limit=N` (N >= 0), naming the file, line and value.
    """
    keys, lines = {}, {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        key, *settings = words
        if key in keys:  # the key itself unsaid: a log need not hold it
            raise DataError(f"{path}:{number}: the key of line {lines[key]} again")
        lines[key] = number
        limits = {}
        for setting in settings:
            name, equals, value = setting.partition("=")
            if name not in ("req_limit", "char_limit") or name in limits or not equals \
                    or not value.isascii() or not value.isdigit():
                raise DataError(f"{path}:{number}: {shown(setting, 40)}: expected req_limit=N "
                                "or char_limit=N (N >= 0, each once) after the key")
            limits[name] = int(value)
        keys[key] = KeyLimits(**limits)
    if not keys:
        raise DataError(f"{path}: no api key in it (one a line)")
    return keys


def read_proxies(values: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    """The networks of `--trusted-proxy` values: addresses (`10.0.0.7`, `::1`) or CIDR
    networks (`10.0.0.0/8`).

    Raises:
        DataError: a value that is neither (naming it).
    """
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise DataError(f"--trusted-proxy {value!r}: expected an IP address or a network "
                            "such as 10.0.0.0/8") from None
    return tuple(networks)


def forwarded_address(peer: str, forwarded_for: list[str],
                      proxies: tuple[IPNetwork, ...]) -> str:
    """The client's address of a connection from `peer` whose `X-Forwarded-For` headers are
    `forwarded_for`: `peer` unless it is one of `proxies`; else the right-most forwarded address
    that is no proxy (each proxy appends the address it was reached from, so the ones left of
    it are whatever the client wrote). A hop that is no address ends the walk at the proxy
    that passed it on."""
    hops = [hop.strip() for header in forwarded_for for hop in header.split(",")]
    address = peer
    while _is_proxy(address, proxies) and hops:
        hop = hops.pop()
        try:
            address = str(ipaddress.ip_address(hop))
        except ValueError:
            break
    return address


# What a URL's scheme and authority may be, as a proxy forwards them (X-Forwarded-Proto,
# X-Forwarded-Host): a host name or address and a port, nothing a path or header could hide in.
FORWARDED_PROTOS = ("http", "https")
FORWARDED_HOST = re.compile(r"[A-Za-z0-9.-]+(:\d{1,5})?|\[[0-9A-Fa-f:.]+\](:\d{1,5})?")


def forwarded_origin(peer: str, protos: list[str], hosts: list[str],
                     proxies: tuple[IPNetwork, ...], scheme: str, host: str) -> str:
    """`scheme://host` of the server as its client reached it: the request's own `scheme` and
    `host` (its Host header), unless `peer` is one of `proxies`; then the scheme and host the
    proxy says it was reached by (the right-most value of its X-Forwarded-Proto `protos` and
    X-Forwarded-Host `hosts` headers, as werkzeug's ProxyFix reads one proxy's), each where
    it is a plain scheme or host[:port]."""
    if _is_proxy(peer, proxies):
        last = lambda headers: headers and headers[-1].split(",")[-1].strip()
        if (proto := last(protos)) and proto.lower() in FORWARDED_PROTOS:
            scheme = proto.lower()
        if (forwarded := last(hosts)) and FORWARDED_HOST.fullmatch(forwarded):
            host = forwarded
    return f"{scheme}://{host}"


def _is_proxy(address: str, proxies: tuple[IPNetwork, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in proxies)


def origin_matches(origin: str, patterns: tuple[str, ...]) -> bool:
    """Whether `origin` (an Origin header) is one of `patterns`: origins such as
    `https://mt.example.org`, in which `*` stands for any characters (`*`, `moz-extension://*`),
    compared without case."""
    return any(re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), origin, re.I)
               for pattern in patterns)


def request_size(texts: object) -> tuple[int, int]:
    """(cost, characters) of a request whose texts are `texts` (LibreTranslate's `q`, `/v1`'s
    `text`): a list costs its number of entries, anything else 1, from the rate limit; the
    characters are its strings' together. A shape the request's checks refuse still costs."""
    if isinstance(texts, list):
        return max(1, len(texts)), sum(len(text) for text in texts if isinstance(text, str))
    return 1, len(texts) if isinstance(texts, str) else 0


@dataclasses.dataclass(frozen=True)
class Flood:
    """Bans of clients refused too often (`--req-flood-threshold`, as LibreTranslate's): a
    client refused 403 or 429 more than `threshold` times within `window_s` seconds is refused
    403 for `ban_s` seconds."""

    threshold: int  # refusals within a window a client may get; one more bans it
    ban_s: float  # --req-flood-ban: how long a ban lasts
    window_s: float = 60.0

    def __post_init__(self) -> None:
        if self.threshold < 1 or not self.ban_s > 0:
            raise DataError(f"--req-flood-threshold must be >= 1 and --req-flood-ban > 0, "
                            f"got {self.threshold} and {self.ban_s}")

    def check(self, clients: list[str], store: LimitStore) -> None:
        """Refuse a request of `clients` (its address, and its key if known) if one is banned.

        Raises:
            RequestError: 403 with Retry-After, naming the flag and when the ban ends.
        """
        left = store.banned_for(clients)
        if left > 0:
            wait = math.ceil(left)
            ends = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=wait)
            raise RequestError(
                f"Too many request limits violations: banned for more than {self.threshold} "
                f"refusals within {self.window_s:g} s (--req-flood-threshold); the ban ends in "
                f"{wait} s, at {ends:%Y-%m-%dT%H:%M:%SZ}", 403, {"Retry-After": str(wait)})

    def report(self, client: str, store: LimitStore) -> None:
        """Count a 403 or 429 refusal of `client`; past the threshold, ban it."""
        store.refused(client, self.threshold, self.window_s, self.ban_s)


@dataclasses.dataclass
class Access:
    """The api keys and their own limits (None: no keys asked), whether a request without one is
    let through (as its address), the origins whose requests need none, the texts a minute each client may send (0: no limit), a client being its key if the
    server holds it, else its address, and the characters a request may hold (0: no limit)."""

    keys: Mapping[str, KeyLimits] | None = None
    per_minute: int = 0  # --req-limit: texts a minute, a request costing `request_size`'s
    keyless_origins: tuple[str, ...] = ()  # `origin_matches` patterns
    keys_optional: bool = False  # --api-keys-optional: a keyless request counts as its address
    trusted_proxies: tuple[IPNetwork, ...] = ()  # whose X-Forwarded-For names the client
    char_limit: int = 0  # --char-limit: characters of a request's texts together
    flood: Flood | None = None  # None: no bans
    # The buckets (of each client's texts a minute), refusals and bans: --req-limit-storage
    store: LimitStore = dataclasses.field(default_factory=MemoryStore)

    def __post_init__(self) -> None:
        for flag, value in (("--req-limit", self.per_minute), ("--char-limit", self.char_limit)):
            if value < 0:
                raise DataError(f"{flag} must be >= 0, got {value}")

    def address_of(self, peer: str, forwarded_for: list[str]) -> str:
        """The address a request counts as (`forwarded_address`): its connection's `peer`, or
        for a trusted proxy's, the client its `X-Forwarded-For` headers name."""
        return forwarded_address(peer, forwarded_for, self.trusted_proxies)

    def origin_of(self, peer: str, protos: list[str], hosts: list[str], scheme: str,
                  host: str) -> str:
        """`scheme://host` of the server as a request's client reached it
        (`forwarded_origin`: a trusted proxy's X-Forwarded-Proto and X-Forwarded-Host)."""
        return forwarded_origin(peer, protos, hosts, self.trusted_proxies, scheme, host)

    def admit(self, key: str | None, address: str, origin: str | None = None,
              texts: object = None, charged: bool = True) -> str:
        """Let a request of `key` (its api key) from `address`, sent by a page of `origin` (its
        Origin header), whose texts are `texts` (`request_size`), through, or refuse it; not
        `charged`: its key and ban only, before its texts are known (a file's, before it is
        read). Returns the client it counts as: "key KEY" for a key the server holds, else
        "address ADDRESS".

        Raises:
            RequestError: 403 for an unknown key, or a missing one while keys are asked, not
                optional, and `origin` is no keyless origin; 400 for more characters than its char limit,
                or a cost more than its requests a minute ever allow; 429 (with Retry-After)
                for a client past its rate; 403 (with Retry-After) for a client banned by
                `flood`, whose 403 and 429 refusals it counts. A key's limits are its own where
                its line gives them, else --char-limit's and --req-limit's.
        """
        known = self.keys is not None and key in self.keys
        client = f"key {key}" if known else f"address {address}"
        if self.flood:
            self.flood.check([f"address {address}", client], self.store)
        try:
            self._check(key, known, client, origin, texts, charged)
        except RequestError as refusal:
            if self.flood and refusal.status in (403, 429):
                self.flood.report(client, self.store)
            raise
        return client

    def _check(self, key: str | None, known: bool, client: str, origin: str | None,
               texts: object, charged: bool) -> None:
        """`admit`'s checks of a request of `key` (`known` to the server) of `client`."""
        if self.keys is not None and not known:
            if key:
                raise RequestError("invalid api key", 403)
            if not (self.keys_optional
                    or origin and origin_matches(origin, self.keyless_origins)):
                raise RequestError("this server asks for an api key: send it as 'api_key' or "
                                   "as a header 'Authorization: Bearer KEY'", 403)
        if not charged:
            return
        own = self.keys[key] if known else KeyLimits()
        char_limit, char_flag = _chosen(own.char_limit, self.char_limit, "char_limit")
        per_minute, rate_flag = _chosen(own.req_limit, self.per_minute, "req_limit")
        cost, characters = request_size(texts)
        if char_limit and characters > char_limit:
            raise RequestError(f"Invalid request: request ({characters}) exceeds text limit "
                               f"({char_limit}, {char_flag})")
        if per_minute:
            if cost > per_minute:
                raise RequestError(f"a request of {cost} texts is more than {rate_flag} "
                                   f"{per_minute} a minute allows: send fewer at once")
            self._take(client, cost, per_minute, rate_flag)

    def _take(self, client: str, cost: int, per_minute: int, flag: str) -> None:
        wait = self.store.take(client, cost, per_minute)
        if wait > 0:
            seconds = math.ceil(wait)
            raise RequestError(f"Slowdown: {per_minute} per 1 minute ({flag}); retry in "
                               f"{seconds} s", 429, {"Retry-After": str(seconds)})


def _chosen(own: int | None, server: int, name: str) -> tuple[int, str]:
    """(a limit, the words a refusal names it by): a key's `own` (its keys-file setting
    `name`) where given, else the server's flag's."""
    if own is not None:
        return own, f"this key's {name}"
    return server, "--" + name.replace("_", "-")
