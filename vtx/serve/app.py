"""The HTTP server of `vtx serve`: routes, error replies, and the run loop with its stop.

Built on aiohttp: one package gives the asyncio server (graceful stop: listening sockets closed,
requests in flight finished) and the client the load benchmark and the tests use; the search runs
on the batcher's thread, so the event loop only reads, checks and answers requests.

GET / is a page to try it (vtx/serve/page.html: one file, no build step, nothing fetched from
elsewhere): the translations with their n-best lists and scores and an alignment heatmap, or a
parser's trees drawn in SVG.

API (JSON; every refusal is `{"error": "one line"}` with a 4xx, or 503 and Retry-After):
    POST /v1/translate  {"text": [lines], "beam", "nbest", "lenpen", "sampling", "sampling_topk",
                        "sampling_topp", "temperature", "seed", "prefix": [per line],
                        "constraints": [[phrases] per line], "alignment": bool,
                        "glossary": [[source term, target term], ...]}
                        -> {"translations": [per line the record of `vtx translate
                        --output-format jsonl`: id, source, hypotheses; with alignment,
                        also source_tokens, the pieces its pairs' source indices count]}
    POST /v1/parse      {"text": [tokenized sentences], "beam", "lenpen"}
                        -> {"trees": [{"id", "source", "tree"}]}  (a parsing model only)
    GET /v1/info        the model, vocabulary, default settings and limits
    GET /health         {"status": "ok"}
    GET /metrics        Prometheus text
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import time
from pathlib import Path
from typing import Callable, Sequence

from aiohttp import web

from vtx.errors import ArgumentError
from vtx.inference.decoding import DecodeOptions
from vtx.inference.glossary import Glossary, translator_constraints
from vtx.inference.translate import line_record
from vtx.inference.translator import Translator
from vtx.serve.batcher import Batcher, Translators
from vtx.serve.metrics import Metrics
from vtx.serve.requests import Limits, RequestError, parse_job, translate_job

# How long a stop waits for the requests in flight (a wide beam's search of a full batch on a
# CPU can take minutes).
SHUTDOWN_TIMEOUT_S = 300.0
MAX_BODY_BYTES = 1 << 20  # aiohttp answers 413 above it


@dataclasses.dataclass
class Service:
    """What the routes share: the first model's Translator (vocabulary, defaults), the batcher,
    the limits, and what /v1/info says."""

    translator: Translator
    batcher: Batcher
    limits: Limits
    metrics: Metrics
    alignment_layer: int  # the decoder layer a request's "alignment" reads
    checkpoints: list[str]  # file names only: a reply names no server path
    parser: bool  # the vocabulary holds tree brackets: /v1/parse answers
    glossary: Glossary | None = None  # every request's, under the request's own pairs

    def count_pieces(self, line: str) -> int:
        return len(self.translator.vocab.encode(line))

    def constrain(self, glossary: Glossary, lines: list[str],
                  given: list[list[str]] | None) -> list[list[str]]:
        """Each line's phrases with `glossary`'s terms, as `vtx translate` of the lines."""
        return translator_constraints(self.translator, glossary, lines, given,
                                      range(len(lines)))

    def info(self) -> dict:
        options = self.translator.options
        settings = {name: getattr(options, name) for name in (
            "beam", "nbest", "lenpen", "lenpen_formula", "max_len_a", "max_len_b", "stop",
            "max_tokens", "jit_compile")}
        return {"model": {"checkpoints": self.checkpoints, "ensemble": len(self.checkpoints),
                          "parser": self.parser, "config": self.translator.model.config.to_dict()},
                "vocabulary": {"size": self.translator.vocab.size},
                "settings": {**settings, "alignment_layer": self.alignment_layer},
                "limits": dataclasses.asdict(self.limits)}


def make_app(service: Service) -> web.Application:
    """The aiohttp application of `service`; its batcher starts with the app and stops with it
    (queued jobs searched first)."""
    app = web.Application(middlewares=[_errors(service.metrics)], client_max_size=MAX_BODY_BYTES)
    app["service"] = service
    page = (Path(__file__).parent / "page.html").read_text(encoding="utf-8")
    app.router.add_get("/", lambda request: web.Response(text=page, content_type="text/html",
                                                         charset="utf-8"))
    app.router.add_get("/health", lambda request: web.json_response({"status": "ok"}))
    app.router.add_get("/metrics", lambda request: web.Response(
        body=service.metrics.text().encode(),
        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}))
    app.router.add_get("/v1/info", lambda request: web.json_response(service.info()))
    app.router.add_post("/v1/translate", _translate)
    app.router.add_post("/v1/parse", _parse)

    async def start(app):
        service.batcher.start()

    async def stop_taking(app):
        service.batcher.close()

    async def join(app):
        await asyncio.to_thread(service.batcher.join)

    app.on_startup.append(start)
    app.on_shutdown.append(stop_taking)
    app.on_cleanup.append(join)
    return app


def _errors(metrics: Metrics):
    """Middleware: a `RequestError` or aiohttp's own refusal (404, 405, 413) as one JSON line;
    every reply counted by route and status."""

    @web.middleware
    async def middleware(request: web.Request, handler):
        started = time.monotonic()
        try:
            response = await handler(request)
        except RequestError as error:
            response = web.json_response({"error": str(error)}, status=error.status,
                                         headers=error.headers)
        except web.HTTPNotFound:
            response = web.json_response({"error": f"no such route: {request.path}"},
                                         status=404)
        except web.HTTPMethodNotAllowed as error:
            response = web.json_response({"error": f"{request.method} {request.path}: use "
                                                   f"{', '.join(sorted(error.allowed_methods))}"},
                                         status=405, headers={"Allow": ",".join(
                                             sorted(error.allowed_methods))})
        except web.HTTPException as error:  # 413: aiohttp's text says the sizes
            if error.status < 400:
                raise
            response = web.json_response({"error": error.text or error.reason},
                                         status=error.status)
        route = request.match_info.route.resource
        name = route.canonical if route is not None else "other"
        metrics.observe_request(name, response.status, time.monotonic() - started)
        return response

    return middleware


async def _search(request: web.Request, job) -> list:
    """The hypotheses of `job`'s lines from the batcher; the job dropped if the client goes."""
    service: Service = request.app["service"]
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def resolve(result) -> None:
        if future.done():
            return
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)

    pending = service.batcher.submit(job, lambda result: loop.call_soon_threadsafe(
        resolve, result))
    try:
        return await future
    except asyncio.CancelledError:
        service.batcher.cancel(pending)
        raise
    except ArgumentError as error:  # a prefix too long for its line's output
        fields = {"prefix_path": "field 'prefix'", "constraints_path": "field 'constraints'"}
        raise RequestError(error.message(lambda argument: fields.get(argument, repr(argument)))
                           ) from None
    except Exception as error:
        raise RequestError(f"the search failed: {error}", 500) from None


