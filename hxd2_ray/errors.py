"""Exception types that cross module boundaries."""


class HxdError(Exception):
    """Base class for errors hxd2_ray raises on purpose, with a message meant for the user."""


class ConfigError(HxdError):
    """A configuration file or override is invalid; the message lists the valid values."""


class EmptyCorpusError(HxdError):
    """The input held no valid document, so no index was written."""


class IndexNotFoundError(HxdError):
    """The index path does not exist or holds no manifest (a half-written index has none)."""


class IndexMismatchError(HxdError):
    """The index was built with a model or setting the query configuration does not match."""


class BackendError(HxdError):
    """An external service (LLM, embedder, store) failed after its bounded retries."""


class ClusterStorageError(HxdError):
    """A path the job writes or reads is not the same on every node of the Ray cluster (a node-local disk)."""


class ClusterResourcesError(HxdError):
    """No alive node of the Ray cluster can host a stage's actors (the node that offered what they ask for is lost)."""


class BudgetReached(HxdError):
    """The run's token or cost budget is spent; what finished is kept and a rerun continues."""


class IndexDamagedError(IndexNotFoundError):
    """An index file is missing, truncated or altered: its size or sha256 differs from the manifest's record."""
