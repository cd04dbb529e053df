"""Data: SentencePiece vocabulary, binarization into shards, and the tf.data input pipeline. Depends only on vtx.config."""
