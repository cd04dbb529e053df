"""The languages of a served model: their codes and names, and which language a text is in.

Language identification is py3langid's (a maintained fork of langid.py, Lui and Baldwin 2012: a
naive Bayes classifier over byte n-grams; its model, 140 languages, ships inside the package,
so nothing is downloaded), its scores normalized to probabilities. A text is judged by its first
DETECT_CHARS characters: more change no answer and cost every other client of the server.
"""

from __future__ import annotations

import dataclasses
import functools

from vtx.errors import ArgumentError

# English names of the languages LibreTranslate lists, by ISO 639 code; others are named by code.
LANGUAGE_NAMES = {
    "ar": "Arabic", "az": "Azerbaijani", "bg": "Bulgarian", "bn": "Bengali", "ca": "Catalan",
    "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek", "en": "English",
    "eo": "Esperanto", "es": "Spanish", "et": "Estonian", "eu": "Basque", "fa": "Persian",
    "fi": "Finnish", "fr": "French", "ga": "Irish", "gl": "Galician", "he": "Hebrew",
    "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian", "it": "Italian", "ja": "Japanese",
    "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian", "ms": "Malay", "nb": "Norwegian",
    "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian",
    "sk": "Slovak", "sl": "Slovenian", "sq": "Albanian", "sv": "Swedish", "th": "Thai",
    "tl": "Tagalog", "tr": "Turkish", "uk": "Ukrainian", "ur": "Urdu", "vi": "Vietnamese",
    "zh": "Chinese", "zt": "Chinese (traditional)",
}

# The characters of a text that detection reads: py3langid's accuracy is flat well before this,
# and its n-grams are counted in Python, holding the interpreter's lock from the searches.
DETECT_CHARS = 1_000


@dataclasses.dataclass(frozen=True)
class LanguagePair:
    """The languages a served model translates from and into (`vtx serve --source-lang`,
    `--target-lang`): ISO 639 codes, compared without case."""

    source: str
    target: str

    def __post_init__(self) -> None:
        for name in ("source", "target"):
            code = getattr(self, name)
            if not code or not code.replace("-", "").replace("_", "").isalnum() or code == "auto":
                raise ArgumentError("{" + name + "_lang} must be a language code such as 'en', "
                                    "got {value}", value=code)
        if self.source.lower() == self.target.lower():
            raise ArgumentError("{source_lang} and {target_lang} are both {value}",
                                value=self.source)

    @property
    def name(self) -> str:
        """The pair as `--model` and /v1's "model" name it: en-de, or pt-BR:en where a code
        holds a '-' (`pair_of` reads both)."""
        joint = ":" if "-" in self.source + self.target else "-"
        return f"{self.source}{joint}{self.target}"


def pair_of(name: str) -> LanguagePair:
    """The pair a name gives: SOURCE-TARGET (en-de), or SOURCE:TARGET where a code holds a '-'
    (pt-BR:en, zh-Hans:en).

    Raises:
        ArgumentError: no two codes so joined, or a code LanguagePair refuses ({value}).
    """
    codes = name.split(":") if ":" in name else name.split("-")
    if len(codes) != 2 or not all(codes):
        raise ArgumentError("{value} is no language pair: two codes joined by '-', such as "
                            "en-de, or by ':' where a code holds a '-', such as pt-BR:en",
                            value=repr(name))
    return LanguagePair(*codes)


# Codes that name one language, compared without case: LibreTranslate's current and former
# ones (it took zh-Hans, zh-Hant and pt-BR for zh, zt and pb) and the BCP 47 tags clients send.
SAME_LANGUAGES = ({"zh", "zh-hans", "zh-cn", "zh-sg"}, {"zt", "zh-hant", "zh-tw", "zh-hk"},
                  {"pb", "pt-br"}, {"nb", "no", "nb-no"})


def served_code(code: str, served: list[str]) -> str:
    """The code among `served` that a request's `code` names: the same without case, one of
    `SAME_LANGUAGES`, or its language without a region (pt-PT, en-US: pt, en); else `code`."""
    wanted = code.lower()
    same = next((group for group in SAME_LANGUAGES if wanted in group), {wanted})
    for candidates in (same, {wanted.split("-")[0]} if _region(wanted) else set()):
        match = next((s for s in served if s.lower() in candidates), None)
        if match is not None:
            return match
    return code


def _region(code: str) -> bool:
    """Whether `code` is a language and a region (pt-BR, es-419), not a script (zh-Hant)."""
    parts = code.split("-")
    return len(parts) == 2 and (len(parts[1]) == 2 and parts[1].isalpha()
                                or len(parts[1]) == 3 and parts[1].isdigit())


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code.lower(), code)


@functools.cache
def _identifier(languages: tuple[str, ...] | None):
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    if languages:
        identifier.set_languages(list(languages))
    return identifier


class Detector:
    """Which of `languages` (ISO 639 codes; those py3langid knows, all 140 when it knows none)
    a text is in."""

    def __init__(self, languages: tuple[str, ...] = ()):
        known = list(_identifier(None).labels)
        labels = {served_code(code, known) for code in languages}  # zh-Hans: zh, pt-BR: pt
        self.languages = tuple(sorted(labels & set(known))) or None
        self._model = _identifier(self.languages)

    def detect(self, text: str, count: int = 1) -> list[tuple[str, float]]:
        """The `count` likeliest languages of `text`, each with its probability, likeliest
        first, judged by its first DETECT_CHARS characters."""
        return [(code, float(p)) for code, p in self._model.rank(text[:DETECT_CHARS])[:count]]
