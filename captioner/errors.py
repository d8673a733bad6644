"""User-facing errors: one line that names the file or value at fault and the fix."""


class CaptionerError(Exception):
    """An error the CLI prints as one line, without a traceback."""


class BadImageError(CaptionerError):
    """An image file that is missing, unreadable or truncated."""

    def __init__(self, path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class CacheMismatchError(CaptionerError):
    """A saved artifact (cache, rotation, checkpoint) made by another encoder, dataset or config."""


class DamagedArtifactError(CaptionerError):
    """A saved artifact (cache, rotation, checkpoint) that cannot be read: truncated, empty or garbled."""
