"""`vtx translate`: beam search from stdin (or --input) to stdout (paper section 6.1)."""

import click

from vtx.inference.decoding import OUTPUT_FORMATS, TRANSLATION
from vtx_cli.options import (JIT_HELP, SEARCH_FLAGS, FiniteFloat, announce_decoding,
                             ema_option, ensemble_option, library_error, precision_options,
                             search_options, search_threads_option, TensorFlowCommand)

FLAGS = {**SEARCH_FLAGS, "reference_path": "--reference", "input_path": "--input",
         "sampling_topk": "--sampling-topk", "sampling_topp": "--sampling-topp",
         "temperature": "--temperature", "prefix_path": "--prefix",
         "alignment_layer": "--alignment-layer", "constraints_path": "--constraints",
         "constraints": "--constraints", "sampling": "--sampling", "jit_compile": "--jit",
         "glossary_path": "--glossary"}
# Flags of one mode, and the flags that mode has no use for: given together, refused.
NEEDS = {"sampling_topk": "sampling", "sampling_topp": "sampling", "temperature": "sampling",
         "seed": "sampling", "alignment_layer": "print_alignment"}
UNUSED_BY = {"sampling": ("beam", "stop")}


def given(ctx: click.Context, name: str) -> bool:
    """The parameter was set on the command line (or the environment), not left at its default."""
    source = ctx.get_parameter_source(name)
    return source not in (None, click.core.ParameterSource.DEFAULT)


def flag(ctx: click.Context, name: str) -> str:
    return next(p.opts[0] for p in ctx.command.params if p.name == name)


def check_combinations(ctx: click.Context) -> None:
    """Refuse, naming both flags, a mode's flag without its mode, or with a flag it ignores."""
    for name, mode in NEEDS.items():
        if given(ctx, name) and not ctx.params[mode]:
            raise click.UsageError(f"{flag(ctx, name)} needs {flag(ctx, mode)}", ctx=ctx)
    for mode, unused in UNUSED_BY.items():
        for name in unused:
            if ctx.params[mode] and given(ctx, name):
                raise click.UsageError(f"{flag(ctx, name)} has no use with {flag(ctx, mode)}",
                                       ctx=ctx)


@click.command(cls=TensorFlowCommand)
@ensemble_option
@ema_option
@click.option("--input", "input_path", type=click.Path(exists=True, dir_okay=False),
              help="Source text, one sentence per line; read as gzip when named .gz.  "
                   "[default: stdin]")
@click.option("--output", "output_path", type=click.Path(dir_okay=False),
              help="Where to write the translations, atomically (through a link to its "
                   "target; a FIFO or device directly).  [default: stdout]")
@click.option("--force", is_flag=True, help="Replace an existing --output file.")
@search_options(TRANSLATION)
@click.option("--max-tokens", type=click.IntRange(min=1), default=TRANSLATION.max_tokens,
              show_default=True,
              help="Source tokens per batch, padding counted.")
