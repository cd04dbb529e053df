"""Reading raw parallel text: file resolution, lockstep reading, line-count and UTF-8 errors."""

import gzip
import os

import pytest

from tests.data.conftest import write_lines
from vtx.data.text import decode_line, lines_in_file, read_parallel, resolve_path
from vtx.errors import DataError


def test_resolve_path_finds_plain_and_gzip(tmp_path):
    write_lines(tmp_path / "a.en", ["x"])
    write_lines(tmp_path / "a.de.gz", ["y"])
    assert resolve_path(tmp_path / "a", "en") == tmp_path / "a.en"
    assert resolve_path(tmp_path / "a", "de") == tmp_path / "a.de.gz"


def test_resolve_path_names_both_candidates_when_missing(tmp_path):
    with pytest.raises(DataError, match=r"missing file: neither .*b\.fr nor .*b\.fr\.gz"):
        resolve_path(tmp_path / "b", "fr")


def test_resolve_path_rejects_plain_and_gzip_together(tmp_path):
    write_lines(tmp_path / "a.en", ["x"])
    write_lines(tmp_path / "a.en.gz", ["x"])
    with pytest.raises(DataError, match="both .*a.en and .*a.en.gz exist"):
        resolve_path(tmp_path / "a", "en")


def test_gzip_and_plain_files_read_the_same_pairs(tmp_path):
    lines_en, lines_de = ["a b", "", "c\r"], ["d", "e f", "g"]
    plain = list(read_parallel(write_lines(tmp_path / "p.en", lines_en),
                               write_lines(tmp_path / "p.de", lines_de)))
    gzipped = list(read_parallel(write_lines(tmp_path / "g.en.gz", lines_en),
                                 write_lines(tmp_path / "g.de.gz", lines_de)))
    assert plain == gzipped == [(b"a b", b"d"), (b"", b"e f"), (b"c", b"g")]


@pytest.mark.parametrize("source_count,target_count", [(5, 4), (4, 5)])
def test_unequal_line_counts_name_both_files_and_counts(tmp_path, source_count, target_count):
    source = write_lines(tmp_path / "x.en", ["s"] * source_count)
    target = write_lines(tmp_path / "x.de.gz", ["t"] * target_count)
    message = (f"line counts differ: {source} has {source_count} lines, {target} has "
               f"{target_count} lines")
    with pytest.raises(DataError, match=message.replace(".", r"\.")):
        list(read_parallel(source, target))


def test_last_line_without_newline_counts(tmp_path):
    (tmp_path / "x.en").write_bytes(b"a\nb")
    (tmp_path / "x.de").write_bytes(b"c\nd\n")
    assert list(read_parallel(tmp_path / "x.en", tmp_path / "x.de")) == [(b"a", b"c"),
                                                                         (b"b", b"d")]


def test_invalid_utf8_names_file_line_and_bytes(tmp_path):
    with pytest.raises(DataError, match=r"f\.de:7: invalid UTF-8 \(bytes b'\\xff' at column 3\)"):
        decode_line(b"ab\xffcd", tmp_path / "f.de", 7)
    assert decode_line("größer".encode(), tmp_path / "f.de", 1) == "größer"


def test_a_directory_named_as_a_file_is_said_to_be_one_not_missing(tmp_path):
    (tmp_path / "a.en").mkdir()
    with pytest.raises(DataError, match=r"a\.en is a directory, not a text file"):
        resolve_path(tmp_path / "a", "en")


def test_gzip_data_without_gz_and_text_named_gz_are_refused_naming_the_file(tmp_path):
    """Gzip read as text was counted in compressed lines ('line counts differ: 70 lines')."""
    import gzip

    write_lines(tmp_path / "t.de", ["x", "y"])
    (tmp_path / "t.en").write_bytes(gzip.compress(b"a\nb\n"))
    with pytest.raises(DataError, match=r"t\.en holds gzip data but is not named \.gz; name "
                                        r"it .*t\.en\.gz"):
        list(read_parallel(tmp_path / "t.en", tmp_path / "t.de"))
    (tmp_path / "u.en.gz").write_bytes(b"a\nb\n")
    with pytest.raises(DataError, match=r"u\.en\.gz is named \.gz but is not gzip data"):
        list(read_parallel(tmp_path / "u.en.gz", tmp_path / "t.de"))


def test_lines_in_file_counts_as_the_input_is_read(tmp_path):
    plain = tmp_path / "a.en"
    plain.write_bytes(b"one\n\nthree")  # a last line without its newline is read too
    assert lines_in_file(plain) == 3
    packed = tmp_path / "a.en.gz"
    packed.write_bytes(gzip.compress(b"one\ntwo\n"))
    assert lines_in_file(packed) == 2
    damaged = tmp_path / "b.en.gz"
    damaged.write_bytes(gzip.compress(b"one\ntwo\n" * 100)[:30])
    assert lines_in_file(damaged) is None  # the reading of the lines names the damage


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_not_read_ahead_to_count_its_lines(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert lines_in_file(fifo) is None  # returns at once: opening it would wait for a writer
