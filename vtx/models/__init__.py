"""Models built from vtx layers."""
