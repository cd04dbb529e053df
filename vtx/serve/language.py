"""The languages of a served model: their codes and names, and which language a text is in.

Language identification is py3langid's (a maintained fork of langid.py, Lui and Baldwin 2012: a
naive Bayes classifier over byte n-grams; its model, 140 languages, ships inside the package,
so nothing is downloaded), its scores normalized to probabilities.
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
        known = set(_identifier(None).labels)
        self.languages = tuple(sorted({code.lower() for code in languages} & known)) or None
        self._model = _identifier(self.languages)

    def detect(self, text: str, count: int = 1) -> list[tuple[str, float]]:
        """The `count` likeliest languages of `text`, each with its probability, likeliest
        first."""
        return [(code, float(p)) for code, p in self._model.rank(text)[:count]]
