"""The LibreTranslate API (as LibreTranslate 1.9.6 answers it) on `vtx serve`: its requests,
read from the query string and the body (JSON or a form) as LibreTranslate's `request.values`,
into a `Job` of the server's batcher, and its answers.

    POST /translate  {q: text or [texts], source: code or "auto", target, format: "text" or
                     "html", alternatives: n, api_key, glossary: [[source, target], ...] (vtx's
                     own)} -> {translatedText: text or [texts], alternatives: [...] (with n > 0),
                     detectedLanguage: {confidence, language} (with "auto"), or a list of them}
    POST /detect     {q: text or [texts], api_key} -> [{confidence, language}]
    POST /suggest    {q, s (its better translation), source, target, api_key} ->
                     {success: true}, the suggestion appended to --suggestions FILE
    GET /languages   [{code, name, targets}]
    GET /frontend/settings

Each route and its fields are declared once, in `ROUTES`: the fields are read by them
(`read_value`), and GET /spec says them.

A text is cut into its sentences (`vtx.serve.documents`), each one line of the job, so that a
long text is searched in the shared batches as a file of lines is; the request's limits
(`vtx.serve.requests.Limits`) count those lines. Confidences are percentages, as
LibreTranslate's.
"""

from __future__ import annotations

import dataclasses
import email.parser
import email.policy
import json
import urllib.parse
from typing import Callable

from vtx.serve.access import Access
from vtx.serve.documents import Document, html_document, text_document
from vtx.serve.file_store import FileSettings
from vtx.serve.files import FORMATS, FileDocument, Upload, base_name, read_file
from vtx.serve.language import Detector, language_name
from vtx.serve.pairs import Pairs, Served
from vtx.serve.requests import (Job, Limits, Model, RequestError, check_chars, check_field,
                                job_of, read_json_object, shown)
from vtx.serve.spec import Field, Route

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
# The field of a refusal about one of the job's lines.
SENTENCES_FIELD = "q's sentences"
# Texts shorter than this are detected with the request's other texts (as LibreTranslate does).
SHORT_TEXT = 40

API_KEY = Field("api_key", "a string", "an api key of --api-keys (or an 'Authorization: Bearer "
                "KEY' header)")
TEXTS = "a string or a list of strings"
TRANSLATE = Route("POST", "/translate", "Translate text", "{translatedText, alternatives, "
                  "detectedLanguage}: of each text where q is a list", (
    Field("q", TEXTS, "the text to translate (in JSON, a list of texts)", required=True),
    Field("source", "a string", "the source language's code, or auto to detect it",
          required=True),
    Field("target", "a string", "the target language's code", required=True),
    Field("format", "a string", "the format of q", default="text", choices=("text", "html")),
    Field("alternatives", "an integer", "alternative translations wanted", default=0),
    API_KEY,
    Field("glossary", "a list of [source, target] pairs", "vtx's own: term pairs the "
          "translation keeps (in a form, as JSON text)")), tag="libretranslate")
DETECT = Route("POST", "/detect", "Detect the language of text", "[{confidence, language}], "
               "likeliest first", (
    Field("q", TEXTS, "the text (in JSON, a list of texts, detected together)", required=True),
    API_KEY), tag="libretranslate")
SUGGEST = Route("POST", "/suggest", "Suggest a better translation (with --suggestions)",
                "{success: true}; 403 where suggestions are disabled", (
    Field("q", "a string", "the original text", required=True),
    Field("s", "a string", "the suggested translation", required=True),
    Field("source", "a string", "the language of q", required=True),
    Field("target", "a string", "the language of s", required=True),
    API_KEY), tag="libretranslate")
TRANSLATE_FILE = Route(
    "POST", "/translate_file", "Translate a file: .txt, .html, .docx, .pptx, .odt, .odp",
    "{translatedFileUrl}: GET it within --file-ttl", (
        Field("file", "a file", "the file to translate", required=True),
        Field("source", "a string", "the source language's code, or auto to detect it",
              required=True),
        Field("target", "a string", "the target language's code", required=True),
        API_KEY), tag="libretranslate")
