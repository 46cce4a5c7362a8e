"""The GPU suite's load tests for longer (development aid): host threads on their own streams, captures from several
threads, a graph replayed beside eager calls, and many calls against torch's allocator.

    python tools/soak.py [--seconds 10] [--calls 100000]
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

import test_concurrency as load  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="per threaded test")
    ap.add_argument("--calls", type=int, default=100_000, help="calls of the allocator test")
    args = ap.parse_args()
    load.test_threads_on_their_own_streams_with_their_own_shapes(seconds=args.seconds)
    print(f"8 threads, own streams and shapes, {args.seconds:g} s: every result bit-identical, no memory left")
    load.test_captures_from_several_threads_at_once()
    print("captures from 4 threads at once: replays bit-identical")
    load.test_a_graph_replayed_while_other_threads_call_eagerly(seconds=args.seconds)
    print(f"a graph replayed beside 3 eager threads, {args.seconds:g} s: bit-identical")
    load.test_many_calls_leave_the_allocator_where_it_was(args.calls)
    print(f"{args.calls} calls: torch's allocator where it was")


if __name__ == "__main__":
    main()
