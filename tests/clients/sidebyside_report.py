"""Print the side-by-side report: python -m tests.clients.sidebyside_report [--examples N]."""

from __future__ import annotations

import argparse
import json
import time

from tests.clients import sidebyside, sidebyside_steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=20260101)
    parser.add_argument("--examples", type=int, default=1, help="examples per key")
    parser.add_argument("--show", type=int, action="append", default=[],
                        help="print both whole answers of this step (repeatable)")
    args = parser.parse_args()
    steps = sidebyside_steps.build(args.seed)
    started = time.monotonic()
    with sidebyside.two_servers() as (upstream, allotment):
        result = sidebyside.run(steps, upstream, allotment)
    print(result.report(examples=args.examples))
    for diff in result.differences:
        if diff.index in args.show:
            print(f"\n#{diff.index} {diff.step.describe()}")
            print("upstream: ", json.dumps(diff.upstream, sort_keys=True))
            print("allotment:", json.dumps(diff.allotment, sort_keys=True))
    print(f"\ntotal wall time {time.monotonic() - started:.1f} s (servers started)")


if __name__ == "__main__":
    main()