ROUTES = (TRANSLATE, DETECT, SUGGEST, TRANSLATE_FILE,
          Route("GET", "/download_file/{name}", "A translated file of POST /translate_file",
                "the file, as an attachment; 404 past --file-ttl",
                (Field("name", "a string", "the name of translatedFileUrl", where="path"),),
                tag="libretranslate"),
          Route("GET", "/languages", "The languages served",
                "[{code, name, targets, pivots}]: pivots, where there are some, {target: the "
                "middle language translated through}",
                tag="libretranslate"),
          Route("GET", "/frontend/settings", "LibreTranslate's settings of its page",
                "{charLimit, apiKeys, keyRequired, suggestions, language, ...}",
                tag="libretranslate"))


@dataclasses.dataclass(frozen=True)
class Translation:
    """A checked POST /translate: its texts as documents, its job, and what the answer says."""

    documents: list[Document]
    served: Served | None  # the pair's model that searches it; None: no text needs one
    job: Job | None  # None: no sentence to search
    batch: bool  # q was a list: the answer's fields are lists
    alternatives: int
    detected: list[dict] | None  # with source "auto": each text's {confidence, language}
    then: Served | None = None  # through a middle language: the pair from it into the target


@dataclasses.dataclass(frozen=True)
class Fields:
    """A request's fields as LibreTranslate reads them: a form's (URL-encoded, multipart, or
    none) as its `request.values`, a field of the query string winning over the form's; a JSON
    object's fields, then those of the query string that the object lacks (LibreTranslate reads
    no query beside JSON)."""

    values: dict
    texts: frozenset[str]  # the fields sent as form text (query or form), not as JSON values

    def get(self, name: str, default=None):
        return self.values.get(name, default)

    def __contains__(self, name: str) -> bool:
        return name in self.values


def read_fields(body: bytes, content_type: str, query: str = "") -> Fields:
    """The fields of a request: `query`, its query string as sent (percent-encoded), then its
    body, by `content_type` (the Content-Type header, with its parameters): JSON, a form, or
    nothing (a bodiless POST, as deep-translator sends). A form's field is its first value.

    Raises:
        RequestError: malformed JSON, a query or form that is no UTF-8, a multipart part that
            is a file or of an unknown charset.
    """
    values = _form_fields(query, "the query string")
    texts = set(values)
    kind = content_type.split(";")[0].strip().lower()
    if kind == "application/json":
        own = read_json_object(body)
        texts -= set(own)
    elif kind == "multipart/form-data":
        own = _multipart_fields(body, content_type)
        texts |= set(own)
    elif kind == "application/x-www-form-urlencoded":
        try:
            own = _form_fields(body.decode("utf-8"), "the form")
        except UnicodeDecodeError:
            raise RequestError("the form is no UTF-8 text") from None
        texts |= set(own)
    else:  # no body (the guard lets no other through)
        own = {}
    merged = {**values, **own} if kind == "application/json" else {**own, **values}
    return Fields(merged, frozenset(texts))


# LibreTranslate's fields and vtx's glossary; others are passed over, as LibreTranslate does.
FORM_FIELDS = frozenset(field.name for route in ROUTES for field in route.fields
                        if field.where != "path")


def _form_fields(form: str, where: str) -> dict:
    """The fields of a URL-encoded form (or query string): the first value of each."""
    try:
        pairs = urllib.parse.parse_qsl(form, keep_blank_values=True, errors="strict",
                                       max_num_fields=len(FORM_FIELDS) * 4)
    except UnicodeDecodeError:
        raise RequestError(f"{where} is no UTF-8 text") from None
    except ValueError as error:  # too many fields
        raise RequestError(f"{where}: {error}") from None
    fields: dict = {}
    for name, value in pairs:
        fields.setdefault(name, value)
    return fields


def read_upload(body: bytes, content_type: str, query: str = "") -> tuple[Fields, Upload | None]:
    """The fields of a POST /translate_file (`read_fields`: a multipart form and the query
    string) and its part `file`, if sent.

    Raises:
        RequestError: see `read_fields`; a file part as another field than 'file'.
    """
    files: dict = {}
    fields = _form_fields(query, "the query string")
    own = _multipart_fields(body, content_type, files)
    upload = files.get("file")
    return Fields({**own, **fields}, frozenset({*own, *fields})), upload


