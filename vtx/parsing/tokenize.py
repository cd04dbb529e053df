"""Raw English text split into the Penn Treebank's tokens, for `vtx parse --tokenize`.

The treebank's own rules, as NLTK's TreebankWordTokenizer implements them: double quotes become
`` and '', clitics are split off (do n't, it 's, ca n't), punctuation stands alone, and brackets
become -LRB- and -RRB-. Each line is one sentence: only its last full stop is split off, so
"U.S." inside a sentence stays whole, as in the treebank.
"""

from __future__ import annotations

import functools


@functools.cache
def _tokenizer():
    from nltk.tokenize.treebank import TreebankWordTokenizer

    return TreebankWordTokenizer()


def treebank_words(line: str) -> list[str]:
    """The Penn Treebank tokens of one raw sentence (module docstring); [] for a blank line."""
    return _tokenizer().tokenize(line.strip(), convert_parentheses=True)
