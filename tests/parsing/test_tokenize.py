"""Raw sentences split as the Penn Treebank's text is (vtx parse --tokenize)."""

from vtx.parsing.tokenize import treebank_words


def test_quotes_clitics_brackets_and_punctuation_as_the_treebank():
    assert treebank_words('He said, "I can\'t (yet) pay $5.20 for it."') == [
        "He", "said", ",", "``", "I", "ca", "n't", "-LRB-", "yet", "-RRB-", "pay", "$", "5.20",
        "for", "it", ".", "''"]


def test_abbreviations_inside_a_sentence_stay_whole_and_only_the_last_stop_is_split():
    assert treebank_words("The U.S. company's shares rose 3.5% -- a record.") == [
        "The", "U.S.", "company", "'s", "shares", "rose", "3.5", "%", "--", "a", "record", "."]


def test_a_blank_line_has_no_tokens():
    assert treebank_words(" \t ") == []
