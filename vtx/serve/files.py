"""The files LibreTranslate's `POST /translate_file` takes, read into the texts to translate and
written back with their translations: plain text and HTML (`vtx.serve.documents`), and the
office formats .docx, .pptx (Office Open XML), .odt and .odp (OpenDocument).

An office file is a zip of XML parts. Its parts holding the text are read with lxml (which keeps
every namespace prefix, as Office needs: the standard library's ElementTree renames them), and
every other part is copied as it is, so nothing but the text changes. python-docx, python-pptx
and odfpy would each bring its own model of one format and rewrite the whole package; the three
formats share one idea here: a paragraph is a run of text pieces (OOXML's `w:t`/`a:t`,
OpenDocument's text between its spans), translated as one text cut into sentences, each
sentence's translation put back into the piece (and so the formatting) it started in.

An upload is bounded before it is read: its size (`--max-file-bytes`), its zip's entries, their
size unpacked and their expansion (a zip bomb gets 400 naming the limit), an entry's name
(absolute or with '..': refused). XML is parsed without entities, DTDs or the network.
"""

from __future__ import annotations

import bisect
import dataclasses
import io
import re
import zipfile
from typing import Callable

from vtx.serve.documents import Document, html_document, text_document
from vtx.serve.requests import RequestError

MAX_ZIP_ENTRIES = 1000  # entries of an office file
UNZIPPED_PER_BYTE = 10  # an office file unpacks to this many times --max-file-bytes at most
MAX_EXPANSION = 100  # an entry of over 1 MiB unpacks to this many times its packed size at most
EXPANSION_FLOOR = 1 << 20

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
A = "http://schemas.openxmlformats.org/drawingml/2006/main"
TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"


@dataclasses.dataclass(frozen=True)
class OfficeFormat:
    """Where an office format keeps its text: the zip entries (`parts`, a regular expression),
    the paragraph elements, and its pieces of text: elements of tag `text_tag`, or (None) the
    text between a paragraph's elements (OpenDocument's mixed content)."""

    parts: str
    paragraphs: tuple[str, ...]
    text_tag: str | None = None
    preserve_space: bool = False  # a changed piece says xml:space="preserve" (Word's w:t)


DOCX = OfficeFormat(r"word/(document|header\d*|footer\d*|footnotes|endnotes|comments)\.xml",
                    (f"{{{W}}}p",), f"{{{W}}}t", preserve_space=True)
PPTX = OfficeFormat(r"ppt/(slides/slide|notesSlides/notesSlide)\d+\.xml", (f"{{{A}}}p",),
                    f"{{{A}}}t")
ODF = OfficeFormat(r"content\.xml|styles\.xml", (f"{{{TEXT}}}p", f"{{{TEXT}}}h"))

# Extension -> (Content-Type, office format or None for text and HTML), as /frontend/settings
# lists them.
FORMATS = {
    ".txt": ("text/plain; charset=utf-8", None),
    ".html": ("text/html; charset=utf-8", None),
    ".docx": ("application/vnd.openxmlformats-officedocument.wordprocessingml.document", DOCX),
    ".pptx": ("application/vnd.openxmlformats-officedocument.presentationml.presentation",
              PPTX),
    ".odt": ("application/vnd.oasis.opendocument.text", ODF),
    ".odp": ("application/vnd.oasis.opendocument.presentation", ODF),
}


@dataclasses.dataclass(frozen=True)
class Upload:
    """A file sent to /translate_file: its name (a base name, no folder) and its bytes."""

    filename: str
    data: bytes

    @property
    def extension(self) -> str:
        dot = self.filename.rfind(".")
        return self.filename[dot:].lower() if dot > 0 else ""


@dataclasses.dataclass(frozen=True)
class FileDocument:
    """A file's texts, each cut into sentences (`documents`), and `write`: the file again from
    each document's translated parts (`Document.translated_parts`)."""

    documents: list[Document]
    write: Callable[[list[list[str]]], bytes]

    @property
    def texts(self) -> list[str]:
        """Each text as sent, which the request's limits count (`Access.admit`)."""
        return ["".join(document.parts) for document in self.documents]


