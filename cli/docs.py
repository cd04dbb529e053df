"""The flag tables of docs/commands.md, made from the click commands so that they and `--help`
cannot drift apart.

`python -m vtx_cli.docs` rewrites each table between `<!-- flags: CMD -->` and `<!-- /flags -->`
from `vtx CMD`'s options: the flag, its default, and the first sentence of its help text; the rest
of a help text follows the table as a bullet, so that the doc drops nothing `--help` prints.
`--check` rewrites nothing and exits 1 naming the commands whose table differs. After changing a
flag, run it (tests/cli/test_docs_flags.py fails while a table differs).
"""

import re
import sys
from pathlib import Path

import click

from vtx_cli.main import main as vtx

COMMANDS_DOC = Path(__file__).resolve().parent.parent / "docs" / "commands.md"
MAX_CELL_WORDS = 30  # a table cell holds a phrase; the rest of the help stays in --help
TABLE = re.compile(r"(<!-- flags: (?P<command>[a-z-]+) -->\n)(?P<table>.*?)(<!-- /flags -->)",
                   re.DOTALL)
# A sentence ends at a full stop before a capital or a backtick ("e.g. en" goes on).
SENTENCE_END = re.compile(r"(?<=\.)\s+(?=[A-Z`])")
SAID_DEFAULT = re.compile(r"\s*\[default: (?P<default>[^\]]*)\]")


def split_help(help_text: str) -> tuple[str, str]:
    """The help's first sentence and the rest (empty if none), without `[default: ...]`."""
    text = " ".join(SAID_DEFAULT.sub("", help_text).split())
    first, *rest = SENTENCE_END.split(text, maxsplit=1)
    return first, rest[0] if rest else ""


def first_sentence(help_text: str) -> str:
    """The help's first sentence, without a trailing `[default: ...]`."""
    return split_help(help_text)[0]


def flag_cell(option: click.Option) -> str:
    """The option's names, and its choices or its metavar where it names one."""
    names = ", ".join(f"`{name}`" for name in sorted(option.opts, key=len))
    if option.secondary_opts:
        names = f"`{'/'.join(option.opts + option.secondary_opts)}`"
    if isinstance(option.type, click.Choice):
        return f"{names} {{{','.join(option.type.choices)}}}"
    if option.metavar:
        return f"{names} {option.metavar}"
    return names


def default_cell(option: click.Option) -> str:
    """What the option is when not given: as its help says it, else its default value."""
    said = SAID_DEFAULT.search(option.help or "")
    if said:  # a value in code, a phrase as it is
        return f"`{said['default']}`" if " " not in said["default"] else said["default"]
    if option.required:
        return "required"
    if option.is_flag and not option.secondary_opts:
        return "off"
    default = option.to_info_dict()["default"]  # None where none is given (click's UNSET)
    if default is None or option.multiple:
        return "-"
    if option.secondary_opts:
        return f"`{option.opts[0] if default else option.secondary_opts[0]}`"
    return f"`{default}`"


def flag_table(command: click.Command) -> str:
    """The command's options as a Markdown table: flag, default, meaning (the help's first
    sentence); then a bullet for each help with more to say.

    Raises:
        ValueError: an option without help, or a cell of more than MAX_CELL_WORDS words.
    """
    rows = ["| Flag | Default | Meaning |", "| --- | --- | --- |"]
    bullets = []
    for option in command.params:
        if not isinstance(option, click.Option) or option.hidden:
            continue
        if not option.help:
            raise ValueError(f"vtx {command.name} {option.opts[0]}: no help text")
        first, rest = split_help(option.help)
        cells = [flag_cell(option), default_cell(option), first]
        for cell in cells:
            if len(cell.split()) > MAX_CELL_WORDS:
                raise ValueError(f"vtx {command.name} {option.opts[0]}: {cell!r} is over "
                                 f"{MAX_CELL_WORDS} words; end its help's first sentence sooner")
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
        if rest:
            bullets.append(f"- `{max(option.opts, key=len)}`: {rest}")
    if bullets:
        rows += ["", *bullets]
    return "\n".join(rows) + "\n"


def rewrite(text: str, group: click.Group = vtx) -> tuple[str, list[str]]:
    """`text` with every flag table made again from `group`'s commands, and the commands whose
    table changed.

    Raises:
        ValueError: a table of no such command, or a command without its table.
    """
    changed = []

    def table(match: re.Match) -> str:
        name = match["command"]
        if name not in group.commands:
            raise ValueError(f"a flag table of {name}, which is not a command of vtx")
        # Blank lines around the table: GitHub reads a line right after a table as a row.
        made = "\n" + flag_table(group.commands[name]) + "\n"
        if made != match["table"]:
            changed.append(name)
        return match.group(1) + made + match.group(4)

    rewritten = TABLE.sub(table, text)
    tabled = {match["command"] for match in TABLE.finditer(text)}
    if missing := sorted(set(group.commands) - tabled):
        raise ValueError(f"no flag table for {', '.join(missing)}: add `<!-- flags: "
                         f"{missing[0]} -->` and `<!-- /flags -->` to the doc")
    return rewritten, changed


@click.command()
@click.option("--check", is_flag=True, help="Rewrite nothing; exit 1 if a table differs.")
@click.argument("doc", type=click.Path(dir_okay=False, exists=True), default=str(COMMANDS_DOC))
def docs(check: bool, doc: str) -> None:
    """Make the flag tables of DOC (docs/commands.md) from vtx's click commands."""
    path = Path(doc)
    try:
        rewritten, changed = rewrite(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise click.ClickException(str(error)) from error
    if check:
        if changed:
            click.echo(f"{path}: the flag tables of {', '.join(changed)} differ from the "
                       f"commands; run python -m vtx_cli.docs", err=True)
            sys.exit(1)
        return
    path.write_text(rewritten, encoding="utf-8")
    click.echo(f"{path}: {len(changed)} flag tables rewritten ({', '.join(changed) or 'none'})")


if __name__ == "__main__":
    docs()
