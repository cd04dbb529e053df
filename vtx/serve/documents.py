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
_SPACES = re.compile(r"\s+")


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
        parts = list(self.parts)
        for index, translation in zip(self.sentences, translations, strict=True):
            parts[index] = html.escape(translation, quote=False) if self.markup else translation
        return "".join(parts)


def text_document(text: str, language: str) -> Document:
    """`text` (plain text: lines of sentences in `language`, an ISO 639 code) as a document."""
    parts: list[str] = []
    sentences: list[int] = []
    for line in text.splitlines(keepends=True):
        _add_sentences(line, language, parts, sentences)
    return Document(parts, sentences)


def html_document(text: str, language: str) -> Document:
    """`text` (HTML) as a document: the sentences of each run of text between tags, the
    markup kept as written. A run's spaces and line breaks within it are one space each (as a
    browser shows them); the text of `UNTRANSLATED_ELEMENTS` and of comments is kept."""
    reader = _Reader()
    reader.feed(text)
    reader.close()
    parts: list[str] = []
    sentences: list[int] = []
    for chunk, is_text in reader.chunks:
        if not is_text or not chunk.strip():
            parts.append(chunk)
            continue
        start, end = len(chunk) - len(chunk.lstrip()), len(chunk.rstrip())
        parts.append(chunk[:start])
        _add_sentences(_SPACES.sub(" ", chunk[start:end]), language, parts, sentences)
        parts.append(chunk[end:])
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
    """HTML as chunks: (markup as written, False) or (text, unescaped, True)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.chunks: list[tuple[str, bool]] = []
        self._kept = 0  # depth inside UNTRANSLATED_ELEMENTS

    def handle_starttag(self, tag, attrs):
        self.chunks.append((self.get_starttag_text(), False))
        if tag in UNTRANSLATED_ELEMENTS:
            self._kept += 1

    def handle_startendtag(self, tag, attrs):
        self.chunks.append((self.get_starttag_text(), False))

    def handle_endtag(self, tag):
        self.chunks.append((f"</{tag}>", False))
        if tag in UNTRANSLATED_ELEMENTS and self._kept:
            self._kept -= 1

    def handle_data(self, data):
        if self._kept or self.cdata_elem is not None:  # kept as written, escaped again
            self.chunks.append((data if self.cdata_elem else html.escape(data, quote=False),
                                False))
        else:
            self.chunks.append((data, True))

    def handle_comment(self, data):
        self.chunks.append((f"<!--{data}-->", False))

    def handle_decl(self, decl):
        self.chunks.append((f"<!{decl}>", False))

    def handle_pi(self, data):
        self.chunks.append((f"<?{data}>", False))

    def unknown_decl(self, data):
        self.chunks.append((f"<![{data}]>", False))
