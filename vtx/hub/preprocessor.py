"""Text to vtx's token ids for the keras-hub Seq2SeqLM: sources as vtx encodes them.

Shapes: B batch, S encoder sequence length, T decoder sequence length.
"""

import keras
from keras_hub.layers import StartEndPacker
from keras_hub.models import Seq2SeqLMPreprocessor

from vtx.hub.backbone import TransformerBackbone
from vtx.hub.tokenizer import TransformerTokenizer


@keras.saving.register_keras_serializable(package="vtx")
class TransformerSeq2SeqLMPreprocessor(Seq2SeqLMPreprocessor):
    """`keras_hub.models.Seq2SeqLMPreprocessor` with vtx's conventions: the encoder gets the
    source's pieces alone (no start or end token: vtx's models never see one there), cut to
    `encoder_sequence_length`; the decoder gets `<s>`, the target's pieces and `</s>`.

    Args:
        tokenizer: a `TransformerTokenizer`.
        encoder_sequence_length: S, the model's positions (longer sources are cut, as
            `vtx translate` cuts them).
        decoder_sequence_length: T.
    """

    backbone_cls = TransformerBackbone
    tokenizer_cls = TransformerTokenizer

    def build(self, input_shape):
        tokenizer = self.tokenizer
        self.encoder_packer = StartEndPacker(pad_value=tokenizer.pad_token_id,
                                             sequence_length=self.encoder_sequence_length,
                                             return_padding_mask=True)
        self.decoder_packer = StartEndPacker(start_value=tokenizer.start_token_id,
                                             end_value=tokenizer.end_token_id,
                                             pad_value=tokenizer.pad_token_id,
                                             sequence_length=self.decoder_sequence_length,
                                             return_padding_mask=True)
        self.built = True

    def get_config(self):
        return {**super().get_config(), "encoder_sequence_length": self.encoder_sequence_length,
                "decoder_sequence_length": self.decoder_sequence_length}
