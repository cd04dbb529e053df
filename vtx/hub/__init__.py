"""vtx's model in keras-hub: a Backbone, a SentencePiece tokenizer, a Seq2SeqLM preprocessor and
a Seq2SeqLM task whose `generate()` runs vtx's beam search.

Importing this package registers the classes with Keras, which `from_preset` needs:

    import keras_hub
    import vtx.hub  # noqa: F401
    translator = keras_hub.models.Seq2SeqLM.from_preset("DIR")
    translator.generate(["A man is riding a bike."])

`vtx.hub.load_preset("DIR")` does the same once the preset is checked against its manifest
(`vtx.manifest`); keras-hub's own `from_preset` checks it too, once it has read config.json.
"""

from vtx.hub.backbone import TransformerBackbone
from vtx.hub.check import check_preset
from vtx.hub.preset import load_preset
from vtx.hub.preprocessor import TransformerSeq2SeqLMPreprocessor
from vtx.hub.seq2seq_lm import TransformerSeq2SeqLM
from vtx.hub.tokenizer import TransformerTokenizer

__all__ = ["check_preset", "load_preset", "TransformerBackbone", "TransformerSeq2SeqLM", "TransformerSeq2SeqLMPreprocessor",
           "TransformerTokenizer"]