def _multipart_fields(body: bytes, content_type: str, files: dict | None = None) -> dict:
    """A multipart form's text fields, each part in its declared charset or else UTF-8 (RFC
    7578, 4.4: PHP's curl and browsers declare none); its part 'file', a file, put into
    `files` if given (as an `Upload`)."""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1", "replace") + b"\r\n\r\n" + body)
    if not message.is_multipart():
        raise RequestError("the multipart form has no parts (or no boundary)")
    fields: dict = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not name or name in fields:
            continue
        if part.is_multipart():
            raise RequestError(f"form field {shown(name)} is a {part.get_content_type()} part; "
                               f"send each field as text")
        if files is not None and name == "file":
            files.setdefault(name, Upload(base_name(part.get_filename() or ""),
                                          part.get_payload(decode=True) or b""))
            continue
        if part.get_content_maintype() != "text" or part.get_filename() is not None:
            raise RequestError(f"form field {shown(name)} is a file; send text")
        charset = part.get_content_charset() or "utf-8"
        try:
            fields[name] = part.get_payload(decode=True).decode(charset)
        except LookupError:
            raise RequestError(f"form field {shown(name)}: charset {shown(charset)} is "
                               f"unknown; send UTF-8") from None
        except UnicodeDecodeError:
            raise RequestError(f"form field {shown(name)} is no {charset} text") from None
    return fields


def translation(fields: Fields, pairs: Pairs, detector: Detector) -> Translation:
    """The checked request of POST /translate's `fields` to the pair of its source and target
    among `pairs`. A text in the target language already (its source is the target, or so it
    is detected) is answered as it is, as LibreTranslate does, and so is one of no letter
    (emoji, numbers).

    Raises:
        RequestError: a missing or malformed field, a language pair not served (naming it and
            those served), texts of one request detected in languages of different pairs, the
            text's sentences over a limit (see `vtx.serve.requests.job_of`).
    """
    limits = pairs.first.limits  # every pair's are the server's
    texts, batch = _texts(fields, TRANSLATE.field("q"), limits)
    # The served codes they name (zh-Hans: zh, pt-BR: pt where that is served).
    source, target = (code if code.lower() == "auto" else pairs.code(code) for code in (
        read_value(fields, TRANSLATE.field(name)) for name in ("source", "target")))
    format_field = TRANSLATE.field("format")
    # An empty format is text, as LibreTranslate takes it.
    text_format = read_value(fields, format_field) if fields.get("format") \
        else format_field.default
    alternatives = _alternatives(read_value(fields, TRANSLATE.field("alternatives")), limits)
    served, then, detected = _pair(source, target, texts, pairs, detector)
    read = html_document if text_format == "html" else text_document
    if text_format == "html":
        _check_markup(texts, limits)
    # A text in the target language already, or of no letter, is answered as it is.
    searched = [served is not None and _has_letters(text) and (
        detected is None or pairs.code(detected[index]["language"]) != target)
        for index, text in enumerate(texts)]
    documents = [read(text, served.pair.source) if search else Document([text], [])
                 for text, search in zip(texts, searched)]
    glossary = read_value(fields, TRANSLATE.field("glossary"))
    if glossary is not None and then is not None:
        raise RequestError(f"field 'glossary': {served.pair.source} into {target} goes "
                           f"through {served.pair.target} (two pairs), where a glossary's "
                           f"terms cannot be kept; send it without one")
    lines = [line for document in documents for line in document.lines]
    # Through a middle language the first pair's best translation only is translated on.
    job = _job(lines, 0 if then else alternatives, glossary, served.model()) if lines \
        else None
    return Translation(documents, served, job, batch, alternatives, detected, then)


def pivot_job(request: Translation | FileTranslation, results: list) -> Job:
    """The job of a request through a middle language: the best translation of each line by
    its first pair (`results`), searched by the second for the request's alternatives.

    Raises:
        RequestError: a translation over the second pair's limits (naming it).
    """
    middle = request.served.pair.target
    return _job([_text(hypotheses, 0) for hypotheses in results], request.alternatives, None,
                request.then.model(), f"q's sentences translated into {middle} (the pivot)")


def _job(lines: list[str], alternatives: int, glossary: list | None, model: Model,
         field: str = SENTENCES_FIELD) -> Job:
    """The job searching `lines` for `alternatives` more hypotheses (the beam raised to hold
    them), constrained by the request's `glossary`; a refusal names a line of `field`."""
    data = {"text": lines, "nbest": alternatives + 1}
    if alternatives + 1 > model.defaults.beam:
        data["beam"] = alternatives + 1
    if glossary is not None:
        data["glossary"] = glossary
    return job_of(data, model, field)


