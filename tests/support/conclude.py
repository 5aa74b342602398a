"""The end of a check script: every failure at once, exit 1; or the success line."""
import sys


def conclude(failures, success):
    if failures:
        sys.exit("FAILED:\n" + "\n".join(failures))
    print(success)
