"""keras-hub's SentencePiece tokenizer over a vtx vocabulary, with vtx's special tokens."""

import keras
from keras_hub.tokenizers import SentencePieceTokenizer

from vtx.hub.backbone import TransformerBackbone


@keras.saving.register_keras_serializable(package="vtx")
class TransformerTokenizer(SentencePieceTokenizer):
    """`keras_hub.tokenizers.SentencePieceTokenizer` of a vtx vocabulary: pieces without BOS or
    EOS, as vtx encodes a source; start `<s>` (2), end `</s>` (3), pad `<pad>` (0), the ids every
    vtx vocabulary has (`vtx.data.vocab`).

    Args:
        proto: the serialized SentencePiece model (bytes) or its file.
    """

    backbone_cls = TransformerBackbone

    def __init__(self, proto=None, **kwargs):
        self._add_special_token("<s>", "start_token")
        self._add_special_token("</s>", "end_token")
        self._add_special_token("<pad>", "pad_token")
        super().__init__(proto=proto, **kwargs)

    def load_preset_assets(self, preset):
        """keras-hub's, once the preset is checked (`vtx.hub.check.check_preset`): its
        `from_preset` calls this before it reads the weights, so that keras-hub's own loading
        refuses a preset that is not whole too."""
        from pathlib import Path

        from vtx.hub.check import check_preset

        if Path(preset).is_dir():  # a local preset (a hub's handle is checked by its hub)
            check_preset(preset)
        super().load_preset_assets(preset)
