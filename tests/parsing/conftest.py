"""Fixtures over the Penn Treebank sample in ../shared/data/ptb_sample (read in place, never copied)."""

import re
from pathlib import Path

import pytest

from vtx.parsing import trees


@pytest.fixture(scope="session")
def ptb_sample(shared_data) -> Path:
    """The folder holding wsj_0001.mrg ... wsj_0179.mrg and SOURCE.md."""
    return shared_data / "ptb_sample"


@pytest.fixture(scope="session")
def sample_files(ptb_sample) -> list[Path]:
    return sorted(ptb_sample.glob("wsj_*.mrg"))


@pytest.fixture(scope="session")
def sample_trees(sample_files) -> list[trees.Tree]:
    """Every tree of the sample, as read (outer unlabeled bracket, function tags, -NONE-)."""
    return [tree for path in sample_files for tree in trees.read_mrg(path)]


@pytest.fixture(scope="session")
def normalized_trees(sample_trees) -> list[trees.Tree]:
    return [trees.normalize(tree) for tree in sample_trees]


@pytest.fixture(scope="session")
def source_md_counts(ptb_sample) -> dict[str, int]:
    """file name -> tree count, from the table in SOURCE.md."""
    rows = re.findall(r"^\| (wsj_\d{4}\.mrg) \| \d+ \| (\d+) \|", (ptb_sample / "SOURCE.md").read_text(),
                      flags=re.MULTILINE)
    return {name: int(count) for name, count in rows}
