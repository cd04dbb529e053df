"""Data: SentencePiece vocabulary, binarization into shards, the opened data directory
(`directory.DataDirectory`) and the tf.data input pipeline. Depends only on vtx.config and
vtx.errors."""