async def _translate(request: web.Request) -> web.Response:
    service: Service = request.app["service"]
    job = translate_job(await request.read(), service.translator.options, service.limits,
                        service.alignment_layer, service.count_pieces, service.glossary,
                        service.constrain)
    results = await _search(request, job)
    records = [line_record(service.translator, index, line, hypotheses)
               for index, (line, hypotheses) in enumerate(zip(job.lines, results))]
    if job.options.alignment_layer is not None:  # what the alignments' source indices count
        vocab = service.translator.vocab
        for record in records:
            record["source_tokens"] = vocab.pieces(vocab.encode(record["source"]))
    return _json({"translations": records})


async def _parse(request: web.Request) -> web.Response:
    from vtx.inference.parse import sentence_words
    from vtx.parsing.linearize import delinearize

    service: Service = request.app["service"]
    if not service.parser:
        raise RequestError("POST /v1/parse: this server's model is not a parser (its "
                           "vocabulary holds no tree brackets); use /v1/translate", 404)
    job = parse_job(await request.read(), service.translator.options, service.limits,
                    service.count_pieces)
    words = [sentence_words(line) for line in job.lines]
    job = dataclasses.replace(job, lines=[" ".join(w) for w in words])
    results = await _search(request, job)
    trees = []
    for index, (line, sentence, best) in enumerate(zip(job.lines, words, results)):
        tree = delinearize(best[0].text.split() if best else [], sentence)[0] \
            if sentence else None
        trees.append({"id": index, "source": line,
                      "tree": tree.to_string() if tree is not None else None})
    return _json({"trees": trees})