def _pair(source: str, target: str, texts: list[str], pairs: Pairs, detector: Detector
          ) -> tuple[Served | None, Served | None, list[dict] | None]:
    """The pair that translates `texts` from `source` (a code or "auto") into `target` (None:
    no text needs one), the pair that then translates its output into `target` where the
    first reaches it through a middle language (`Pairs.chain`; else None), and with "auto",
    each text's detected language (one of no letter: `target`, at confidence 0).

    Raises:
        RequestError: a language not served, or a pair not served, in LibreTranslate's words
            (its clients and tests read them); texts detected in the sources of different
            pairs.
    """
    auto = source.lower() == "auto"
    served_codes = pairs.languages()
    for code in [target] if auto else [source, target]:
        if code not in served_codes:
            raise RequestError(f"{code} is not supported")
    if not auto and source != target:
        try:
            return *_route(pairs, source, target), None
        except RequestError:
            raise RequestError(f"{language_name(target)} ({target}) is not available as a "
                               f"target language from {language_name(source)} ({source}): "
                               f"this server translates {pairs.described()} only") from None
    detected = _detect(texts, detector, target) if auto else None
    codes = [item["language"] for item in detected] if auto else [source]
    found = {code: _route(pairs, code, target, f"detected {code!r} for source 'auto'")
             for code in dict.fromkeys(codes) if pairs.code(code) != target}
    if len(found) > 1:
        raise RequestError(f"q's texts are detected in {', '.join(map(repr, found))}: send "
                           f"the texts of each language in a request of their own")
    return *next(iter(found.values()), (None, None)), detected


def _route(pairs: Pairs, source: str, target: str, said: str | None = None
           ) -> tuple[Served, Served | None]:
    """The pair from `source` into `target`, or else the two that chain through a middle
    language (`Pairs.chain`); `said`: as `Pairs.find`'s.

    Raises:
        RequestError: neither (`Pairs.find`'s refusal).
    """
    try:
        return pairs.find(source, target, said), None
    except RequestError:
        chained = pairs.chain(pairs.code(source), pairs.code(target))
        if chained is None:
            raise
        return chained


def _check_markup(texts: list[str], limits: Limits) -> None:
    """Refuse html texts of more markup ('<') than --max-html-tags (what their reading costs)."""
    tags = sum(text.count("<") for text in texts)
    if tags > limits.max_html_tags:
        raise RequestError(f"Invalid request: q's html holds {tags} tags ('<'), over the "
                           f"server's limit of {limits.max_html_tags} (--max-html-tags)")


def _has_letters(text: str) -> bool:
    return any(character.isalpha() for character in text)


def read_value(fields: Fields, field: Field):
    """`field`'s value in `fields`, of its kind, or its default where it is absent: an
    integer's digits as a string (a form's, or JSON's as LibreTranslate takes them) are the
    integer, a form's list is its JSON text.

    Raises:
        RequestError: a required field missing or empty (in LibreTranslate's words), a value
            not of its kind or not one of its choices (naming the field and the value).
    """
    value = fields.get(field.name)
    if field.required and not value:
        raise RequestError(f"Invalid request: missing {field.name} parameter")
    if field.name not in fields:
        return field.default
    if field.kind == "an integer" and isinstance(value, str) and value.isascii() \
            and value.isdigit() and len(value) < 10:
        value = int(value)
    elif field.kind.startswith("a list") and field.name in fields.texts:
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise RequestError(f"field {field.name!r}: expected {field.kind} as JSON text, got "
                               f"{shown(value)}") from None
    check_field(field.name, value, field.kind)
    if field.choices and value not in field.choices:
        raise RequestError(f"{shown(value)} {field.name} is not supported "
                           f"({' or '.join(field.choices)})")
    return value


def _texts(fields: Fields, field: Field, limits: Limits) -> tuple[list[str], bool]:
    """The texts of q (`field`), and whether q is a list of them (of --max-lines at most)."""
    q = read_value(fields, field)
    if isinstance(q, list):
        if len(q) > limits.max_lines:
            raise RequestError(f"Invalid request: q holds {len(q)} texts, over the server's "
                               f"limit of {limits.max_lines} (--max-lines)")
        return q, True
    # A form's line breaks as LF only (as LibreTranslate does).
    return ["\n".join(q.splitlines()) if "q" in fields.texts else q], False


