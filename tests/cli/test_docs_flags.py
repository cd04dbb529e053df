"""docs/commands.md's flag tables are the ones `python -m vtx_cli.docs` makes from the commands."""

import click
import pytest

from vtx_cli import docs


def test_the_flag_tables_of_commands_md_match_the_click_commands():
    text = docs.COMMANDS_DOC.read_text(encoding="utf-8")
    _, changed = docs.rewrite(text)
    assert not changed, (f"docs/commands.md: the flag tables of {', '.join(changed)} differ from "
                         f"`vtx {changed[0]} --help`; run `python -m vtx_cli.docs`")


def test_a_row_holds_the_first_sentence_of_the_help_and_a_bullet_below_holds_the_rest():
    @click.command("demo")
    @click.option("--size", "-n", default=3, show_default=True,
                  help="Rows per batch, e.g. 8. Padding counted.")
    @click.option("--mode", type=click.Choice(["a", "b"]), required=True, help="The mode.")
    @click.option("--jit/--no-jit", default=None, help="Compile.  [default: --jit on a GPU]")
    def demo(size, mode, jit):
        """A demo."""

    assert docs.flag_table(demo).splitlines()[2:] == [
        "| `-n`, `--size` | `3` | Rows per batch, e.g. 8. |",
        "| `--mode` {a,b} | required | The mode. |",
        "| `--jit/--no-jit` | --jit on a GPU | Compile. |",
        "",
        "- `--size`: Padding counted."]


def test_a_help_whose_first_sentence_is_too_long_for_a_cell_is_refused():
    @click.command("demo")
    @click.option("--wordy", help=" ".join(["word"] * (docs.MAX_CELL_WORDS + 1)) + ".")
    def demo(wordy):
        """A demo."""

    with pytest.raises(ValueError, match="vtx demo --wordy: .* is over 30 words"):
        docs.flag_table(demo)


def test_a_command_without_its_table_is_named():
    group = click.Group(commands=[click.Command("demo", params=[])])
    with pytest.raises(ValueError, match="no flag table for demo"):
        docs.rewrite("# no tables\n", group)