def _json(data: dict) -> web.Response:
    return web.Response(text=json.dumps(data, ensure_ascii=False),
                        content_type="application/json")


def build_service(checkpoints: Sequence[str | Path], options: DecodeOptions, limits: Limits,
                  alignment_layer: int = -1, ema: bool = False,
                  warn: Callable[[str], None] = lambda message: None,
                  glossary_path: str | Path | None = None) -> Service:
    """Load the model (or ensemble) of `checkpoints` and make its service; with
    `glossary_path`, a glossary for every request (`vtx.inference.glossary`).

    Raises:
        OSError, ValueError: an unreadable checkpoint or glossary (named), or checkpoints of
            different vocabularies; limits over the model (a line limit past its positions), or
            default beam or nbest over the limit (ArgumentError).
    """
    from vtx.inference.loading import load_models, resolve_checkpoint
    from vtx.parsing.linearize import bracket_pairs

    if max(options.beam, options.nbest) > limits.max_beam:
        raise ArgumentError("{beam} {beam_value} and {nbest} {nbest_value}, the defaults, must be "
                            "at most {max_beam} {limit}", beam_value=options.beam,
                            nbest_value=options.nbest, limit=limits.max_beam)
    paths = [resolve_checkpoint(path) for path in checkpoints]
    glossary = Glossary.read(glossary_path) if glossary_path else None
    models, vocab = load_models(paths, ema)
    # Positional scores as every request's (the fields of translate's jsonl).
    translator = Translator(models, vocab, dataclasses.replace(options, positional_scores=True),
                            warn)
    translators = Translators(translator)
    # A layer the model lacks is refused now, not at a request's search.
    translators.get(dataclasses.replace(translator.options, alignment_layer=alignment_layer))
    if limits.max_line_tokens is None:
        limits = dataclasses.replace(limits, max_line_tokens=translator.max_positions)
    elif limits.max_line_tokens > translator.max_positions:
        raise ArgumentError("{max_line_tokens} {value} is over the model's {positions} "
                            "positions", value=limits.max_line_tokens,
                            positions=translator.max_positions)
    metrics = Metrics()
    batcher = Batcher(translators, options.max_tokens, limits.batch_wait_ms / 1000,
                      limits.max_queue, metrics)
    metrics.queue_lines = batcher.queued_lines
    if glossary is not None:
        glossary.check_targets(lambda text: len(vocab.encode(text)), str(glossary_path))
    parser = bool(bracket_pairs(vocab.pieces(range(vocab.size))))
    return Service(translator, batcher, limits, metrics, alignment_layer,
                   [path.name for path in paths], parser, glossary)


def serve(service: Service, host: str = "127.0.0.1", port: int = 8080,
          log: Callable[[str], None] = print) -> None:
    """Serve until SIGTERM or SIGINT: then stop listening, finish the requests in flight (and
    the jobs queued), and return. `log` is told the address (the port bound when `port` is 0)."""
    asyncio.run(_serve(make_app(service), host, port, log))


async def _serve(app: web.Application, host: str, port: int, log: Callable[[str], None]) -> None:
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=SHUTDOWN_TIMEOUT_S,
                           access_log=None)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await web.TCPSite(runner, host, port).start()
        bound = runner.addresses[0]
        log(f"vtx serve: listening on http://{_host(bound[0])}:{bound[1]}")
        await stop.wait()
        log("vtx serve: stopping: no new connections; finishing the requests in flight")
    finally:
        await runner.cleanup()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    log("vtx serve: stopped")


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