def _alternatives(count: int, limits: Limits) -> int:
    if count < 0:
        raise RequestError(f"Invalid request: alternatives must be an integer >= 0, got "
                           f"{shown(count)}")
    if count + 1 > limits.max_beam:
        raise RequestError(f"Invalid request: alternatives ({shown(count)}) exceeds the "
                           f"server's limit of {limits.max_beam - 1} (--max-beam less one)")
    return count


def _detect(texts: list[str], detector: Detector, target: str) -> list[dict]:
    """Each text's language: a short one's is that of all the texts together; one of no letter
    is taken to be in `target` (confidence 0), so that it is answered as it is."""
    overall = None
    found = []
    for text in texts:
        if not _has_letters(text):
            found.append({"confidence": 0.0, "language": target})
        elif len(text) > SHORT_TEXT:
            found.append(detection(detector, text)[0])
        else:
            overall = overall or detection(detector, " ".join(texts))[0]
            found.append(overall)
    return found


def detection(detector: Detector, text: str, count: int = 1) -> list[dict]:
    """`text`'s likeliest languages as LibreTranslate says them."""
    return [{"confidence": round(100 * p, 1), "language": code}
            for code, p in detector.detect(text, count)]


def detect_text(fields: Fields, detector: Detector, limits: Limits) -> list[dict]:
    """The answer of POST /detect: q's likeliest languages, of a text or of a list of them
    together (as LibreTranslate's: each language's mean confidence over the texts it is
    likely for, ranked by that times those texts' characters).

    Raises:
        RequestError: q is missing, not a string or a list of them, or of more texts than
            --max-lines.
    """
    texts, batch = _texts(fields, DETECT.field("q"), limits)
    if not batch:
        return detection(detector, texts[0], 3)
    found: dict[str, list[tuple[float, int]]] = {}
    for text in texts:
        for item in detection(detector, text, 3):
            found.setdefault(item["language"], []).append((item["confidence"], len(text)))
    mean = {code: sum(c for c, _ in seen) / len(seen) for code, seen in found.items()}
    ranked = sorted(found, key=lambda code: -mean[code] * sum(n for _, n in found[code]))
    return [{"confidence": round(mean[code], 1), "language": code} for code in ranked]


def answer(request: Translation, results: list) -> dict:
    """The answer of POST /translate: `results`, each line's hypotheses (best first), put back
    into the request's documents."""
    translated, alternatives, start = [], [], 0
    for document in request.documents:
        hypotheses = results[start:start + len(document.sentences)]
        start += len(document.sentences)
        versions = [document.translated([_text(h, rank) for h in hypotheses])
                    for rank in range(request.alternatives + 1)]
        translated.append(versions[0])
        alternatives.append([v for v in dict.fromkeys(versions[1:]) if v != versions[0]])
    reply: dict = {"translatedText": translated if request.batch else translated[0]}
    if request.alternatives:
        reply["alternatives"] = alternatives if request.batch else alternatives[0]
    if request.detected is not None:
        reply["detectedLanguage"] = request.detected if request.batch else request.detected[0]
    return reply


def _text(hypotheses: list, rank: int) -> str:
    """The text of a line's hypothesis of `rank`, or its last one when it has fewer."""
    return hypotheses[min(rank, len(hypotheses) - 1)].text if hypotheses else ""


def suggestion(fields: Fields, pairs: Pairs) -> dict:
    """The record of a POST /suggest's `fields`: q, s, and the served codes of source and
    target.

    Raises:
        RequestError: a field missing or not a string, q or s over --max-line-chars, a language
            not served (in LibreTranslate's words).
    """
    pairs.told()
    record = {name: read_value(fields, SUGGEST.field(name))
              for name in ("q", "s", "source", "target")}
    for name in ("q", "s"):
        check_chars(record[name], pairs.first.limits.max_line_chars, name, "--max-line-chars")
    for name in ("source", "target"):
        record[name] = pairs.code(record[name])
        if record[name] not in pairs.languages():
            raise RequestError(f"{shown(record[name])} is not supported")
    return record


