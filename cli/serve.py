"""`vtx serve`: translations (and parses) over HTTP, concurrent requests batched together."""

import os
from pathlib import Path

import click
from click.core import ParameterSource

from vtx.inference.decoding import TRANSLATION
from vtx_cli.options import (JIT_HELP, SEARCH_FLAGS, FiniteFloat, announce_decoding,
                             ema_option, library_error, precision_options, search_options,
                             TensorFlowCommand)

FLAGS = {**SEARCH_FLAGS, "max_beam": "--max-beam", "max_lines": "--max-lines",
         "max_line_tokens": "--max-line-tokens", "max_queue": "--max-queue",
         "batch_wait_ms": "--batch-wait-ms", "search_threads": "--search-threads",
         "alignment_layer": "--alignment-layer",
         "glossary_path": "--glossary", "max_line_chars": "--max-line-chars",
         "max_constraints": "--max-constraints", "max_glossary_pairs": "--max-glossary-pairs",
         "max_term_chars": "--max-term-chars", "max_html_tags": "--max-html-tags",
         "max_request_cost": "--max-request-cost",
         "max_queue_cost": "--max-queue-cost", "request_timeout_s": "--request-timeout",
         "read_timeout_s": "--read-timeout", "max_connections": "--max-connections",
         "drain_s": "--drain-seconds", "allowed_hosts": "--allowed-host",
         "source_lang": "--source-lang", "target_lang": "--target-lang",
         "max_file_bytes": "--max-file-bytes", "ttl_s": "--file-ttl"}


def _pair_models(ctx, param, values: tuple[str, ...]) -> dict:
    """Click callback of --model: each `SOURCE-TARGET=PATH` read, a pair's paths in order (a
    pair given twice or more: an ensemble)."""
    from vtx.errors import ArgumentError
    from vtx.serve.language import pair_of

    models: dict = {}
    for value in values:
        name, equals, path = value.partition("=")
        if not equals or not name or not path:
            raise click.BadParameter(f"{value!r}: give PAIR=PATH, e.g. en-de=run/", param=param)
        try:
            pair = pair_of(name)
        except ArgumentError as error:
            said = error.message(lambda argument: "the " + argument.split("_")[0])
            raise click.BadParameter(f"{value!r}: {said}", param=param) from None
        if not Path(path).exists():
            raise click.BadParameter(f"{value!r}: {path} does not exist", param=param)
        same = next((p for p in models if (p.source.lower(), p.target.lower())
                     == (pair.source.lower(), pair.target.lower())), pair)
        models.setdefault(same, []).append(path)
    return models


def _suggestions(ctx, param, path: str | None):
    """Click callback of --suggestions: the file opened for appending (None: no flag)."""
    from vtx.serve.suggestions import Suggestions

    if path is None:
        return None
    try:
        return Suggestions(path)
    except OSError as error:
        raise click.BadParameter(f"{path!r}: cannot append to it ({error.strerror})",
                                 param=param) from None


ENV_PREFIX = "VTX_SERVE_"


def env_variable(option: click.Option) -> str:
    """The environment variable of a `vtx serve` flag: --max-lines -> VTX_SERVE_MAX_LINES."""
    flag = max(option.opts, key=len)
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


