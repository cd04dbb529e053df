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
