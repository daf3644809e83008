"""forgetmap: which upstream examples a language model forgets when fine-tuned on each of many tasks."""

__version__ = "0.1.0"
