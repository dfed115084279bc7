"""Errors of the model layer. Each message is one line that says what happened and what to do."""


class ModelError(Exception):
    """A model could not be found, fetched, verified, packed or loaded."""