class ServeCommand(TensorFlowCommand):
    """`vtx serve`, each of whose flags may also be set in the environment (`env_variable`), as
    LibreTranslate's LT_ variables, for compose files and service units: a flag on the command
    line wins; a value refused names its variable."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, click.Option) and not param.hidden:
                param.envvar = env_variable(param)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.BadParameter as error:
            param = error.param
            if param is not None and param.name is not None and isinstance(param.envvar, str) \
                    and ctx.get_parameter_source(param.name) is ParameterSource.ENVIRONMENT:
                value = os.environ.get(param.envvar, "")
                error.message = f"{error.message} (from {param.envvar}={value[:200]!r})"
            raise


@click.command(cls=ServeCommand, epilog="Every flag may also be set in the environment: "
               "VTX_SERVE_ and its name, e.g. VTX_SERVE_MAX_LINES=16 for --max-lines, "
               "VTX_SERVE_MODEL='en-de=a.npz de-en=b.npz' for two --model (a repeated flag's "
               "values apart by spaces), VTX_SERVE_JIT=1; the command line wins.")
@click.option("--checkpoint", multiple=True, type=click.Path(exists=True),
              help="A checkpoint file, or a `vtx train` save dir (its newest checkpoint); "
                   "repeated: an ensemble, the mean of the models' probabilities. One model "
                   "(its languages: --source-lang, --target-lang); --model for several pairs.")
@click.option("--model", "pair_models", multiple=True, metavar="PAIR=PATH",
              callback=_pair_models,
              help="A language pair and its checkpoint (file or save dir), e.g. "
                   "en-de=runs/en-de; repeat for more pairs, and a pair for an ensemble "
                   "(en-de=A --model en-de=B). Codes holding a '-' are joined by ':' "
                   "(pt-BR:en=C). Requests choose by source and target.")
@ema_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (loopback: this machine only; 0.0.0.0: every "
                   "interface).")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8080, show_default=True,
              help="Port to listen on (0: a free one, said in the first log line).")
@search_options(TRANSLATION)
@click.option("--nbest", type=click.IntRange(min=1), default=1, show_default=True,
              help="Hypotheses a line gets when a request does not say.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=TRANSLATION.max_tokens,
              show_default=True,
              help="Source tokens searched together at most, from any number of requests.")
@click.option("--batch-wait-ms", type=FiniteFloat(min=0), default=5.0, show_default=True,
              help="How long a request's lines wait for others to share their batch.")
@click.option("--search-threads", type=click.IntRange(min=1, max=16), default=2,
              show_default=True,
              help="Batches searched at once, each operation on its share of the cores.")
@click.option("--max-beam", type=click.IntRange(min=1), default=16, show_default=True,
              help="The largest beam (and nbest, or samples) a request may ask for.")
@click.option("--max-lines", type=click.IntRange(min=1), default=64, show_default=True,
              help="Lines a request may hold.")
@click.option("--max-line-tokens", type=click.IntRange(min=1), default=None,
              help="Source pieces a line may hold.  [default: the model's positions]")
@click.option("--max-line-chars", type=click.IntRange(min=1), default=10_000,
              show_default=True,
              help="Characters a line (and a prefix or a constraint phrase) may hold.")
@click.option("--max-constraints", type=click.IntRange(min=1), default=32, show_default=True,
              help="Constraint phrases a line may get, given and from glossaries together.")
@click.option("--max-glossary-pairs", type=click.IntRange(min=1), default=1000,
              show_default=True, help="Pairs a request's own glossary may hold.")
@click.option("--max-term-chars", type=click.IntRange(min=1), default=256, show_default=True,
              help="Characters a request's glossary term may hold.")
@click.option("--max-html-tags", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Markup ('<' characters) a LibreTranslate request's html texts may hold "
                   "together: what bounds the time their reading takes.")
@click.option("--max-request-cost", type=click.IntRange(min=1), default=None,
              help="The most hypothesis tokens a request's search may take: for each line, the "
                   "beam (or samples) times its output limit; more gets 400.  [default: "
                   "--max-lines lines of --max-line-tokens pieces at the default beam]")
@click.option("--max-queue", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Lines that may wait for the search, each language pair's queue apart; a "
                   "request past it gets 503 and Retry-After.")
@click.option("--max-queue-cost", type=click.IntRange(min=1), default=None,
              help="Hypothesis tokens that may wait for the search (as --max-request-cost "
                   "counts them); past it, 503 and Retry-After.  [default: 16 times "
                   "--max-request-cost]")
@click.option("--request-timeout", type=FiniteFloat(min=0, min_open=True), default=60.0,
              show_default=True,
              help="Seconds a request may take from its arrival; then it gets 504 and its "
                   "search stops.")
@click.option("--read-timeout", type=FiniteFloat(min=0, min_open=True), default=15.0,
              show_default=True,
              help="Seconds a client has to send a request's headers, and then its body (408).")
@click.option("--max-connections", type=click.IntRange(min=1), default=256, show_default=True,
              help="Connections open at once; one more closes the one idle longest (a second "
                   "at least), or, with none idle, gets 503 and is closed.")
@click.option("--drain-seconds", type=FiniteFloat(min=0, min_open=True), default=30.0,
              show_default=True,
              help="On SIGTERM or SIGINT, how long the requests in flight are answered before "
                   "the server exits; a second signal exits at once.")
@click.option("--allowed-host", "allowed_hosts", multiple=True,
              help="A name the server is reached by (the Host header) beside loopback names and "
                   "IP addresses, e.g. behind a reverse proxy; repeat for several, '*' for any.")
@click.option("--cors-origin", "cors_origins", multiple=True, metavar="ORIGIN",
              help="An Origin whose pages (or browser extensions) may call every route: its "
                   "preflights are answered, its answers readable (CORS). A '*' matches any "
                   "characters: 'moz-extension://*', 'chrome-extension://*', or '*' for every "
                   "page (LibreTranslate's default). Repeat for several; none: this server's "
                   "own page only.")
@click.option("--alignment-layer", type=int, default=-1, show_default=True,
              help="The decoder layer whose cross-attention aligns, for a request asking "
                   "\"alignment\" (from 0; negative: from the last).")
@click.option("--glossary", "glossary_path", type=click.Path(exists=True, dir_okay=False),
              help="A glossary for every request, `source term<TAB>target term` a line (as "
                   "`vtx translate --glossary`); a request's \"glossary\" pairs win over it. "
                   "A server of one pair only.")
@click.option("--pivot/--no-pivot", default=True, show_default=True,
              help="Translate through a middle language where two --model pairs chain and "
                   "none joins the two (LibreTranslate routes). With de-en and en-fr, German "
                   "into French is each sentence's best English translated on; GET "
                   "/languages lists such targets, their middle language under 'pivots'.")
@click.option("--source-lang", help="The --checkpoint model's source language, an ISO 639 "
              "code such as 'en': the LibreTranslate routes (POST /translate, /detect, GET "
              "/languages) answer with it and --target-lang only.")
@click.option("--target-lang", help="The model's target language, e.g. 'de' (with --source-lang).")
@click.option("--api-keys", "api_keys_path", type=click.Path(exists=True, dir_okay=False),
              help="A file of api keys, one a line: the routes that translate, detect, parse "
                   "or take suggestions then answer 403 to a request without one. A request "
                   "sends it as its 'api_key' field or an 'Authorization: Bearer KEY' header. "
                   "A key's line may give its own limits: 'KEY req_limit=120 char_limit=5000' "
                   "(0: none).")
@click.option("--api-keys-optional", "keys_optional", is_flag=True,
              help="With --api-keys, let a request without a key through (LibreTranslate's "
                   "default): it counts as its address under --req-limit and --char-limit; "
                   "/frontend/settings says keyRequired false. A key it sends must still be one "
                   "of the file's (403).")
@click.option("--keyless-origin", "keyless_origins", multiple=True, metavar="ORIGIN",
              help="With --api-keys, an Origin whose requests need no key (LibreTranslate's "
                   "--require-api-key-origin), e.g. the page's own http://mt.example.org; '*' "
                   "matches any characters. Any client can send it: it spares a page the key, "
                   "it guards nothing. Repeat for several.")
@click.option("--req-limit", type=click.IntRange(min=0), default=0, show_default=True,
              help="Texts a minute each api key of --api-keys, or each address, may send to "
                   "the routes that translate, detect, parse or take suggestions (429 past "
                   "it). A request costs its texts ('q' or 'text'), at least 1; 0: no limit.")
@click.option("--char-limit", type=click.IntRange(min=0), default=0, show_default=True,
              help="Characters a request's texts may hold together (LibreTranslate's "
                   "--char-limit; 400 past it, and /frontend/settings says it); 0: no limit.")
@click.option("--req-flood-threshold", type=click.IntRange(min=0), default=0,
              show_default=True,
              help="Refusals (403 or 429) a client, its key or address, may get within a minute; "
                   "one more bans it for --req-flood-ban seconds (403). 0: no bans.")
@click.option("--req-flood-ban", type=FiniteFloat(min=0, min_open=True), default=600.0,
              show_default=True, help="Seconds a --req-flood-threshold ban lasts.")
@click.option("--req-limit-storage", default="memory://", show_default=True,
              help="Where the limits' state lives: memory:// (this process) or "
                   "redis://HOST:PORT/DB, which several servers behind one proxy then share.")
@click.option("--trusted-proxy", "trusted_proxies", multiple=True, metavar="ADDR_OR_CIDR",
              help="A reverse proxy's address or network, e.g. 10.0.0.0/8. A request from it "
                   "counts as the address its X-Forwarded-For names (the right-most that is no "
                   "trusted proxy), and its X-Forwarded-Proto and X-Forwarded-Host make "
                   "/translate_file's URLs; from anyone else those headers are ignored. Repeat "
                   "for several.")
@click.option("--suggestions", type=click.Path(dir_okay=False), metavar="FILE",
              callback=_suggestions,
              help="Append each suggestion of LibreTranslate's POST /suggest to FILE, a JSON "
                   "line of q, s, source, target and time (nothing of its sender); without it, "
                   "/suggest answers 403. The file grows to 64 MiB at most (then 507); q and s "
                   "each of --max-line-chars at most.")
@click.option("--max-file-bytes", type=click.IntRange(min=1), default=10 << 20,
              show_default=True,
              help="Bytes a file sent to POST /translate_file may hold (400 past it); an office "
                   "file may unpack to 10 times as many.")
@click.option("--file-ttl", type=FiniteFloat(min=0, min_open=True), default=600.0,
              show_default=True,
              help="Seconds a translated file may be fetched from GET /download_file; it is "
                   "kept in memory until then (404 after).")
@click.option("--disable-files-translation", is_flag=True,
              help="Answer POST /translate_file 403, as LibreTranslate's flag of that name.")
@click.option("--jit/--no-jit", default=None, help=JIT_HELP.format("search"))
@precision_options
def serve(checkpoint, pair_models, ema, host, port, beam, lenpen, lenpen_formula, max_len_a,
          max_len_b, stop, nbest, max_tokens, batch_wait_ms, search_threads, max_beam, max_lines,
          max_line_tokens, max_line_chars, max_constraints, max_glossary_pairs, max_term_chars,
          max_html_tags, max_request_cost, max_queue, max_queue_cost, request_timeout, read_timeout,
          max_connections, drain_seconds, allowed_hosts, cors_origins, alignment_layer,
          glossary_path, pivot, source_lang, target_lang, api_keys_path, keys_optional, keyless_origins,
          req_limit, char_limit, req_flood_threshold, req_flood_ban, req_limit_storage, trusted_proxies,
          suggestions, max_file_bytes, file_ttl, disable_files_translation, jit, precision,
          quantize):
    """Serve translations over HTTP: POST /v1/translate, /v1/parse, GET /v1/info, /health,
    /metrics, /spec, a page at /, and LibreTranslate's API (POST /translate, /detect, /suggest,
    /translate_file, GET /languages, /frontend/settings, /download_file); one model
    (--checkpoint) or several language pairs (--model). Stops on SIGTERM once the requests in
    flight are answered (--drain-seconds at most). Listens on loopback by default: put it
    behind a reverse proxy for anything else (docs/serving.md)."""
    from vtx.inference.decoding import DecodeOptions
    from vtx.inference.jit import resolve_jit
    from vtx.inference.threads import share_cores
    from vtx.serve.access import Access, Flood, read_api_keys, read_proxies
    from vtx.serve.limit_store import open_store
    from vtx.serve.app import Transport, build_service, serve as run
    from vtx.serve.file_store import FileSettings
    from vtx.serve.language import LanguagePair
    from vtx.serve.requests import Limits

    if bool(checkpoint) == bool(pair_models):
        raise click.UsageError("give --checkpoint (one model) or --model PAIR=PATH (language "
                               "pairs), not both" if checkpoint else
                               "give --checkpoint PATH or --model PAIR=PATH")
    if (source_lang is None) != (target_lang is None):
        raise click.UsageError("--source-lang and --target-lang go together: give both")
    if pair_models and source_lang:
        raise click.UsageError("--source-lang and --target-lang are --checkpoint's: --model "
                               "names each pair's languages")
    for given, flag in ((keyless_origins, "--keyless-origin"),
                        (keys_optional, "--api-keys-optional")):
        if given and not api_keys_path:
            raise click.UsageError(f"{flag} spares the key that --api-keys asks for: give "
                                   "--api-keys FILE too")
    xla = resolve_jit(jit)
    threads_line = share_cores(search_threads, "vtx serve")
    chosen = announce_decoding(precision, quantize, xla, "search")
    click.echo(threads_line, err=True)
    try:
        options = DecodeOptions(beam=beam, lenpen=lenpen, lenpen_formula=lenpen_formula,
                                max_len_a=max_len_a, max_len_b=max_len_b, stop=stop,
                                nbest=nbest, max_tokens=max_tokens, jit_compile=xla.compile)
        limits = Limits(max_beam=max_beam, max_lines=max_lines, max_line_tokens=max_line_tokens,
                        max_line_chars=max_line_chars, max_constraints=max_constraints,
                        max_glossary_pairs=max_glossary_pairs, max_term_chars=max_term_chars,
                        max_html_tags=max_html_tags, max_request_cost=max_request_cost, max_queue=max_queue,
                        max_queue_cost=max_queue_cost, batch_wait_ms=batch_wait_ms,
                        search_threads=search_threads,
                        request_timeout_s=request_timeout)
        transport = Transport(read_timeout_s=read_timeout, max_connections=max_connections,
                              drain_s=drain_seconds, allowed_hosts=tuple(allowed_hosts),
                              cors_origins=tuple(cors_origins))
        models = pair_models or {
            LanguagePair(source_lang, target_lang) if source_lang else None: checkpoint}
        flood = Flood(req_flood_threshold, req_flood_ban) if req_flood_threshold else None
        access = Access(read_api_keys(api_keys_path) if api_keys_path else None, req_limit,
                        tuple(keyless_origins), keys_optional,
                        trusted_proxies=read_proxies(trusted_proxies),
                        char_limit=char_limit, flood=flood, store=open_store(req_limit_storage))
        service = build_service(models, options, limits, alignment_layer, ema,
                                warn=lambda message: click.echo(f"warning: {message}", err=True),
                                glossary_path=glossary_path, transport=transport, access=access,
                                log=lambda message: click.echo(message, err=True),
                                named=(lambda pair: f"--model {pair.name}={{}}")
                                if pair_models else lambda pair: "--checkpoint {}",
                                precision=chosen, suggestions=suggestions,
                                files=FileSettings(not disable_files_translation,
                                                   max_file_bytes, file_ttl), pivot=pivot)
    except (OSError, ValueError, MemoryError) as error:
        raise library_error(error, FLAGS) from error
    run(service, host, port, log=lambda message: click.echo(message, err=True))
