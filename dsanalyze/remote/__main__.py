"""`python -m dsanalyze.remote DIR [--backend s3|http] [--net-bw 4M] [--net-latency 20ms]`:
serve a directory behind a shaped link until Ctrl-C or SIGTERM (`make servers`); prints the
endpoint and the environment a job needs, one `KEY=value` a line."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from dsanalyze.config import parse_bandwidth, parse_duration_s
from dsanalyze.errors import DsAnalyzeError
from dsanalyze.remote.served import Backend, ServedData


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dsanalyze.remote", description=__doc__)
    p.add_argument("root", help="the directory to serve")
    p.add_argument("--backend", choices=[b.value for b in Backend], default="http")
    p.add_argument("--net-bw", default="none", help="download bandwidth, e.g. 4M (none)")
    p.add_argument("--net-latency", default="0", help="added per request, e.g. 20ms (0)")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    try:
        with ServedData.start(Path(args.root), Backend(args.backend)) as served:
            served.shape(parse_bandwidth(args.net_bw), parse_duration_s(args.net_latency))
            for key, value in served.job_env().items():
                print(f"{key}={value}", flush=True)
            threading.Event().wait()
    except KeyboardInterrupt:
        return 0
    except DsAnalyzeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
