# WMT14 English->German (paper: 4.5M pairs, joint vocabulary of about 37,000 tokens).
SRC=en
TGT=de
PAIR=deen
VOCAB_SIZE=37000
URLS=(
  http://statmt.org/wmt13/training-parallel-europarl-v7.tgz
  http://statmt.org/wmt13/training-parallel-commoncrawl.tgz
  http://statmt.org/wmt14/training-parallel-nc-v9.tgz
  http://statmt.org/wmt14/dev.tgz
  http://statmt.org/wmt14/test-full.tgz
)
CORPORA=(
  training/europarl-v7.de-en
  commoncrawl.de-en
  training/news-commentary-v9.de-en
)
BIG_DROPOUT=0.3