def frontend_settings(pairs: Pairs, access: Access, suggestions: bool,
                      files: FileSettings) -> dict:
    """GET /frontend/settings, in LibreTranslate's shape: the first pair's languages chosen,
    whether `access` holds keys and asks
    for one (not with --api-keys-optional), its --char-limit (-1: none), whether POST /suggest takes suggestions, the
    file formats translated (none with --disable-files-translation)."""
    pairs.told()
    pair = pairs.first.pair
    keys = access.keys is not None
    return {"charLimit": access.char_limit or -1, "frontendTimeout": 500, "apiKeys": keys,
            "keyRequired": keys and not access.keys_optional, "suggestions": suggestions, "filesTranslation": files.enabled,
            "supportedFilesFormat": list(FORMATS) if files.enabled else [],
            "language": {"source": {"code": pair.source, "name": language_name(pair.source)},
                         "target": {"code": pair.target, "name": language_name(pair.target)}}}


# The field of a refusal about one of a file's sentences.
FILE_SENTENCES_FIELD = "file's sentences"
DETECTED_CHARACTERS = 4096  # of a file's text, detected with source "auto"


@dataclasses.dataclass(frozen=True)
class FileTranslation:
    """A checked POST /translate_file: its file read, the job of its sentences (None: none to
    search, as in a file in the target language), and the name it is downloaded as."""

    document: FileDocument
    served: Served | None
    job: Job | None
    filename: str  # the upload's name with the target code: report.docx -> report_de.docx
    content_type: str
    then: Served | None = None  # as Translation's
    alternatives: int = 0


def upload_of(fields: Fields, upload: Upload | None) -> Upload:
    """The file of a POST /translate_file, checked as LibreTranslate checks it.

    Raises:
        RequestError: in LibreTranslate's words: a missing file, source or target, a file of
            no name, or of an extension not in `FORMATS`.
    """
    if upload is None:
        raise RequestError("Invalid request: missing file parameter")
    for name in ("source", "target"):
        read_value(fields, TRANSLATE_FILE.field(name))
    if not upload.filename:
        raise RequestError("Invalid request: empty file")
    if upload.extension not in FORMATS:
        raise RequestError("Invalid request: file format not supported")
    return upload


def file_translation(fields: Fields, upload: Upload, max_file_bytes: int, pairs: Pairs,
                     detector: Detector, admit: Callable[[list[str]], None]) -> FileTranslation:
    """The checked request of POST /translate_file: `upload` (`upload_of`'s) read into its
    texts (`read_file`), which `admit` lets through or refuses (as /translate's `q`), and
    their sentences into one job.

    Raises:
        RequestError: see `translation`'s language checks, `read_file`, `job_of`; `admit`'s.
    """
    source, target = (code if code.lower() == "auto" else pairs.code(code)
                      for code in (read_value(fields, TRANSLATE_FILE.field(name))
                                   for name in ("source", "target")))
    auto = source.lower() == "auto"
    limits = pairs.first.limits
    read = lambda language: read_file(upload, language, max_file_bytes,
                                      limits.max_lines * limits.max_line_chars)
    document = read(pairs.first.pair.source if auto else source)
    # With "auto", the file's language is its text's start's.
    probe = [" ".join(document.texts)[:DETECTED_CHARACTERS]] if auto else []
    served, then, _ = _pair(source, target, probe, pairs, detector)
    language = served.pair.source if served is not None else target
    if auto and language != pairs.first.pair.source:  # cut into that language's sentences
        document = read(language)
    admit(document.texts)
    lines = [line for part in document.documents for line in part.lines]
    job = _job(lines, 0, None, served.model(), FILE_SENTENCES_FIELD) \
        if lines and served is not None else None
    stem = upload.filename[:-len(upload.extension)]
    return FileTranslation(document, served, job, f"{stem}_{target}{upload.extension}",
                           FORMATS[upload.extension][0], then)


def translated_file(request: FileTranslation, results: list) -> bytes:
    """The file of `request` with each sentence replaced by its best hypothesis of `results`."""
    translated, start = [], 0
    for document in request.document.documents:
        hypotheses = results[start:start + len(document.sentences)]
        start += len(document.sentences)
        translated.append(document.translated_parts([_text(h, 0) for h in hypotheses])
                          if request.job is not None else document.parts)
    return request.document.write(translated)
