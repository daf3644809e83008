"""The errors forgetmap raises for bad input: each names what is wrong and where; and the one format of its
log records (every job's process and every training process under torchrun write it)."""

LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


class ForgetmapError(Exception):
    """Base class: a message a user can act on, printed without a traceback by the CLI."""


class ConfigError(ForgetmapError):
    """A config value is missing, of the wrong type, or refers to something that does not exist."""


class DataError(ForgetmapError):
    """An input file is malformed: the message names the file, and the row and column if any."""


class UsageError(ForgetmapError):
    """A command's arguments do not go together: the message says which to give."""
