"""The HTTP server of `vtx serve`: routes, error replies, and the run loop with its stop.

Built on aiohttp: one package gives the asyncio server (graceful stop: listening sockets closed,
requests in flight finished) and the client the load benchmark and the tests use; the search runs
on the batcher's threads, so the event loop only reads, checks and answers requests.

GET / is a page to try it (vtx/serve/page.html: one file, no build step, nothing fetched from
elsewhere): the translations with their n-best lists and scores and an alignment heatmap, or a
parser's trees drawn in SVG; a source and target choice when the server holds several pairs, and
the seconds a request has been running until it is answered.

API (JSON; every refusal is `{"error": "one line"}` with a 4xx, or 503 and Retry-After):
    POST /v1/translate  {"text": [lines], "model": "en-de" (or "source", "target"; with one
                        model, optional), "beam", "nbest", "lenpen", "sampling",
                        "sampling_topk", "sampling_topp", "temperature", "seed",
                        "prefix": [per line], "constraints": [[phrases] per line],
                        "alignment": bool, "glossary": [[source term, target term], ...]}
                        -> {"translations": [per line the record of `vtx translate
                        --output-format jsonl`: id, source, hypotheses; with alignment,
                        also source_tokens, the pieces its pairs' source indices count]}
    POST /v1/parse      {"text": [tokenized sentences], "beam", "lenpen"}
                        -> {"trees": [{"id", "source", "tree"}]}  (a parsing model only)
    GET /v1/info        the model, vocabulary, default settings and limits; under "pairs",
                        those of each language pair served (`vtx.serve.pairs`)
    POST /translate, POST /detect, POST /suggest, GET /languages, GET /frontend/settings
                        LibreTranslate's API (`vtx.serve.libre`): fields from the query string
                        and a JSON or form body
    POST /translate_file, GET /download_file/<name>
                        LibreTranslate's file translation: a multipart form's file
                        (`vtx.serve.files`), its translation kept for --file-ttl seconds
                        (`vtx.serve.file_store`), read and written on threads of their own
    GET /health         {"status": "ok"}
    GET /metrics        Prometheus text
    GET /spec           the routes and their fields, Swagger 2.0 (`vtx.serve.spec`)
The routes that translate, detect, parse or take suggestions take api keys and a rate limit
(`vtx.serve.access`): a key as the field "api_key" or an `Authorization: Bearer` header. Every
route is declared in `ROUTES`, which the app registers and GET /spec says.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import gc
import ipaddress
import json
import os
import signal
import sys
import time
import traceback
import urllib.parse
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from vtx import __version__
from vtx.errors import ArgumentError
from vtx.inference.decoding import DecodeOptions
from vtx.inference.glossary import Glossary
from vtx.inference.translate import line_record
from vtx.precision import DecodingPrecision
from vtx.serve import libre
from vtx.serve.access import Access, origin_matches
from vtx.serve.batcher import Batcher
from vtx.serve.checks import CheckPool
from vtx.serve.file_store import FileSettings, FileStore, TranslatedFile
from vtx.serve.language import Detector, LanguagePair, language_name
from vtx.serve.metrics import Metrics
from vtx.serve.pairs import ROUTE_FIELDS, Pairs, Served, load_served
from vtx.serve.requests import (PARSE_FIELDS, TRANSLATE_FIELDS, Job, Limits, RequestError,
                                check_body, check_field, job_of, parse_job, read_json_object)
from vtx.serve.spec import Route, swagger
from vtx.serve.suggestions import Suggestions

MAX_BODY_BYTES = 1 << 20  # aiohttp answers 413 above it
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
SWITCH_INTERVAL_S = 0.001  # sys.setswitchinterval while serving (`serve`)
API_KEY = dataclasses.replace(libre.API_KEY, where="json")  # /v1's, from its JSON only
V1_TRANSLATE = Route("POST", "/v1/translate", "Translate lines with vtx's search settings",
                     "{translations: [{id, source, hypotheses}]}",
                     (*TRANSLATE_FIELDS, *ROUTE_FIELDS, API_KEY))
ROUTES = (
    Route("GET", "/", "A page to try the server", "HTML", produces="text/html"),
    V1_TRANSLATE,
    Route("POST", "/v1/parse", "Parse sentences (a parsing model only)",
          "{trees: [{id, source, tree}]}", (*PARSE_FIELDS, API_KEY)),
    Route("GET", "/v1/info", "The models, settings and limits",
          "{model, vocabulary, settings, limits, pairs}"),
    *libre.ROUTES,
    Route("GET", "/health", "Whether the server is up", "{status: ok}"),
    Route("GET", "/metrics", "Prometheus counters", "Prometheus text", produces="text/plain"),
    Route("GET", "/spec", "This document", "Swagger 2.0"))
# The routes that take a form as well as JSON (as LibreTranslate's do).
FORM_ROUTES = tuple(route.path for route in ROUTES
                    if any(field.where == "form" for field in route.fields))
T = TypeVar("T")
FILE_ROUTE = "/translate_file"  # a multipart form only, of a body up to --max-file-bytes
FILE_THREADS = 2  # threads reading and writing files, apart from the requests' checks


@dataclasses.dataclass(frozen=True)
class Transport:
    """What a connection may take of the server (`vtx serve`'s flags of the same names)."""

    read_timeout_s: float = 15.0  # to send a request's headers, and then its body (408)
    # open at once; one more closes the longest idle (none: it is answered 503 and closed)
    max_connections: int = 256
    drain_s: float = 30.0  # a stop answers the requests in flight for this long at most
    allowed_hosts: tuple[str, ...] = ()  # Host names served beside loopback names and IPs
    # Origins (`access.origin_matches` patterns) whose pages may call every route (CORS)
    cors_origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("read_timeout_s", "drain_s"):
            value = getattr(self, name)
            if not (value == value and 0 < value < float("inf")):
                raise ArgumentError("{" + name + "} must be finite and > 0, got {value}",
                                    value=value)
        if self.max_connections < 1:
            raise ArgumentError("{max_connections} must be >= 1, got {value}",
                                value=self.max_connections)


@dataclasses.dataclass
class Service:
    """What the routes share: the served models by language pair (`vtx.serve.pairs`), the
    counters, the connection limits, who may translate (`Access`), and the LibreTranslate
    routes' detector."""

    pairs: Pairs
    metrics: Metrics
    transport: Transport = Transport()
    access: Access = dataclasses.field(default_factory=Access)
    # POST /detect and source "auto": among the served languages, or all it knows
    detector: Detector = dataclasses.field(default_factory=Detector)
    # where request bodies are read and checked, each client's in its turn
    checks: CheckPool = dataclasses.field(default_factory=CheckPool)
    suggestions: Suggestions | None = None  # where POST /suggest appends; None: it answers 403
    files: FileSettings = FileSettings()  # what /translate_file takes and keeps

    def __post_init__(self) -> None:
        self.file_store = FileStore(self.files)

    def batchers(self) -> list[Batcher]:
        return [served.batcher for served in self.pairs.served]

    def info(self) -> dict:
        """GET /v1/info: every pair's model, vocabulary, settings and limits under "pairs"; the
        first's also at the top (a server of one model says it there only)."""
        pairs = [served.info() for served in self.pairs.served]
        first = pairs[0]
        return {"model": first["model"], "vocabulary": first["vocabulary"],
                "settings": first["settings"],
                "limits": {**first["limits"], **dataclasses.asdict(self.transport),
                           "max_body_bytes": MAX_BODY_BYTES,
                           "max_file_bytes": self.files.max_file_bytes,
                           "file_ttl_s": self.files.ttl_s},
                "pairs": pairs}

    def languages(self) -> list[dict]:
        """GET /languages of LibreTranslate: each language served with the codes it translates
        into, and under "pivots" (where there are some), those reached through a middle
        language: {target: middle}."""
        self.pairs.told()
        languages = []
        for code in self.pairs.languages():
            targets, pivots = self.pairs.targets(code)
            languages.append({"code": code, "name": language_name(code), "targets": targets,
                              **({"pivots": pivots} if pivots else {})})
        return languages


SERVICE = web.AppKey("service", Service)  # the app's Service, as its routes read it


class Connections:
    """The server's connections that are not in a request's handler, and since when: those a
    connection past the cap may take the place of (an idle keep-alive, a client that never
    ends its headers), rather than be refused."""

    def __init__(self):
        self._idle: dict[asyncio.BaseTransport, float] = {}  # transport: time.monotonic()

    def opened(self, transport: asyncio.BaseTransport) -> None:
        self._idle[transport] = time.monotonic()

    def busy(self, transport: asyncio.BaseTransport | None) -> None:
        self._idle.pop(transport, None)

    def idle(self, transport: asyncio.BaseTransport | None) -> None:
        if transport is not None and not transport.is_closing():
            self._idle[transport] = time.monotonic()

    def close_idlest(self, idle_s: float = 1.0) -> bool:
        """Close the connection idle longest, if for `idle_s` seconds at least; whether one
        was closed (the closed ones forgotten)."""
        self._idle = {t: since for t, since in self._idle.items() if not t.is_closing()}
        if not self._idle:
            return False
        transport = min(self._idle, key=self._idle.__getitem__)
        if time.monotonic() - self._idle.pop(transport) < idle_s:
            self._idle[transport] = 0.0  # kept, still the idlest
            return False
        transport.close()
        return True


CONNECTIONS = web.AppKey("connections", Connections)


def _get(answer: Callable[[], web.StreamResponse]):
    """A route's handler whose answer takes nothing of the request."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return answer()

    return handler


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def make_app(service: Service, log: Callable[[str], None] = _stderr) -> web.Application:
    """The aiohttp application of `service`; its batcher starts with the app and stops with it
    (queued jobs searched for the drain's time first). `log` is told each 500's traceback."""
    app = web.Application(middlewares=[_errors(service.metrics, log),
                                       _guard(service.transport, service.files)],
                          client_max_size=MAX_BODY_BYTES)
    app[SERVICE] = service
    app[CONNECTIONS] = Connections()
    page = (Path(__file__).parent / "page.html").read_text(encoding="utf-8")
    spec = swagger(ROUTES, __version__)
    handlers = {
        "/": _get(lambda: web.Response(text=page, content_type="text/html", charset="utf-8")),
        "/health": _get(lambda: web.json_response({"status": "ok"})),
        "/metrics": _get(lambda: web.Response(
            body=service.metrics.text().encode(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})),
        "/v1/info": _get(lambda: web.json_response(service.info())),
        "/v1/translate": _translate, "/v1/parse": _parse,
        "/translate": _libre_translate, "/detect": _libre_detect, "/suggest": _suggest,
        FILE_ROUTE: _translate_file, "/download_file/{name}": _download_file,
        "/languages": _get(lambda: web.json_response(service.languages())),
        "/frontend/settings": _get(lambda: web.json_response(libre.frontend_settings(
            service.pairs, service.access, service.suggestions is not None, service.files))),
        "/spec": _get(lambda: web.json_response(spec))}
    for route in ROUTES:  # each route of the declaration, and no other
        add = app.router.add_get if route.method == "GET" else app.router.add_post
        add(route.path, handlers.pop(route.path))
    if handlers:
        raise ValueError(f"handlers of routes not in ROUTES: {', '.join(handlers)}")
    app[FILE_WORK] = _FileWork(service.files.max_pending)

    async def start(app):
        for batcher in service.batchers():
            batcher.start()

    async def stop_taking(app):
        for batcher in service.batchers():
            batcher.close(service.transport.drain_s)

    async def join(app):
        deadline = time.monotonic() + service.transport.drain_s + 5
        for batcher in service.batchers():
            await asyncio.to_thread(batcher.join, max(0.0, deadline - time.monotonic()))
        service.checks.close()
        app[FILE_WORK].executor.shutdown(wait=False, cancel_futures=True)

    async def cors(request: web.Request, response: web.StreamResponse) -> None:
        origin = request.headers.get("Origin")
        if origin and origin_matches(origin, service.transport.cors_origins):
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers.add("Vary", "Origin")

    app.on_response_prepare.append(cors)
    app.on_startup.append(start)
    app.on_shutdown.append(stop_taking)
    app.on_cleanup.append(join)
    return app


def _errors(metrics: Metrics, log: Callable[[str], None]):
    """Middleware: a `RequestError` or aiohttp's own refusal (404, 405, 413) as one JSON line, a
    bug as a JSON 500, its traceback told to `log`; every reply counted by route and status."""

    @web.middleware
    async def middleware(request: web.Request, handler):
        started = time.monotonic()
        try:
            response = await handler(request)
        except (asyncio.CancelledError, ConnectionError):
            raise
        except Exception as error:
            response = _answer_of(error, request, log)
            _untraced(error)
        return _observed(metrics, request, response, started)

    return middleware


def _answer_of(error: Exception, request: web.Request,
               log: Callable[[str], None]) -> web.Response:
    """The JSON answer of `error`, raised answering `request` (`_errors`); a bug's traceback
    told to `log`. Raises `error` again for an aiohttp answer below 400."""
    if isinstance(error, RequestError):
        if error.status == 500:  # the search failed: its cause is a bug
            _log_bug(log, request, error.__cause__ or error)
        return web.json_response({"error": str(error)}, status=error.status,
                                 headers=error.headers)
    if isinstance(error, web.HTTPNotFound):
        return web.json_response({"error": f"no such route: {request.path[:80]}"}, status=404)
    if isinstance(error, web.HTTPMethodNotAllowed):
        allowed = sorted(error.allowed_methods)
        return web.json_response({"error": f"{request.method} {request.path}: use "
                                           f"{', '.join(allowed)}"},
                                 status=405, headers={"Allow": ",".join(allowed)})
    if isinstance(error, web.HTTPException):  # 413: aiohttp's text says the sizes
        if error.status < 400:
            raise error
        return web.json_response({"error": error.text or error.reason}, status=error.status)
    _log_bug(log, request, error)  # a bug: said, not hidden in a plain-text page
    return web.json_response({"error": f"internal error: {type(error).__name__}"},
                             status=500)


def _observed(metrics: Metrics, request: web.Request, response: web.StreamResponse,
              started: float) -> web.StreamResponse:
    """`response` to `request`, counted by route and status."""
    route = request.match_info.route.resource
    name = route.canonical if route is not None else "other"
    metrics.observe_request(name, response.status, time.monotonic() - started)
    return response


def _untraced(error: BaseException) -> None:
    """Drop the tracebacks of `error` and of the errors it came from: their frames (one that
    caught an error and raised it again holds it) make cycles that would keep a refused
    request's body, parsed, until a full collection of the cycle collector, which then holds
    the interpreter's lock (the event loop's too) for a tenth of a second."""
    chain, seen = [error], set()
    while chain:
        error = chain.pop()
        if error is not None and id(error) not in seen:
            seen.add(id(error))
            error.__traceback__ = None
            chain += [error.__cause__, error.__context__]


def _log_bug(log: Callable[[str], None], request: web.Request, error: BaseException) -> None:
    trace = "".join(traceback.format_exception(error)).rstrip()
    log(f"vtx serve: internal error answering {request.method} {request.path[:80]}:\n{trace}")


def _guard(transport: Transport, files: FileSettings):
    """Middleware: the Host, then the route (404, 405; a CORS preflight of a --cors-origin
    answered), then on a POST the Content-Type and the Origin checked (see the module
    docstring), and the body read within the read timeout (408): up to `MAX_BODY_BYTES`, or
    a file's (`files`) on `FILE_ROUTE`."""

    @web.middleware
    async def middleware(request: web.Request, handler):
        connections = request.app[CONNECTIONS]
        connections.busy(request.transport)
        try:
            return await _guarded(request, handler, transport, files)
        finally:
            connections.idle(request.transport)

    return middleware


async def _guarded(request: web.Request, handler, transport: Transport,
                   files: FileSettings) -> web.StreamResponse:
    """`_guard`'s checks of `request`, then its `handler`'s answer."""
    host = request.host or ""
    name = _host_name(host)
    if not _allowed_host(name, transport.allowed_hosts):
        raise RequestError(f"Host {host[:80]!r} is not this server's: it serves "
                           f"{_served_hosts(transport.allowed_hosts)}; to serve this name "
                           f"too (a reverse proxy's, a Docker service's), start it with "
                           f"--allowed-host {name[:80]}", 421)
    refusal = request.match_info.http_exception  # 404, 405: said before the body
    origin = request.headers.get("Origin")
    cors = origin is not None and origin_matches(origin, transport.cors_origins)
    if cors and request.method == "OPTIONS" and isinstance(refusal, web.HTTPMethodNotAllowed):
        return web.Response(status=204, headers={  # a preflight (Fetch standard, CORS)
            "Access-Control-Allow-Methods": ", ".join(sorted(refusal.allowed_methods)),
            "Access-Control-Allow-Headers": "Authorization, Content-Type",
            "Access-Control-Max-Age": "86400"})
    if refusal is not None:
        raise refusal
    held = contextlib.nullcontext()
    if request.method == "POST" and request.path == FILE_ROUTE:
        if not files.enabled:
            raise RequestError("Files translation are disabled on this server.", 403)
        if request.content_type != "multipart/form-data":
            raise RequestError(f"Content-Type {request.content_type[:80]!r}: send "
                               f"'multipart/form-data'", 415)
        # Its larger body read only while the files held at once are few.
        held = request.app[FILE_WORK].held()
        request = request.clone(client_max_size=files.max_body_bytes)
    elif request.method == "POST":
        forms = request.path in FORM_ROUTES
        # A bodiless POST sends its fields in the query string (as deep-translator does).
        if request.content_type != "application/json" and not (forms and (
                request.content_type in libre.FORM_TYPES or not request.body_exists)):
            also = f" or {' or '.join(map(repr, libre.FORM_TYPES))}" if forms else ""
            raise RequestError(f"Content-Type {request.content_type[:80]!r}: send "
                               f"'application/json'{also}", 415)
    if request.method == "POST" and origin is not None and not (
            cors or _same_origin(origin, host)):
        raise RequestError(f"Origin {origin[:80]!r} is another site's: this server "
                           f"answers POSTs from its own page, --cors-origin pages "
                           f"and clients that are not web pages", 403)
    with held:
        if request.method == "POST":
            try:
                await asyncio.wait_for(request.read(), transport.read_timeout_s)
            except asyncio.TimeoutError:
                raise RequestError(f"the body was not received within "
                                   f"{transport.read_timeout_s:g} s (--read-timeout)",
                                   408, {"Connection": "close"}) from None
        return await handler(request)


def _host_name(host: str) -> str:
    """The name or address of `host` (a Host header: maybe with a port), lower case."""
    if host.startswith("["):  # [IPv6]:port
        name = host[1:host.find("]")] if "]" in host else host
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return name.lower().rstrip(".")


def _served_hosts(allowed: tuple[str, ...]) -> str:
    """The Host names a server of --allowed-host `allowed` serves, as its log and 421 say."""
    if "*" in allowed:
        return "any Host (--allowed-host '*')"
    if not allowed:
        return "loopback names and IP addresses (more by --allowed-host)"
    return f"loopback names, IP addresses and {', '.join(allowed)} (--allowed-host)"


def _allowed_host(name: str, allowed: tuple[str, ...]) -> bool:
    """Whether `name` (of a Host header, `_host_name`) names this server: a loopback name, an IP
    address (no page can rebind those), or one of `allowed` ('*': any)."""
    if "*" in allowed or name in LOOPBACK_NAMES or name.endswith(".localhost") \
            or name in (h.lower().rstrip(".") for h in allowed):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _same_origin(origin: str, host: str) -> bool:
    """Whether a request's `Origin` is the server's own page's (http://HOST)."""
    return origin.lower() in (f"http://{host}".lower(), f"https://{host}".lower())


async def _search(served: Served, job, client: str) -> list:
    """The hypotheses of `job`'s lines from `served`'s batcher, in `client`'s share of its
    turns; the job dropped if the client goes or its deadline (--request-timeout) passes
    (504)."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def resolve(result) -> None:
        if future.done():
            return
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)

    def done(result) -> None:
        try:
            loop.call_soon_threadsafe(resolve, result)
        except RuntimeError:  # the loop is closed: nobody waits
            pass

    pending = served.batcher.submit(job, done, client)
    timeout = served.limits.request_timeout_s
    try:
        return await asyncio.wait_for(future, timeout)
    except asyncio.TimeoutError:
        served.batcher.cancel(pending)
        raise RequestError(f"not answered within {timeout:g} s (--request-timeout): the "
                           f"search was stopped; send fewer lines or a smaller beam", 504) \
            from None
    except asyncio.CancelledError:
        served.batcher.cancel(pending)
        raise
    except ArgumentError as error:  # a setting the search refuses for one of its lines
        fields = {"prefix_path": "field 'prefix'", "constraints_path": "field 'constraints'"}
        raise RequestError(error.message(lambda argument: fields.get(argument, repr(argument)))
                           ) from None
    except RequestError:
        raise
    except Exception as error:
        raise RequestError(f"the search failed: {str(error)[:240]}", 500) from error


async def _translate(request: web.Request) -> web.Response:
    service: Service = request.app[SERVICE]
    body = await request.read()

    def check() -> tuple[str, Served, Job]:
        data = read_json_object(body)
        client = _admit(request, data.pop("api_key", None), data.get("text"))
        served = service.pairs.find_fields(data)
        # Its routing fields, taken out, listed among the fields an unknown one is told.
        data = check_body(data, V1_TRANSLATE.fields, served.limits)
        return client, served, job_of(data, served.model())

    client, served, job = await _checked(request, check)
    results = await _search(served, job, client)
    return await asyncio.to_thread(_translations, served, job, results)


def _translations(served: Served, job: Job, results: list) -> web.Response:
    """The reply of /v1/translate: each line's record as `vtx translate --output-format jsonl`
    writes it."""
    records = [line_record(served.translator, index, line, hypotheses)
               for index, (line, hypotheses) in enumerate(zip(job.lines, results))]
    if job.options.alignment_layer is not None:  # what the alignments' source indices count
        vocab = served.translator.vocab
        for record in records:
            record["source_tokens"] = vocab.pieces(vocab.encode_source(record["source"]))
    return _json({"translations": records})


async def _libre_translate(request: web.Request) -> web.Response:
    service: Service = request.app[SERVICE]
    service.pairs.told()
    body = await request.read()

    def check() -> tuple[str, libre.Translation]:
        fields = _libre_fields(request, body)
        client = _admit(request, fields.get("api_key"), fields.get("q"))
        return client, libre.translation(fields, service.pairs, service.detector)

    client, translation = await _checked(request, check)
    results = await _search_route(request, translation, client)
    return await asyncio.to_thread(lambda: _json(libre.answer(translation, results)))


async def _search_route(request: web.Request, route: libre.Translation | libre.FileTranslation,
                        client: str) -> list:
    """Each line's hypotheses of a LibreTranslate request's `route`: its job searched by its
    pair, then, through a middle language, the best of each searched by the pivot's second
    pair (`libre.pivot_job`, checked in `client`'s turn)."""
    if route.job is None:
        return []
    results = await _search(route.served, route.job, client)
    if route.then is None:
        return results
    job = await _checked(request, lambda: libre.pivot_job(route, results))
    return await _search(route.then, job, client)


def _address(request: web.Request) -> str:
    """The address `request` counts as (`Access.address_of`)."""
    return request.app[SERVICE].access.address_of(
        request.remote or "", request.headers.getall("X-Forwarded-For", []))


async def _checked(request: web.Request, check: Callable[[], T]) -> T:
    """`check()` (what reads and checks `request`'s body) in its client's turn of the
    server's check pool."""
    return await request.app[SERVICE].checks.run(_address(request), check)


def _admit(request: web.Request, key, texts, charged: bool = True) -> str:
    """Let a request of `texts` (its field 'q' or 'text', as sent) through the server's api
    keys and limits (`Access.admit`; not `charged`: its key only): its key is `key` (its field
    'api_key', a string), else an `Authorization: Bearer KEY` header's. Returns the client it
    counts as (its known key, or its address).

    Raises:
        RequestError: a key that is no string (400), or see `Access.admit`.
    """
    if key is not None:
        check_field(API_KEY.name, key, API_KEY.kind)
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if not key and scheme.lower() == "bearer":
        key = token.strip()
    return request.app[SERVICE].access.admit(key or None, _address(request),
                                             request.headers.get("Origin"), texts, charged)


def _libre_fields(request: web.Request, body: bytes) -> libre.Fields:
    """The fields of a LibreTranslate request whose body was read (`body`)."""
    return libre.read_fields(body, request.headers.get("Content-Type", ""),
                             request.rel_url.raw_query_string)


async def _libre_detect(request: web.Request) -> web.Response:
    service: Service = request.app[SERVICE]
    body = await request.read()

    def detect() -> web.Response:
        fields = _libre_fields(request, body)
        _admit(request, fields.get("api_key"), fields.get("q"))
        return _json(libre.detect_text(fields, service.detector, service.pairs.first.limits))

    return await _checked(request, detect)


async def _suggest(request: web.Request) -> web.Response:
    service: Service = request.app[SERVICE]
    if service.suggestions is None:  # LibreTranslate's words
        raise RequestError("Suggestions are disabled on this server.", 403)
    body = await request.read()

    def suggest() -> web.Response:
        fields = _libre_fields(request, body)
        _admit(request, fields.get("api_key"), fields.get("q"))
        service.suggestions.add(libre.suggestion(fields, service.pairs))
        return _json({"success": True})

    return await _checked(request, suggest)


class _FileWork:
    """The threads that read and write /translate_file's files (so that a large file keeps
    neither the event loop nor the requests' checks waiting), and how many files the server
    holds at once, from their bodies' first byte: `max_pending`, one more gets 503."""

    def __init__(self, max_pending: int):
        self.executor = concurrent.futures.ThreadPoolExecutor(FILE_THREADS, "vtx-files")
        self.max_pending, self.pending = max_pending, 0

    async def run(self, work: Callable):
        return await asyncio.get_running_loop().run_in_executor(self.executor, work)

    @contextlib.contextmanager
    def held(self):
        """Count a file held while in the block (on the event loop: no lock needed).

        Raises:
            RequestError: 503 with Retry-After, `max_pending` files held already.
        """
        if self.pending >= self.max_pending:
            raise RequestError(f"{self.pending} files are being translated, the server's most "
                               f"at once; retry", 503, {"Retry-After": "1"})
        self.pending += 1
        try:
            yield
        finally:
            self.pending -= 1


FILE_WORK = web.AppKey("file_work", _FileWork)


async def _translate_file(request: web.Request) -> web.Response:
    service: Service = request.app[SERVICE]
    service.pairs.told()
    work = request.app[FILE_WORK]  # the guard holds the file's place in it
    body = await request.read()

    def check() -> tuple[str, libre.FileTranslation]:
        fields, upload = libre.read_upload(body, request.headers.get("Content-Type", ""),
                                           request.rel_url.raw_query_string)
        # its key before it is read, its texts after
        client = _admit(request, fields.get("api_key"), None, charged=False)
        upload = libre.upload_of(fields, upload)
        return client, libre.file_translation(
            fields, upload, service.files.max_file_bytes, service.pairs, service.detector,
            lambda texts: _admit(request, fields.get("api_key"), texts))

    client, translation = await work.run(check)
    results = await _search_route(request, translation, client)
    data = await work.run(lambda: libre.translated_file(translation, results))
    name = service.file_store.put(TranslatedFile(data, translation.filename,
                                                 translation.content_type))
    quoted = urllib.parse.quote(translation.filename, safe="")
    origin = service.access.origin_of(
        request.remote or "", request.headers.getall("X-Forwarded-Proto", []),
        request.headers.getall("X-Forwarded-Host", []), request.scheme, request.host)
    return _json({"translatedFileUrl": f"{origin}/download_file/{name}.{quoted}"})


async def _download_file(request: web.Request) -> web.Response:
    """GET /download_file/<name>: a translated file, named by its token (and, after a '.',
    the file's name, as LibreTranslate's URLs are)."""
    service: Service = request.app[SERVICE]
    if not service.files.enabled:
        raise RequestError("Files translation are disabled on this server.", 400)
    file = service.file_store.get(request.match_info["name"].partition(".")[0])
    if file is None:
        raise RequestError(f"no translated file {request.match_info['name'][:80]!r}: it has "
                           f"expired (--file-ttl {service.files.ttl_s:g} s) or never was", 404)
    ascii_name = file.filename.encode("ascii", "replace").decode().replace("?", "_") \
        .replace('"', "_")
    return web.Response(body=file.data, headers={
        "Content-Type": file.content_type,
        "Content-Disposition": f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''"
                               f"{urllib.parse.quote(file.filename, safe='')}"})


async def _parse(request: web.Request) -> web.Response:
    from vtx.inference.parse import sentence_words

    service: Service = request.app[SERVICE]
    served = service.pairs.parser()
    if served is None:
        raise RequestError("POST /v1/parse: this server's model is not a parser (its "
                           "vocabulary holds no tree brackets); use /v1/translate", 404)
    body = await request.read()

    def prepare():
        data = read_json_object(body)
        client = _admit(request, data.pop("api_key", None), data.get("text"))
        job = parse_job(data, served.model())
        words = [sentence_words(line) for line in job.lines]
        return client, dataclasses.replace(job, lines=[" ".join(w) for w in words]), words

    client, job, words = await _checked(request, prepare)
    results = await _search(served, job, client)
    return await asyncio.to_thread(_trees, job, words, results)


def _trees(job, words: list[list[str]], results: list) -> web.Response:
    """The reply of /v1/parse: each sentence's best tree, its words in the slots."""
    from vtx.parsing.linearize import delinearize

    trees = []
    for index, (line, sentence, best) in enumerate(zip(job.lines, words, results)):
        tree = delinearize(best[0].text.split() if best else [], sentence)[0] \
            if sentence else None
        trees.append({"id": index, "source": line,
                      "tree": tree.to_string() if tree is not None else None})
    return _json({"trees": trees})


def _json(data: dict | list) -> web.Response:
    return web.Response(text=json.dumps(data, ensure_ascii=False),
                        content_type="application/json")


def build_service(models: dict[LanguagePair | None, Sequence[str | Path]],
                  options: DecodeOptions, limits: Limits, alignment_layer: int = -1,
                  ema: bool = False, warn: Callable[[str], None] = lambda message: None,
                  glossary_path: str | Path | None = None, transport: Transport = Transport(),
                  access: Access | None = None,
                  log: Callable[[str], None] = lambda message: None,
                  named: Callable[[LanguagePair | None], str] = lambda pair: "--checkpoint {}",
                  precision: DecodingPrecision = DecodingPrecision(),
                  suggestions: Suggestions | None = None,
                  files: FileSettings = FileSettings(), pivot: bool = True) -> Service:
    """Load each language pair's model (or ensemble) of `models` (pair -> checkpoints; one
    entry of pair None: a model whose languages were not told) and make their service; with
    `glossary_path`, a glossary for every request of a server of one pair
    (`vtx.inference.glossary`); `access`: the api keys and rate limit;
    `log` is told what each pair loaded; `named(pair)`: how a refusal names one of the pair's
    checkpoints (a `str.format` template of its flag and value); `precision`: the dtype policy
    and quantization the models are built in; `suggestions`: where POST /suggest appends;
    `files`: what /translate_file takes and keeps; `pivot`: whether the LibreTranslate routes
    translate through a middle language two pairs chain (`Pairs.chain`).

    Raises:
        OSError, ValueError: an unreadable checkpoint or glossary (named), or a pair's
            checkpoints of different vocabularies; a parsing model among pairs, or a glossary
            for several; limits over a model (a line limit past its positions), or default beam
            or nbest over the limit (ArgumentError).
    """
    if max(options.beam, options.nbest) > limits.max_beam:
        raise ArgumentError("{beam} {beam_value} and {nbest} {nbest_value}, the defaults, must be "
                            "at most {max_beam} {limit}", beam_value=options.beam,
                            nbest_value=options.nbest, limit=limits.max_beam)
    if glossary_path and len(models) > 1:
        raise ValueError(f"--glossary {glossary_path}: a glossary is of one language pair, and "
                         f"this server holds {len(models)}; give a request's own 'glossary'")
    glossary = Glossary.read(glossary_path) if glossary_path else None
    metrics = Metrics()
    served = []
    for pair, paths in models.items():
        served.append(load_served(paths, pair, options, limits, metrics, alignment_layer, ema,
                                  warn, glossary, named(pair), log, precision))
        if served[-1].parser and len(models) > 1:
            raise ValueError(f"{named(pair).format(paths[0])}: a parsing model (its vocabulary "
                             f"holds tree brackets) is served alone, not beside language pairs")
    metrics.queue_lines = lambda: sum(s.batcher.queued_lines() for s in served)
    metrics.search_traces = lambda: sum(s.batcher.translators.traces() for s in served)
    if glossary is not None:
        glossary.check_targets(lambda text: len(served[0].translator.vocab.encode(text)),
                               str(glossary_path))
    pairs = Pairs(served, pivot)
    metrics.by_pair = pairs.counts
    return Service(pairs, metrics, transport, access or Access(),
                   Detector(tuple(pairs.languages())), suggestions=suggestions, files=files)


def serve(service: Service, host: str = "127.0.0.1", port: int = 8080,
          log: Callable[[str], None] = print) -> None:
    """Serve until SIGTERM or SIGINT: then stop listening, answer the requests in flight (and
    search the jobs queued) for the drain's time at most, and return; a second signal ends the
    process at once. `log` is told the address (the port bound when `port` is 0)."""
    # The models, TensorFlow's and Keras's objects are millions of Python objects that every
    # full collection of the cycle collector would walk, holding the interpreter's lock (the
    # event loop's too) for a large part of a second: kept out of the collections from now.
    gc.freeze()
    # The event loop shares the interpreter's lock with the search and check threads: each
    # holds it up to the switch interval when the loop asks (5 ms by default, so that with a
    # few threads running a request to /health waits tens of milliseconds at each step).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    asyncio.run(_serve(make_app(service, log), service.transport, host, port, log))


class _HalfOpen(RequestHandler):
    """aiohttp's connection, kept open for the answer when the client closes its sending side
    after its request (`shutdown(SHUT_WR)`, as `nc -N` does)."""

    __slots__ = ()
    connections: Connections | None = None  # told of each connection made (`_Site`)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.connections is not None:
            self.connections.opened(transport)

    def eof_received(self) -> bool:
        # Kept open (True) unless idle: waiting for a request with none received (aiohttp's
        # `_waiter` pending), which closes at once.
        waiter = getattr(self, "_waiter", None)
        return not (waiter is not None and not waiter.done() and not self._messages)


class _Site(web.BaseSite):
    """A TCP site whose connections past `Transport.max_connections` take the place of the
    longest idle (`Connections`), or are answered 503 and closed when none has been idle for a
    second; they are kept open after the client's end of sending (`_HalfOpen`)."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, transport: Transport):
        super().__init__(runner)
        self._host, self._port, self._transport = host, port, transport

    @property
    def name(self) -> str:
        return f"http://{_host(self._host)}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        connections = self._runner.app[CONNECTIONS]
        handler_class = type("_SiteHandler", (_HalfOpen,),
                             {"__slots__": (), "connections": connections})

        def connection():
            if len(server.connections) >= self._transport.max_connections \
                    and not connections.close_idlest():
                return _Refused()
            handler = server()
            handler.__class__ = handler_class
            return handler

        self._server = await asyncio.get_running_loop().create_server(
            connection, self._host, self._port, reuse_address=True)


class _Refused(asyncio.Protocol):
    """A connection over the cap: answered 503, then closed once the client has closed its side
    or a second has passed (what it sends is read and dropped, so that closing resets
    nothing)."""

    def connection_made(self, transport: asyncio.Transport) -> None:
        body = b'{"error": "too many open connections (--max-connections); retry"}'
        transport.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json"
                        b"\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: "
                        + str(len(body)).encode() + b"\r\n\r\n" + body)
        transport.write_eof()
        asyncio.get_running_loop().call_later(1.0, transport.close)

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> None:  # None: the transport closes
        return None


async def _serve(app: web.Application, transport: Transport, host: str, port: int,
                 log: Callable[[str], None]) -> None:
    # keepalive_timeout: a connection that has not sent a whole request's headers by then is
    # closed (aiohttp counts it from the connection's start, and after each answer).
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=transport.drain_s,
                           access_log=None, keepalive_timeout=transport.read_timeout_s)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        if stop.is_set():  # the second: at once
            log(f"vtx serve: {signal.Signals(signum).name} again: exiting now")
            os._exit(128 + signum)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        site = _Site(runner, host, port, transport)
        await site.start()
        bound = site._server.sockets[0].getsockname()
        log(f"vtx serve: listening on http://{_host(bound[0])}:{bound[1]}")
        log(f"vtx serve: Host names served: {_served_hosts(transport.allowed_hosts)}")
        await stop.wait()
        log(f"vtx serve: stopping: no new connections; answering the requests in flight "
            f"for {transport.drain_s:g} s at most (a second signal exits at once)")
        await runner.cleanup()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    log("vtx serve: stopped")


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
