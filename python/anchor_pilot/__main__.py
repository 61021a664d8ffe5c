"""python -m anchor_pilot compare REFERENCE.jsonl RESUMED.jsonl | verify STEP_DIR"""
import sys

from .compare import compare_events, read_events
from .store import inspect


def main(argv):
    if len(argv) == 3 and argv[0] == "compare":
        m = compare_events(read_events(argv[1]), read_events(argv[2]))
        if m is None:
            print("match: the resumed run equals the reference (digests after restore, every loss, final digests)")
            return 0
        print("MISMATCH: %s" % m)
        return 3
    if len(argv) == 2 and argv[0] == "verify":
        v, problems = inspect(argv[1])
        if v is not None:
            print("%s: ok (step %d)" % (argv[1], v.step))
            return 0
        print("%s: INVALID, %d problems:" % (argv[1], len(problems)))
        for p in problems:
            print("  - " + p)
        return 3
    sys.stderr.write(__doc__ + "\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
