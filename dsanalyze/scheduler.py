"""Node settings a scheduler put in the environment (torchrun, a PyTorchJob pod, SLURM).

The harness reads them for the options not given on the command line
(`options.build_sweep`): the number of nodes, this node's rank, the master's
address and port, the ranks per node.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dsanalyze.errors import ConfigError


def from_environment(env: Mapping[str, str]) -> dict[str, Any]:
    """Node settings a scheduler put in the environment, for options not given.

    In order: torchrun's own `PET_*` variables; a PyTorchJob-style pod
    (`WORLD_SIZE` nodes, this one `RANK`, `MASTER_ADDR`/`MASTER_PORT`,
    `NPROC_PER_NODE`); SLURM (`SLURM_NNODES`, `SLURM_NODEID`, with
    `MASTER_ADDR` exported by the batch script). Empty when none is set.
    """
    def pick(*names: str) -> str | None:
        return next((env[n] for n in names if env.get(n)), None)

    if env.get("PET_NNODES"):
        nnodes, node_rank = pick("PET_NNODES"), pick("PET_NODE_RANK")
    elif env.get("WORLD_SIZE") and env.get("MASTER_ADDR") and env.get("RANK"):
        nnodes, node_rank = pick("WORLD_SIZE"), pick("RANK")
    elif env.get("SLURM_NNODES") and env.get("MASTER_ADDR"):
        nnodes, node_rank = pick("SLURM_NNODES"), pick("SLURM_NODEID")
    else:
        return {}
    out: dict[str, Any] = {}
    try:
        out["nnodes"] = int(str(nnodes).split(":")[-1])  # PET_NNODES may be "1:4"
        out["node_rank"] = int(node_rank or 0)
        port = pick("PET_MASTER_PORT", "MASTER_PORT")
        if port:
            out["master_port"] = int(port)
        nproc = pick("PET_NPROC_PER_NODE", "NPROC_PER_NODE")
        if nproc and nproc.isdigit():
            out["nproc_per_node"] = int(nproc)
    except ValueError as e:
        raise ConfigError(f"cannot read the node settings in the environment ({e}): "
                          "pass --nnodes/--node_rank/--master_addr/--master_port") from None
    addr = pick("PET_MASTER_ADDR", "MASTER_ADDR")
    if addr:
        out["master_addr"] = addr
    return out


def environment_defaults() -> dict[str, Any]:
    """`from_environment` of this process's environment."""
    return from_environment(os.environ)
