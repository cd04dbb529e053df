"""`vtx serve`: translations (and parses) over HTTP, concurrent requests batched together."""

import click

from vtx.inference.decoding import TRANSLATION
from vtx_cli.options import (JIT_HELP, SEARCH_FLAGS, FiniteFloat, ema_option, ensemble_option,
                             library_error, search_options)

FLAGS = {**SEARCH_FLAGS, "max_beam": "--max-beam", "max_lines": "--max-lines",
         "max_line_tokens": "--max-line-tokens", "max_queue": "--max-queue",
         "batch_wait_ms": "--batch-wait-ms", "alignment_layer": "--alignment-layer",
         "glossary_path": "--glossary"}


@click.command()
@ensemble_option
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
@click.option("--max-beam", type=click.IntRange(min=1), default=16, show_default=True,
              help="The largest beam (and nbest, or samples) a request may ask for.")
@click.option("--max-lines", type=click.IntRange(min=1), default=64, show_default=True,
              help="Lines a request may hold.")
@click.option("--max-line-tokens", type=click.IntRange(min=1), default=None,
              help="Source pieces a line may hold.  [default: the model's positions]")
@click.option("--max-queue", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Lines that may wait for the search; a request past it gets 503 and "
                   "Retry-After.")
@click.option("--alignment-layer", type=int, default=-1, show_default=True,
              help="The decoder layer whose cross-attention aligns, for a request asking "
                   "\"alignment\" (from 0; negative: from the last).")
@click.option("--glossary", "glossary_path", type=click.Path(exists=True, dir_okay=False),
              help="A glossary for every request, `source term<TAB>target term` a line (as "
                   "`vtx translate --glossary`); a request's \"glossary\" pairs win over it.")
@click.option("--jit/--no-jit", default=None, help=JIT_HELP.format("search"))
def serve(checkpoint, ema, host, port, beam, lenpen, lenpen_formula, max_len_a, max_len_b, stop,
          nbest, max_tokens, batch_wait_ms, max_beam, max_lines, max_line_tokens, max_queue,
          alignment_layer, glossary_path, jit):
    """Serve translations over HTTP: POST /v1/translate, /v1/parse, GET /v1/info, /health,
    /metrics, and a page at /. Stops on SIGTERM once the requests in flight are answered."""
    from vtx.inference.decoding import DecodeOptions
    from vtx.inference.jit import resolve_jit
    from vtx.serve.app import build_service, serve as run
    from vtx.serve.requests import Limits

    xla = resolve_jit(jit)
    click.echo(xla.log_line("search"), err=True)
    try:
        options = DecodeOptions(beam=beam, lenpen=lenpen, lenpen_formula=lenpen_formula,
                                max_len_a=max_len_a, max_len_b=max_len_b, stop=stop,
                                nbest=nbest, max_tokens=max_tokens, jit_compile=xla.compile)
        limits = Limits(max_beam=max_beam, max_lines=max_lines, max_line_tokens=max_line_tokens,
                        max_queue=max_queue, batch_wait_ms=batch_wait_ms)
        service = build_service(checkpoint, options, limits, alignment_layer, ema,
                                warn=lambda message: click.echo(f"warning: {message}", err=True),
                                glossary_path=glossary_path)
    except (OSError, ValueError, MemoryError) as error:
        raise library_error(error, FLAGS) from error
    run(service, host, port, log=lambda message: click.echo(message, err=True))
