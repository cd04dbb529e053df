"""vtx's model in keras-hub: a Backbone, a SentencePiece tokenizer, a Seq2SeqLM preprocessor and
a Seq2SeqLM task whose `generate()` runs vtx's beam search.

Importing this package registers the classes with Keras, which `from_preset` needs:

    import keras_hub
    import vtx.hub  # noqa: F401
    translator = keras_hub.models.Seq2SeqLM.from_preset("DIR")
    translator.generate(["A man is riding a bike."])
"""

from vtx.hub.backbone import TransformerBackbone
from vtx.hub.preprocessor import TransformerSeq2SeqLMPreprocessor
from vtx.hub.seq2seq_lm import TransformerSeq2SeqLM
from vtx.hub.tokenizer import TransformerTokenizer

__all__ = ["TransformerBackbone", "TransformerSeq2SeqLM", "TransformerSeq2SeqLMPreprocessor",
           "TransformerTokenizer"]
