"""todo: a tiny command-line to-do list."""

__version__ = "0.3.0"
