"""The error every layer raises for bad input (a setting, a file, a key): the message is for the user."""


class ConfigError(Exception):
    """A setting or file that cannot be used; the message names the file/key and what is wrong."""
