"""Files read into their texts and written back (`vtx.serve.files`), and the store of the
translated ones (`vtx.serve.file_store`); the documents made by python-docx, python-pptx and
odfpy, as an office suite's files would be."""

import io
import zipfile

import pytest

from vtx.serve.file_store import FileSettings, FileStore, TranslatedFile
from vtx.serve.files import MAX_ZIP_ENTRIES, Upload, base_name, read_file
from vtx.serve.requests import RequestError

SENTENCES = ["A man is riding a bike.", "Two dogs play in the snow.", "A woman is cooking."]


def shouted(upload: Upload) -> bytes:
    """`upload` written back with each sentence upper-cased: a translation easy to check."""
    document = read_file(upload, "en", 10 << 20)
    return document.write([part.translated_parts([line.upper() for line in part.lines])
                           for part in document.documents])


def docx_file() -> bytes:
    import docx

    document = docx.Document()
    paragraph = document.add_paragraph(SENTENCES[0] + " ")
    paragraph.add_run(SENTENCES[1]).bold = True
    document.add_paragraph("2024")  # no letter: kept
    document.add_table(rows=1, cols=1).cell(0, 0).text = SENTENCES[2]
    document.sections[0].header.paragraphs[0].text = SENTENCES[2]
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def pptx_file() -> bytes:
    import pptx

    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = SENTENCES[0]
    slide.placeholders[1].text = SENTENCES[1]
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def odt_file() -> bytes:
    from odf.opendocument import OpenDocumentText
    from odf.style import Style, TextProperties
    from odf.text import H, P, Span

    document = OpenDocumentText()
    bold = Style(name="Bold", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    document.automaticstyles.addElement(bold)
    document.text.addElement(H(outlinelevel=1, text=SENTENCES[2]))
    paragraph = P(text=SENTENCES[0] + " ")
    paragraph.addElement(Span(stylename=bold, text=SENTENCES[1]))
    document.text.addElement(paragraph)
    out = io.BytesIO()
    document.write(out)
    return out.getvalue()


# Each format's file of SENTENCES, as its suite writes it.
FILES = {".txt": lambda: f"{SENTENCES[0]} {SENTENCES[1]}\n\n{SENTENCES[2]}\n".encode(),
         ".html": lambda: f"<p class=x>{SENTENCES[0]}</p><script>var a = 1;</script>"
                          f"<ul><li>{SENTENCES[1]}</li></ul>".encode(),
         ".docx": docx_file, ".pptx": pptx_file, ".odt": odt_file}


def contents(extension: str, data: bytes) -> list:
    """What a reader of the file sees: its texts where they are, and their formatting."""
    if extension == ".docx":
        import docx

        document = docx.Document(io.BytesIO(data))
        return [[(run.text, run.bold) for run in p.runs] for p in document.paragraphs] + [
            document.tables[0].cell(0, 0).text, document.sections[0].header.paragraphs[0].text]
    if extension == ".pptx":
        import pptx

        slide = pptx.Presentation(io.BytesIO(data)).slides[0]
        return [shape.text_frame.text for shape in slide.shapes]
    if extension == ".odt":
        from odf import teletype
        from odf.opendocument import load

        heading, paragraph = load(io.BytesIO(data)).text.childNodes
        span = paragraph.childNodes[1]
        return [teletype.extractText(heading), teletype.extractText(paragraph),
                (teletype.extractText(span), span.getAttribute("stylename"))]
    return [data.decode("utf-8")]


def replaced(value, translations: dict[str, str]):
    """`value` (of `contents`) with each sentence of `translations` replaced by its own."""
    if isinstance(value, str):
        for sentence, translation in translations.items():
            value = value.replace(sentence, translation)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(replaced(item, translations) for item in value)
    return value


@pytest.mark.parametrize("extension", FILES)
def test_a_file_s_sentences_are_translated_in_place_and_its_formatting_kept(extension):
    data = FILES[extension]()
    translated = shouted(Upload("a" + extension, data))
    assert contents(extension, translated) == replaced(
        contents(extension, data), {sentence: sentence.upper() for sentence in SENTENCES})


def test_a_docx_s_runs_keep_their_bold_and_a_paragraph_of_no_letter_is_kept():
    assert contents(".docx", shouted(Upload("a.docx", docx_file())))[:2] == [
        [(SENTENCES[0].upper() + " ", None), (SENTENCES[1].upper(), True)], [("2024", None)]]


def test_an_office_file_s_texts_are_its_paragraphs_of_letters():
    # What the rate limit counts it as (`Access.admit`): one text a paragraph.
    assert read_file(Upload("a.docx", docx_file()), "en", 10 << 20).texts == [
        f"{SENTENCES[0]} {SENTENCES[1]}", SENTENCES[2], SENTENCES[2]]


def test_an_odt_keeps_its_mimetype_first_and_uncompressed():
    first = zipfile.ZipFile(io.BytesIO(shouted(Upload("a.odt", odt_file())))).infolist()[0]
    assert (first.filename, first.compress_type) == ("mimetype", zipfile.ZIP_STORED)


def test_a_text_file_keeps_its_byte_order_mark():
    text = f"{SENTENCES[0]}\n".encode()
    assert shouted(Upload("a.txt", b"\xef\xbb\xbf" + text)) == b"\xef\xbb\xbf" + text.upper()


def zipped(entries: dict[str, bytes], method=zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as package:
        for name, data in entries.items():
            package.writestr(name, data)
    return out.getvalue()


@pytest.mark.parametrize("entries, reason", [
    ({"word/document.xml": b"\0" * (50 << 20)}, r"expands \d+ times, over the server's limit "
                                                 r"of 100"),
    ({f"{i}.xml": b"" for i in range(MAX_ZIP_ENTRIES + 1)}, "1001 zip entries"),
    ({"../../etc/cron.d/x": b"x"}, "names a path outside the file"),
    ({"/etc/passwd": b"x"}, "names a path outside the file"),
    ({"word/document.xml": b"<w:document"}, "malformed XML"),
    # An entity of the document's own DTD is not expanded (billion laughs).
    ({"word/document.xml": b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaa">'
                           b'<!ENTITY b "&a;&a;&a;&a;">]><d>&b;</d>'}, None),
])
def test_a_hostile_office_file_is_refused_naming_the_limit(entries, reason):
    upload = Upload("a.docx", zipped(entries))
    if reason is None:
        assert read_file(upload, "en", 10 << 20).texts == []
        return
    with pytest.raises(RequestError, match=reason) as refused:
        read_file(upload, "en", 10 << 20)
    assert refused.value.status == 400


def test_a_file_over_the_limits_is_refused():
    with pytest.raises(RequestError, match="1001 bytes are over the server's limit of 1000 "
                                           r"\(--max-file-bytes\)"):
        read_file(Upload("a.txt", b"a" * 1001), "en", 1000)
    with pytest.raises(RequestError, match=r"unpacks to 20000 bytes, over the server's limit "
                                           r"of 10000 \(10 times --max-file-bytes\)"):
        read_file(Upload("a.docx", zipped({"media/a.bin": b"\0" * 20_000})), "en", 1000)
    with pytest.raises(RequestError, match="holds 88 characters, more than a request's "
                                           "sentences may"):
        read_file(Upload("a.docx", docx_file()), "en", 1 << 20, max_chars=25)
    with pytest.raises(RequestError, match="is no .docx file"):
        read_file(Upload("a.docx", b"not a zip"), "en", 1000)
    with pytest.raises(RequestError, match="is no UTF-8 text"):
        read_file(Upload("a.txt", b"\xff\xfe"), "en", 1000)


def test_a_sent_name_loses_its_folders():
    assert base_name("../../etc/passwd.txt") == "passwd.txt"
    assert base_name("C:\\Users\\me\\report.docx") == "report.docx"
    assert base_name("a\x00b\n.txt") == "ab.txt"


def test_the_store_drops_expired_and_oldest_files():
    now = [0.0]
    store = FileStore(FileSettings(max_file_bytes=10, ttl_s=5, max_files=2), lambda: now[0])
    file = TranslatedFile(b"x" * 100, "a_de.txt", "text/plain")
    first, second = store.put(file), store.put(file)
    assert len(first) >= 32 and store.get(first) == file
    assert store.get(store.put(file)) == file and store.get(first) is None  # the oldest dropped
    assert store.get(second) == file
    now[0] = 5.0
    assert store.get(second) is None and len(store) == 0
    assert store.get("made-up") is None
    # More bytes than it keeps (32 files of --max-file-bytes): the oldest go first.
    names = [store.put(TranslatedFile(b"x" * 200, "b.txt", "text/plain")) for _ in range(2)]
    assert store.get(names[0]) is None and store.get(names[1]) is not None
