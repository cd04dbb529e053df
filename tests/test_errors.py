"""`vtx.errors.ArgumentError`: one message, worded for the library or for a command's flags."""

from vtx.errors import ArgumentError


def test_the_message_names_the_arguments_or_the_flags_a_command_maps_them_to():
    error = ArgumentError("{beam} {size}: needs {need:.1f} GiB; use a smaller {beam} or {force}",
                          size=1000, need=2.34)
    assert isinstance(error, ValueError)
    assert error.arguments == ["beam", "force"]
    assert str(error) == "beam 1000: needs 2.3 GiB; use a smaller beam or force"
    flags = {"beam": "--beam", "force": "--force"}
    assert error.message(flags.get) == "--beam 1000: needs 2.3 GiB; use a smaller --beam or --force"


def test_values_are_written_as_they_are_even_with_braces():
    error = ArgumentError("{output} {path} already exists", path="/tmp/{name}.txt")
    assert (error.message(lambda argument: "--" + argument)
            == "--output /tmp/{name}.txt already exists")