def base_name(filename: str) -> str:
    """A sent file name without its folders (either slash) or control characters."""
    name = re.split(r"[/\\]", filename)[-1]
    return "".join(character for character in name if character.isprintable()).strip()


def read_file(upload: Upload, language: str, max_file_bytes: int,
              max_chars: int | None = None) -> FileDocument:
    """`upload` (of a `FORMATS` extension), its texts in `language`, as a document; texts of
    more than `max_chars` characters together are refused before they are cut into sentences.

    Raises:
        RequestError: a file over `max_file_bytes` (--max-file-bytes), text that is no UTF-8,
            an office file that is no zip of XML or past a zip limit (module docstring), too
            many characters.
    """
    if len(upload.data) > max_file_bytes:
        raise RequestError(f"Invalid request: the file's {len(upload.data)} bytes are over the "
                           f"server's limit of {max_file_bytes} (--max-file-bytes)")
    office = FORMATS[upload.extension][1]
    if office is not None:
        return _office_document(upload, office, language, max_file_bytes, max_chars)
    bom = "\ufeff" if upload.data.startswith(b"\xef\xbb\xbf") else ""
    try:
        text = upload.data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise RequestError(f"Invalid request: {upload.filename[:80]!r} is no UTF-8 text") \
            from None
    _check_chars(len(text), max_chars)
    read = html_document if upload.extension == ".html" else text_document
    return FileDocument([read(text, language)],
                        lambda translated: (bom + "".join(translated[0])).encode("utf-8"))


def open_zip(upload: Upload, max_file_bytes: int) -> zipfile.ZipFile:
    """`upload`'s zip, its entries checked against the limits of the module docstring.

    Raises:
        RequestError: no zip, too many entries, an unsafe name, too large unpacked.
    """
    try:
        package = zipfile.ZipFile(io.BytesIO(upload.data))
    except (zipfile.BadZipFile, ValueError):
        raise RequestError(f"Invalid request: {upload.filename[:80]!r} is no "
                           f"{upload.extension} file (no zip)") from None
    entries = package.infolist()
    if len(entries) > MAX_ZIP_ENTRIES:
        raise RequestError(f"Invalid request: the file holds {len(entries)} zip entries, over "
                           f"the server's limit of {MAX_ZIP_ENTRIES}")
    unzipped = UNZIPPED_PER_BYTE * max_file_bytes
    if (total := sum(entry.file_size for entry in entries)) > unzipped:
        raise RequestError(f"Invalid request: the file unpacks to {total} bytes, over the "
                           f"server's limit of {unzipped} ({UNZIPPED_PER_BYTE} times "
                           f"--max-file-bytes)")
    for entry in entries:
        name = entry.filename
        if name.startswith(("/", "\\")) or ".." in re.split(r"[/\\]", name) or ":" in name:
            raise RequestError(f"Invalid request: the zip entry {name[:80]!r} names a path "
                               f"outside the file")
        if entry.file_size > max(EXPANSION_FLOOR, MAX_EXPANSION * entry.compress_size):
            raise RequestError(f"Invalid request: the zip entry {name[:80]!r} expands "
                               f"{entry.file_size // max(1, entry.compress_size)} times, over "
                               f"the server's limit of {MAX_EXPANSION}")
    return package


def _check_chars(characters: int, max_chars: int | None) -> None:
    if max_chars is not None and characters > max_chars:
        raise RequestError(f"Invalid request: the file's text holds {characters} characters, "
                           f"more than a request's sentences may ({max_chars}: --max-lines "
                           f"times --max-line-chars)")


