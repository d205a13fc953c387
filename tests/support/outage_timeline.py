"""What clients see, every half second, while the database restarts under ``allotment serve``.

    .venv/bin/python -m tests.support.outage_timeline

For a private PostgreSQL cluster and a private MariaDB server
(``tests.support.dbservers``): a live server with 2 workers; each tick sends a read
(GET /resource_providers) and a write (POST /resource_providers) and prints
their statuses. The database is stopped after the tick at +1.0 s and started
again after the tick at +3.0 s; the lines in between say when exactly, and
how long after the database accepted connections the first normal answer
came. The server's log lines about the outage close each run.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path

from tests.clients import live
from tests.support.dbservers import SERVERS, call

TICK = 0.5
TICKS = 12
STOP_AFTER = 2  # ticks (+1.0 s)
START_AFTER = 6  # ticks (+3.0 s)


def timeline(backend: str) -> None:
    kind = SERVERS[backend]
    missing = kind.missing()
    if missing:
        print(f"{backend}: skipped, {missing}")
        return
    database = kind.create()
    assert database is not None
    workdir = Path(tempfile.mkdtemp(prefix="allotment-timeline-"))
    try:
        database.start()
        url = database.create_database("timeline")
        server = live.start(workdir, database_url=url)
        try:
            print(f"{backend} (private server on 127.0.0.1:{database.port}), "
                  "allotment serve with 2 workers")
            print("  tick      GET  POST")
            began = time.monotonic()
            for tick in range(1, TICKS + 1):
                time.sleep(max(0.0, began + tick * TICK - time.monotonic()))
                sent = time.monotonic() - began
                read = call(server.url, "GET", "/resource_providers")[0]
                write = call(server.url, "POST", "/resource_providers",
                             {"name": f"tick-{tick}-{uuid.uuid4().hex[:6]}"})[0]
                print(f"  t=+{sent:.1f}s  {read}  {write}")
                if tick == STOP_AFTER:
                    stopping = time.monotonic()
                    database.stop()
                    print(f"  -- t=+{stopping - began:.2f}s database stopped "
                          f"(shutdown took {time.monotonic() - stopping:.2f} s)")
                elif tick == START_AFTER:
                    accepting = database.start()
                    while call(server.url, "GET", "/resource_providers")[0] != 200:
                        time.sleep(0.005)
                    first = time.monotonic()
                    print(f"  -- t=+{accepting - began:.2f}s database accepts connections; "
                          f"first 200 {1000 * (first - accepting):.0f} ms later")
        finally:
            server.stop()
        for line in server.log_path.read_text(errors="replace").splitlines():
            if "allotment.db.availability" in line:
                print("  log:", line.split(" WARNING ", 1)[-1])
    finally:
        database.remove()


def main() -> None:
    for backend in ("postgresql", "mysql"):
        timeline(backend)
        print()


if __name__ == "__main__":
    main()
