"""The one exception family of dsanalyze.

The CLI turns every `DsAnalyzeError` into a one-line message and exit code 2
(`RunFailed`: 1). Messages say what went wrong and what to do about it.
"""


class DsAnalyzeError(Exception):
    """Base class: bad input or an environment the tool cannot work in."""

    exit_code = 2


class ConfigError(DsAnalyzeError):
    """An option, a config file or a size string that cannot be used."""


class DatasetError(DsAnalyzeError):
    """A dataset directory that is missing, empty or holds a corrupt file."""


class ResourceError(DsAnalyzeError):
    """A cgroup, page-cache or device operation that is not permitted here."""


class StoreError(DsAnalyzeError):
    """A results prefix that is missing or holds unreadable run files."""


class RunFailed(DsAnalyzeError):
    """A measured run that crashed, timed out or ran out of memory."""

    exit_code = 1


class NodeLost(RunFailed):
    """Another node's harness stopped responding, or never joined, in a multi-node sweep."""