@click.option("--buffer-size", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Lines read before translating (1: answer each line at once).")
@search_threads_option
@click.option("--nbest", type=click.IntRange(min=1), default=1, show_default=True,
              help="Hypotheses (or --sampling samples) per input: K lines `score<TAB>text` "
                   "each when K > 1 (`nan<TAB>` for each that does not exist).")
@click.option("--reference", type=click.Path(exists=True, dir_okay=False),
              help="Reference translations: print detokenized sacreBLEU and its signature.")
@click.option("--jit/--no-jit", default=None, help=JIT_HELP.format("search"))
@precision_options
@click.option("--sampling", is_flag=True,
              help="Draw --nbest samples per input from the model instead of the beam search "
                   "(back-translation); reproducible per line with --seed.")
@click.option("--sampling-topk", type=click.IntRange(min=0), default=0, show_default=True,
              help="Sampling: draw from the K most probable tokens only (0: all).")
@click.option("--sampling-topp", type=FiniteFloat(min=0, max=1, min_open=True), default=1.0,
              show_default=True,
              help="Sampling: draw from the fewest most probable tokens whose probability sums "
                   "to P or more (1: all).")
@click.option("--temperature", type=FiniteFloat(min=0, min_open=True), default=1.0,
              show_default=True,
              help="Sampling: divide the logits by T before drawing (below 1: sharper).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Sampling: with the line's index in the input, fixes the line's samples.")
@click.option("--output-format", type=click.Choice(OUTPUT_FORMATS), default="text",
              show_default=True,
              help="text: a line per hypothesis; jsonl: a JSON record per input line (id, "
                   "source, and per hypothesis its text, score, tokens and positional scores).")
@click.option("--prefix", "prefix_path", type=click.Path(exists=True, dir_okay=False),
              help="Target prefixes, one per input line (raw text; an empty line: none): "
                   "every hypothesis of the line starts with its prefix.")
@click.option("--constraints", "constraints_path", type=click.Path(exists=True, dir_okay=False),
              help="Lexical constraints, one line per input line: tab-separated phrases (raw "
                   "text; an empty line: none) that every finished hypothesis of the line "
                   "holds.")
@click.option("--glossary", "glossary_path", type=click.Path(exists=True, dir_okay=False),
              help="A glossary, `source term<TAB>target term` a line: where a source term "
                   "occurs in a line as whole words (case as written), its target term is one "
                   "of the line's constraints. See docs/decoding.md for overlaps and fit.")
@click.option("--print-alignment", is_flag=True,
              help="Also each hypothesis's word alignment, `i-j` pairs (source piece i, target "
                   "piece j) from --alignment-layer's cross-attention: after a tab in text, a "
                   "field in jsonl.")
@click.option("--alignment-layer", type=int, default=-1, show_default=True,
              help="The decoder layer whose cross-attention, averaged over heads, aligns "
                   "(from 0; negative: from the last).")
@click.pass_context
def translate(ctx, checkpoint, input_path, output_path, beam, lenpen, lenpen_formula, max_len_a,
              max_len_b, stop, max_tokens, buffer_size, search_threads, nbest, reference, jit, force,
              sampling, sampling_topk, sampling_topp, temperature, seed, output_format, prefix_path,
              constraints_path, glossary_path, print_alignment, alignment_layer, ema,
              precision, quantize):
    """Translate sentences with a trained model."""
    from vtx.inference import translate as lib
    from vtx.inference.decoding import DecodeOptions, SamplingOptions
    from vtx.inference.files import check_reference_length, read_references
    from vtx.inference.jit import resolve_jit
    from vtx.inference.threads import share_cores

    check_combinations(ctx)
    xla = resolve_jit(jit, host_steps=bool(constraints_path or glossary_path))
    threads_line = share_cores(search_threads, "vtx translate")
    chosen = announce_decoding(precision, quantize, xla, "search")
    click.echo(threads_line, err=True)
    try:
        sampler = SamplingOptions(topk=sampling_topk, topp=sampling_topp,
                                  temperature=temperature, seed=seed) if sampling else None
        options = DecodeOptions(beam=beam, lenpen=lenpen, lenpen_formula=lenpen_formula,
                                max_len_a=max_len_a, max_len_b=max_len_b, stop=stop, nbest=nbest,
                                max_tokens=max_tokens, jit_compile=xla.compile,
                                sampling=sampler, search_threads=search_threads,
                                positional_scores=output_format == "jsonl",
                                alignment_layer=alignment_layer if print_alignment else None)
        # A bad reference file is said before the search, not after it.
        references = read_references(reference) if reference else None
        if reference:
            check_reference_length(input_path, reference, references)
        best = lib.translate_file(list(checkpoint),
                                  input_path, output_path, options, buffer_size,
                                  force, warn=lambda message: click.echo(f"warning: {message}",
                                                                         err=True),
                                  log=lambda message: click.echo(message, err=True),
                                  other_inputs={"--reference": reference}, ema=ema,
                                  output_format=output_format, prefix_path=prefix_path,
                                  constraints_path=constraints_path,
                                  glossary_path=glossary_path, precision=chosen)
        if reference:
            score, signature = lib.bleu(best, reference, references)
            click.echo(score, err=True)
            click.echo(signature, err=True)
    except (OSError, ValueError, MemoryError) as error:
        # A glossary alone is what asked for the constrained search.
        flags = {**FLAGS, "constraints": "--glossary"} \
            if glossary_path and not constraints_path else FLAGS
        raise library_error(error, flags) from error
