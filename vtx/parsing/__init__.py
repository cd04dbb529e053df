"""Constituency parsing utilities: Penn Treebank trees, linearization, EVALB-style scoring. Depends on nothing else in vtx."""
