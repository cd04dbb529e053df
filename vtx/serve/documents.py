"""A text or an HTML document cut into the sentences a model translates one at a time, and the
rest, kept as it is: line breaks, the spaces between sentences, and the markup.

Sentences are cut by sentencex (Wikimedia's rule-based segmenter: its abbreviation lists for
~300 languages ship inside the package, nothing is downloaded); HTML is read by the standard
library's `html.parser`, which tolerates what browsers tolerate. A translated document is the
kept parts with each sentence replaced by its translation, so a document of one sentence and
no markup is translated exactly as that line is by `vtx translate`.
"""

from __future__ import annotations

import dataclasses
import html
import re
from html.parser import HTMLParser

# Elements whose text is no prose to translate.
UNTRANSLATED_ELEMENTS = frozenset({"script", "style", "code", "pre", "textarea", "template"})
# HTML's white space, which a browser shows as one space (a no-break space stays one).
_SPACES = re.compile(r"[ \t\n\r\f]+")


@dataclasses.dataclass(frozen=True)
class Document:
    """A document as parts: `parts[i]` is kept as it is unless `i` is in `sentences`, the
    indices of the parts to translate (each a sentence, without surrounding spaces); `markup`:
    the document is HTML, so a translation is escaped as HTML text when put back."""

    parts: list[str]
    sentences: list[int]
    markup: bool = False

    @property
    def lines(self) -> list[str]:
        """The sentences to translate, in order."""
        return [self.parts[index] for index in self.sentences]

    def translated(self, translations: list[str]) -> str:
        """The document with its sentences (`lines`) replaced by `translations`."""
        return "".join(self.translated_parts(translations))

    def translated_parts(self, translations: list[str]) -> list[str]:
        """`parts` with the sentences replaced by `translations` (a file's paragraph puts each
        part back into the run of text it started in: `vtx.serve.files`)."""
        parts = list(self.parts)
        for index, translation in zip(self.sentences, translations, strict=True):
            parts[index] = html.escape(translation, quote=False) if self.markup else translation
        return parts


def text_document(text: str, language: str) -> Document:
    """`text` (plain text: lines of sentences in `language`, an ISO 639 code) as a document."""
    parts: list[str] = []
    sentences: list[int] = []
    for line in text.splitlines(keepends=True):
        _add_sentences(line, language, parts, sentences)
    return Document(parts, sentences)


def html_document(text: str, language: str) -> Document:
    """`text` (HTML) as a document: the sentences of each run of text between tags, everything
    else kept as written, byte for byte (markup, entities outside translated text, what the
    parser does not understand). A run's spaces and line breaks within it are one space each
    (as a browser shows them); the text of `UNTRANSLATED_ELEMENTS` and of comments is kept."""
    reader = _Reader(text)
    reader.feed(text)
    reader.close()
    parts: list[str] = []
    sentences: list[int] = []
    for raw, prose in reader.chunks():
        if prose is None or not prose.strip():
            parts.append(raw)
            continue
        start, end = len(prose) - len(prose.lstrip()), len(prose.rstrip())
        parts.append(prose[:start])
        _add_sentences(_SPACES.sub(" ", prose[start:end]), language, parts, sentences)
        parts.append(prose[end:])
    return Document(parts, sentences, markup=True)


def _add_sentences(text: str, language: str, parts: list[str], sentences: list[int]) -> None:
    """Append `text`'s sentences to `parts` (their indices to `sentences`) and the spaces
    around each."""
    import sentencex

    for segment in sentencex.segment(language, text):
        core = segment.strip()
        if not core:
            parts.append(segment)
            continue
        start = segment.index(core)
        parts.append(segment[:start])
        sentences.append(len(parts))
        parts.append(core)
        parts.append(segment[start + len(core):])


class _Reader(HTMLParser):
    """Where each construct of an HTML text starts, and the text of each run to translate: the
    text is cut at those starts, so its pieces are what was written, whatever the parser makes
    of them (an unclosed <script>'s rest, a CDATA section, an <!ENTITY> declaration)."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self._text = text
        self._lines = [0] + [match.end() for match in re.finditer("\n", text)]  # their offsets
        self._starts: list[int] = []  # each construct's offset in the text
        self._prose: list[str | None] = []  # its text, unescaped, if it is one to translate
        self._kept = 0  # depth inside UNTRANSLATED_ELEMENTS

    def chunks(self) -> list[tuple[str, str | None]]:
        """(the text as written, its prose to translate or None) for each construct, in order,
        a run of text the parser gave in pieces (a stray '<' is one) as one; together they are
        the whole text."""
        starts = [0, *self._starts] if self._starts[:1] != [0] else self._starts
        prose = [None, *self._prose] if len(starts) > len(self._starts) else self._prose
        ends = [*starts[1:], len(self._text)]
        chunks: list[tuple[int, int, list[str] | None]] = []  # start, end, a run's pieces
        for start, end, text in zip(starts, ends, prose):
            if text is not None and chunks and chunks[-1][2] is not None:  # one run of text
                chunks[-1][2].append(text)
                chunks[-1] = (chunks[-1][0], end, chunks[-1][2])
            else:
                chunks.append((start, end, None if text is None else [text]))
        return [(self._text[start:end], None if pieces is None else "".join(pieces))
                for start, end, pieces in chunks]

    def _construct(self, prose: str | None = None) -> None:
        line, column = self.getpos()  # of the construct being handled: line from 1
        self._starts.append(self._lines[line - 1] + column)
        self._prose.append(prose)

    def handle_starttag(self, tag, attrs):
        self._construct()
        if tag in UNTRANSLATED_ELEMENTS:
            self._kept += 1

    def handle_startendtag(self, tag, attrs):
        self._construct()

    def handle_endtag(self, tag):
        self._construct()
        if tag in UNTRANSLATED_ELEMENTS and self._kept:
            self._kept -= 1

    def handle_data(self, data):
        self._construct(None if self._kept or self.cdata_elem is not None else data)

    def handle_comment(self, data):
        self._construct()

    def handle_decl(self, decl):
        self._construct()

    def handle_pi(self, data):
        self._construct()

    def unknown_decl(self, data):
        self._construct()
