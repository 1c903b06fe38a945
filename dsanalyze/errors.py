"""The one exception family of dsanalyze.

The CLI turns every `DsAnalyzeError` into a one-line message and exit code 2
(`RunFailed`: 1). Messages say what went wrong and what to do about it.
"""

from __future__ import annotations

import enum


class DsAnalyzeError(Exception):
    """Base class: bad input or an environment the tool cannot work in."""

    exit_code = 2


class ConfigError(DsAnalyzeError):
    """An option, a config file or a size string that cannot be used."""


class DatasetError(DsAnalyzeError):
    """A dataset directory that is missing, empty or holds a corrupt file."""


class CorruptSampleError(DatasetError):
    """A dataset file that cannot be decoded; the message names the file, or says
    how to find it. Raised inside a rank (the built-in job's PyTorch and DALI
    loaders): the rank records it as `FailureKind.CORRUPT_SAMPLE`, and the sweep
    stops, since every other run would read the same file."""


class FailureKind(enum.Enum):
    """Why a rank failed, as the rank itself classified the exception."""

    CRASH = "crash"  # any other exception or exit status
    CORRUPT_SAMPLE = "corrupt_sample"  # a CorruptSampleError

    @classmethod
    def of(cls, e: BaseException) -> FailureKind:
        return cls.CORRUPT_SAMPLE if isinstance(e, CorruptSampleError) else cls.CRASH


class ResourceError(DsAnalyzeError):
    """A cgroup, page-cache or device operation that is not permitted here."""


class StoreError(DsAnalyzeError):
    """A results prefix that is missing or holds unreadable run files."""


class RunFailed(DsAnalyzeError):
    """A measured run that crashed, timed out or ran out of memory."""

    exit_code = 1


class NodeLost(RunFailed):
    """Another node's harness stopped responding, or never joined, in a multi-node sweep."""


class EndpointError(ConfigError):
    """The data's endpoint cannot be used: unreachable, no credentials, no such bucket or
    object. Found before any run starts."""


class Interrupted(BaseException):
    """SIGTERM, turned into an exception so that cleanup code runs (a BaseException, as
    KeyboardInterrupt is: no `except Exception` swallows it). The CLI exits 143."""
