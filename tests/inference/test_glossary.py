import random
import re

import pytest

from vtx.errors import DataError
from vtx.inference.glossary import Glossary, line_constraints

GLOSSARY = Glossary.from_pairs([("New York", "New York"), ("New York City", "NYC"),
                                ("York", "Jork"), ("dog", "Hund"), ("Bank", "Bank")],
                               lambda index: f"pair {index}")


def test_terms_are_found_as_whole_words_case_as_written_leftmost_longest():
    assert GLOSSARY.targets_in("A dog in New York City.") == ["Hund", "NYC"]
    assert GLOSSARY.targets_in("New York, then York.") == ["New York", "Jork"]
    assert GLOSSARY.targets_in("dogs at the bank, a hotdog") == []
    assert GLOSSARY.targets_in("dog, dog and Bank") == ["Hund", "Bank"]  # once each


def test_a_request_s_pairs_win_over_the_server_s():
    own = Glossary.from_pairs([("dog", "Hündchen")], str)
    assert GLOSSARY.updated(own).targets_in("a dog") == ["Hündchen"]


def test_given_phrases_come_first_and_a_term_that_does_not_fit_is_dropped_with_a_warning():
    warnings = []
    pieces = lambda text: len(text.split())
    # A limit of 4 tokens with EOS: room for 3 pieces of phrases.
    constraints = line_constraints(GLOSSARY, ["a dog in New York", "a dog"], [["zwei Wörter"], []],
                                   pieces, lambda length: 4, [6, 7], warnings.append)
    assert constraints == [["zwei Wörter", "Hund"], ["Hund"]]
    assert warnings == ["line 7: the glossary's term 'New York' (2 pieces) does not fit in the "
                        "output beside the other phrases: dropped"]


def test_a_term_s_pieces_are_counted_once_however_many_lines_hold_it():
    counted = []
    pieces = lambda text: counted.append(text) or len(text.split())
    constraints = line_constraints(GLOSSARY, ["a dog", "dog, dog", "a dog"], None, pieces,
                                   lambda length: 10, [0, 1, 2], [].append)
    assert constraints == [["Hund"]] * 3
    assert counted.count("Hund") == 1


def test_a_glossary_file_s_byte_order_mark_is_not_part_of_its_first_term(tmp_path):
    (tmp_path / "glossary.tsv").write_text("dog\tHund\n", encoding="utf-8-sig")
    glossary = Glossary.read(tmp_path / "glossary.tsv")
    assert glossary.pairs == (("dog", "Hund"),)
    assert glossary.targets_in("a dog") == ["Hund"]


@pytest.mark.parametrize("text, error", [
    ("dog\tHund\ncat\n", "{path} line 2: expected a source term and a target term, got 1 fields"),
    ("dog\tHund\n\ncat\tKatze\tx\n", "{path} line 3: expected a source term and a target term, "
                                     "got 3 fields"),
    ("dog\t \n", "{path} line 1: the target term is empty"),
    ("dog\tHund\ndog\tRüde\n", "{path} line 2: the source term 'dog' again (first at {path} "
                               "line 1)"),
])
def test_a_bad_glossary_line_is_refused_naming_the_file_and_line(tmp_path, text, error):
    (tmp_path / "glossary.tsv").write_text(text)
    with pytest.raises(DataError) as raised:
        Glossary.read(tmp_path / "glossary.tsv")
    assert str(raised.value) == error.format(path=tmp_path / "glossary.tsv")


def regex_targets_in(pairs, line):
    """The reference: every term in one alternation, longest first, `finditer`."""
    targets = dict(pairs)
    terms = sorted(targets, key=len, reverse=True)
    pattern = re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, terms)) + r")(?!\w)")
    return list(dict.fromkeys(targets[match.group()] for match in pattern.finditer(line)))


# Word characters (ASCII, accented, an Arabic-Indic digit, the underscore) and non-word ones
# (spaces, punctuation, a zero-width space), few of each so that terms overlap and repeat.
ALPHABET = ["a", "b", "B", "é", "\u0663", "_", " ", " ", ".", "+", "-", "\u200b"]


def random_text(rng, length):
    return "".join(rng.choice(ALPHABET) for _ in range(length))


def random_pairs(rng, line, count):
    """Terms cut out of `line` at any place (inside words, at punctuation, over spaces), and
    random ones (blank ones too, which only `from_pairs` refuses)."""
    terms = set()
    while len(terms) < count:
        start = rng.randrange(len(line))
        term = line[start:start + rng.randint(1, 6)] if rng.random() < 0.8 \
            else random_text(rng, rng.randint(1, 4))
        terms.add(term)
    return [(term, f"t{number}") for number, term in enumerate(sorted(terms))]


def test_terms_are_found_as_the_regular_expression_of_the_module_docstring_finds_them():
    rng = random.Random(87)
    for _ in range(3000):
        line = random_text(rng, rng.randint(1, 40))
        pairs = random_pairs(rng, line, rng.randint(1, 8))
        assert Glossary(tuple(pairs)).targets_in(line) == regex_targets_in(pairs, line), \
            (line, pairs)


def test_a_request_s_glossary_over_the_server_s_finds_what_their_merged_pairs_find():
    rng = random.Random(88)
    for _ in range(1000):
        line = random_text(rng, rng.randint(1, 40))
        server, own = (random_pairs(rng, line, rng.randint(1, 6)) for _ in range(2))
        own = [(source, "own " + target) for source, target in own]
        merged = {**dict(server), **dict(own)}
        updated = Glossary(tuple(server)).updated(Glossary(tuple(own)))
        assert updated.pairs == tuple(merged.items())
        assert updated.targets_in(line) == regex_targets_in(merged.items(), line), \
            (line, server, own)


@pytest.mark.parametrize("term, line, found", [
    ("C++", "C++, C++x and xC++ C++", ["C++"]),
    ("U.S.", "the U.S. army", ["U.S."]),
    ("U.S.", "the U.S.A.", []),  # "A" follows: inside a longer word
    ("+", "a ++ b +", ["+"]),  # twice at "++", sharing the place between them
    (" x", "a  x", [" x"]),
    ("  ", " " * 9, ["  "]),
    ("é", "café é", ["é"]),
])
def test_terms_with_non_word_edges_are_found_as_the_regular_expression_finds_them(term, line,
                                                                                  found):
    glossary = Glossary(((term, term),))
    assert glossary.targets_in(line) == found == regex_targets_in([(term, term)], line)
