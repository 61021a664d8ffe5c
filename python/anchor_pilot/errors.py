"""The one exception type: what failed, why, and what to do."""


class PilotError(Exception):
    """An error of the helper: ``what`` failed, ``why``, and a ``hint``.

    ``str(e)`` is ``"<what>: <why>"`` followed by ``"\\nhint: <hint>"`` when
    there is a hint, so a traceback shows all three.
    """

    def __init__(self, what, why, hint=None):
        self.what = what
        self.why = why
        self.hint = hint
        text = "%s: %s" % (what, why)
        if hint:
            text += "\nhint: " + hint
        super().__init__(text)


class SpecError(PilotError):
    """The spec file (ANCHOR_PILOT_SPEC) is missing, unreadable or invalid."""


class CheckpointError(PilotError):
    """A checkpoint cannot be saved, or none can be restored."""


class RestoreError(PilotError):
    """A checkpoint verified but does not fit what it is restored into."""