def _office_document(upload: Upload, office: OfficeFormat, language: str,
                     max_file_bytes: int, max_chars: int | None) -> FileDocument:
    """An office file's paragraphs of letters as documents; the others, and every part but its
    text's, kept as they are."""
    package = open_zip(upload, max_file_bytes)
    trees, paragraphs = {}, []
    try:
        for entry in package.infolist():
            if re.fullmatch(office.parts, entry.filename):
                trees[entry.filename] = tree = _parse_xml(package.read(entry), upload)
                paragraphs += [slots for slots in _paragraphs(tree, office)
                               if any(c.isalpha() for text in _texts(slots) for c in text)]
        contents = {entry.filename: package.read(entry) for entry in package.infolist()
                    if entry.filename not in trees}
    except (zipfile.BadZipFile, EOFError, OSError, NotImplementedError) as error:
        raise RequestError(f"Invalid request: {upload.filename[:80]!r}: {error}"[:240]) \
            from None
    texts = ["".join(_texts(slots)) for slots in paragraphs]
    _check_chars(sum(map(len, texts)), max_chars)
    documents = [text_document(text, language) for text in texts]

    def write(translated: list[list[str]]) -> bytes:
        for slots, document, parts in zip(paragraphs, documents, translated, strict=True):
            _put_back(slots, document.parts, parts, office)
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as written:
            for entry in package.infolist():
                data = contents.get(entry.filename)
                if data is None:
                    tree = trees[entry.filename]
                    data = _serialize(tree)
                written.writestr(entry, data)
        return out.getvalue()

    return FileDocument(documents, write)


def _parse_xml(data: bytes, upload: Upload):
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                             huge_tree=False, remove_blank_text=False)
    try:
        return etree.ElementTree(etree.fromstring(data, parser))
    except etree.XMLSyntaxError as error:
        raise RequestError(f"Invalid request: {upload.filename[:80]!r} holds malformed XML: "
                           f"{str(error)[:120]}") from None


def _serialize(tree) -> bytes:
    from lxml import etree

    info = tree.docinfo
    return etree.tostring(tree, xml_declaration=True, encoding=info.encoding or "UTF-8",
                          standalone=info.standalone)


# A paragraph's pieces of text: (element, "text" or "tail") in document order.
Slots = list[tuple[object, str]]


def _paragraphs(tree, office: OfficeFormat) -> list[Slots]:
    """The pieces of text of each paragraph of `tree`, a nested one's (a text box's, a note's)
    its own."""
    return [_slots(paragraph, office) for paragraph in tree.getroot().iter(*office.paragraphs)]


def _slots(paragraph, office: OfficeFormat) -> Slots:
    slots: Slots = [] if office.text_tag else [(paragraph, "text")]

    def walk(element) -> None:
        for child in element:
            if not isinstance(child.tag, str):  # a comment or processing instruction
                continue
            nested = child.tag in office.paragraphs
            if office.text_tag is None:
                if not nested:
                    slots.append((child, "text"))
                    walk(child)
                slots.append((child, "tail"))
            elif child.tag == office.text_tag:
                slots.append((child, "text"))
            elif not nested:
                walk(child)

    walk(paragraph)
    return slots


def _texts(slots: Slots) -> list[str]:
    return [getattr(element, where) or "" for element, where in slots]


def _put_back(slots: Slots, parts: list[str], translated: list[str],
              office: OfficeFormat) -> None:
    """Write a paragraph's `translated` parts (of its document's `parts`) into its pieces of
    text: each part into the piece holding the part's first character."""
    texts = _texts(slots)
    starts, offset = [], 0  # each non-empty piece's offset in the paragraph's text
    pieces = []
    for index, text in enumerate(texts):
        if text:
            starts.append(offset)
            pieces.append(index)
        offset += len(text)
    written = {index: [] for index in pieces}
    offset = 0
    for part, translation in zip(parts, translated, strict=True):
        written[pieces[max(0, bisect.bisect_right(starts, offset) - 1)]].append(translation)
        offset += len(part)
    for index, chunks in written.items():
        element, where = slots[index]
        text = "".join(chunks)
        setattr(element, where, text)
        if office.preserve_space and text != text.strip():
            element.set(XML_SPACE, "preserve")
