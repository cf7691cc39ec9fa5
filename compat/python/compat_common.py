"""Shared bits of the Python driver programs: connection settings from the environment and the
PASS/FAIL/SKIP reporting of one scenario per line."""

import os
import zlib
import sys
import time
import traceback

HOST = os.environ.get("PGHOST", "127.0.0.1")
PORT = int(os.environ.get("PGPORT", "6432"))
USER = os.environ.get("PGUSER", "postgres")
PASSWORD = os.environ.get("PGPASSWORD", "")
DBNAME = os.environ.get("PGDATABASE", "postgres")
# Unique per program run: table, channel and lock names, so runs against one cluster never collide.
TAG = os.environ.get("COMPAT_TAG", "py%d" % os.getpid())
LOCK_KEY = zlib.crc32(TAG.encode()) % 1_000_000_000
ONLY = set(filter(None, os.environ.get("COMPAT_ONLY", "").split(",")))


class Check(Exception):
    """A scenario expectation that did not hold."""


def expect(cond, what):
    if not cond:
        raise Check(what)


class Report:
    def __init__(self):
        self.failed = 0

    def line(self, status, name, detail):
        detail = " ".join(str(detail).split())[:400]
        print("%s %s %s" % (status, name, detail), flush=True)
        if status == "FAIL":
            self.failed += 1

    def run(self, name, fn):
        if ONLY and name not in ONLY:
            return
        t0 = time.monotonic()
        try:
            detail = fn() or ""
            self.line("PASS", name, "%s (%.2fs)" % (detail, time.monotonic() - t0))
        except Check as e:
            self.line("FAIL", name, str(e))
        except Exception as e:  # noqa: BLE001 - any driver error fails the scenario
            self.line("FAIL", name, "%s: %s" % (type(e).__name__, e))
            traceback.print_exc(file=sys.stderr)

    async def run_async(self, name, fn, timeout=30):
        import asyncio

        if ONLY and name not in ONLY:
            return
        t0 = time.monotonic()
        try:
            detail = await asyncio.wait_for(fn(), timeout) or ""
            self.line("PASS", name, "%s (%.2fs)" % (detail, time.monotonic() - t0))
        except Check as e:
            self.line("FAIL", name, str(e))
        except asyncio.TimeoutError:
            self.line("FAIL", name, "timed out after %ss" % timeout)
        except Exception as e:  # noqa: BLE001
            self.line("FAIL", name, "%s: %s" % (type(e).__name__, e))
            traceback.print_exc(file=sys.stderr)

    def exit(self):
        sys.exit(1 if self.failed else 0)
