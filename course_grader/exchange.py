"""nbgrader's exchange, used only when a folder is named for it.

nbgrader's exchange moves exercises, submissions and feedback through a folder that every
account can write to (`c.Exchange.root`). A class that hands in by upload or through its LMS
(`make collect-zip`) has no such folder, and nbgrader then complains wherever it looks for one:
the formgrader's Manage Assignments page warns that the exchange "does not exist", and every
formgrader page logs a CRITICAL "Unwritable directory" line (each page builds nbgrader's API,
which lists the exchange).

The switch is naming the folder: `NBGRADER_EXCHANGE=/srv/nbgrader/exchange` (read by
nbgrader_config.py here and by the student edition's, so both sides use the same one), or
`c.Exchange.root` in any nbgrader configuration (the JupyterHub set-up's shared file). The
plugins below, set for every exchange action in nbgrader_config.py, are nbgrader's own when a
folder is named. When none is, listing finds nothing, silently (so the formgrader neither
warns nor logs, and the Assignment List shows no error), and every action that would move
files (release, fetch, submit, collect, feedback) fails with one message that says how to
turn the exchange on.
"""

from __future__ import annotations

from nbgrader.exchange.default import (
    ExchangeCollect,
    ExchangeFetchAssignment,
    ExchangeFetchFeedback,
    ExchangeList,
    ExchangeReleaseAssignment,
    ExchangeReleaseFeedback,
    ExchangeSubmit,
)

__all__ = ["NO_EXCHANGE", "PLUGINS", "exchange_named"]

NO_EXCHANGE = ("this course uses no nbgrader exchange: its students hand in by upload or "
               "through the LMS (make collect-zip). To use one, name its folder: "
               "NBGRADER_EXCHANGE=/srv/nbgrader/exchange, or c.Exchange.root in an nbgrader "
               "config")


def exchange_named(plugin) -> bool:
    """Whether the configuration of `plugin` (an exchange action) names the exchange's
    folder: `root` set for `Exchange` or for any class the plugin is made of."""
    return any("root" in plugin.config.get(cls.__name__, {}) for cls in type(plugin).__mro__)


class _OnlyWhenNamed:
    """An exchange action that runs as nbgrader's own when the folder is named, and
    otherwise fails with NO_EXCHANGE (before touching any folder)."""

    def start(self):
        if not exchange_named(self):
            self.fail(NO_EXCHANGE)
        return super().start()


class OptionalList(ExchangeList):
    """nbgrader's listing when the folder is named; otherwise nothing, without a warning
    (the formgrader lists the exchange on every page)."""

    def start(self):
        if not exchange_named(self):
            self.log.debug("no exchange listed: %s", NO_EXCHANGE)
            return []
        return super().start()


class OptionalReleaseAssignment(_OnlyWhenNamed, ExchangeReleaseAssignment):
    pass


class OptionalFetchAssignment(_OnlyWhenNamed, ExchangeFetchAssignment):
    pass


class OptionalSubmit(_OnlyWhenNamed, ExchangeSubmit):
    pass


class OptionalCollect(_OnlyWhenNamed, ExchangeCollect):
    pass


class OptionalReleaseFeedback(_OnlyWhenNamed, ExchangeReleaseFeedback):
    pass


class OptionalFetchFeedback(_OnlyWhenNamed, ExchangeFetchFeedback):
    pass


# nbgrader's ExchangeFactory setting for each action: c.ExchangeFactory.<action> = <class>
PLUGINS = {
    "list": OptionalList,
    "release_assignment": OptionalReleaseAssignment,
    "fetch_assignment": OptionalFetchAssignment,
    "submit": OptionalSubmit,
    "collect": OptionalCollect,
    "release_feedback": OptionalReleaseFeedback,
    "fetch_feedback": OptionalFetchFeedback,
}
