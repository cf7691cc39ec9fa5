"""psycopg 3 through Sluice: every compat scenario, one PASS/FAIL/SKIP line each (see compat/README.md)."""

import threading
import time

import psycopg
from psycopg import errors, sql

from compat_common import DBNAME, HOST, LOCK_KEY, PASSWORD, PORT, TAG, USER, Report, expect

TABLE = "compat_" + TAG


def connect(**kw):
    # autocommit: no implicit BEGIN, so a connection holds a server only inside explicit transactions.
    return psycopg.connect(
        host=HOST, port=PORT, user=USER, password=PASSWORD, dbname=DBNAME,
        connect_timeout=10, autocommit=True, **kw,
    )


def scalar(conn, query, params=None):
    return conn.execute(query, params).fetchone()[0]


def s_connect():
    with connect() as c:
        expect(scalar(c, "SELECT current_user") == USER, "current_user is not " + USER)
        return "server_version=%s" % c.info.server_version


def s_simple_query():
    with connect() as c:
        cur = c.cursor()
        cur.execute("SELECT 1 + 1, 'text'::text")
        expect(cur.fetchone() == (2, "text"), "unexpected row")
        # Several statements in one simple Query message.
        cur.execute("SELECT 1; SELECT 2")
        expect(cur.fetchone() == (1,), "first result of a multi-statement query")
        expect(cur.nextset() and cur.fetchone() == (2,), "second result of a multi-statement query")
        return ""


def s_prepared():
    # Default prepare_threshold (5): from the 6th execution psycopg uses a named server-side statement
    # (_pg3_N). Two connections alternate so, in transaction mode, both land on the same servers; every
    # third round a third connection holds a server in a transaction, so they also move to another one.
    with connect() as a, connect() as b, connect() as blocker:
        for i in range(12):
            hold = i % 3 == 1
            if hold:
                blocker.execute("BEGIN")
                blocker.execute("SELECT 1")
            for c, k in ((a, 1), (b, 1000)):
                got = scalar(c, "SELECT %s::int * 2 + %s::int", (i, k))
                expect(got == i * 2 + k, "iteration %d: got %r" % (i, got))
            if hold:
                blocker.execute("COMMIT")
        expect(a.prepare_threshold == 5, "unexpected prepare_threshold")
        return "12 executions x 2 connections, prepare_threshold=5"


def s_transaction():
    with connect() as c, connect() as other:
        c.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(TABLE)))
        c.execute(sql.SQL("CREATE TABLE {} (id int primary key, v text)").format(sql.Identifier(TABLE)))
        t = sql.Identifier(TABLE)
        with c.transaction():
            c.execute(sql.SQL("INSERT INTO {} VALUES (1, 'committed')").format(t))
        try:
            with c.transaction():
                c.execute(sql.SQL("INSERT INTO {} VALUES (2, 'rolled back')").format(t))
                raise psycopg.Rollback()
        except psycopg.Rollback:
            pass
        # Explicit BEGIN/ROLLBACK statements as well.
        c.execute("BEGIN")
        c.execute(sql.SQL("INSERT INTO {} VALUES (3, 'rolled back')").format(t))
        c.execute("ROLLBACK")
        rows = other.execute(sql.SQL("SELECT id FROM {} ORDER BY id").format(t)).fetchall()
        expect(rows == [(1,)], "rows seen by another connection: %r" % rows)
        c.execute(sql.SQL("DROP TABLE {}").format(t))
        return ""


def s_error_in_tx():
    with connect() as c:
        c.execute("BEGIN")
        try:
            c.execute("SELECT 1/0")
            expect(False, "1/0 did not fail")
        except errors.DivisionByZero:
            pass
        try:
            c.execute("SELECT 1")
            expect(False, "statement after the error did not fail")
        except errors.InFailedSqlTransaction:
            pass
        c.execute("ROLLBACK")
        expect(scalar(c, "SELECT %s::int", (7,)) == 7, "work after rollback")
        # Error outside a transaction, then more work, including parameterized.
        try:
            c.execute("SELECT * FROM compat_no_such_table")
        except errors.UndefinedTable:
            pass
        expect(scalar(c, "SELECT 'ok'") == "ok", "work after error")
        return ""


def s_copy():
    t = sql.Identifier(TABLE + "_copy")
    with connect() as c:
        c.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(t))
        c.execute(sql.SQL("CREATE TABLE {} (id int, v text)").format(t))
        with c.cursor().copy(sql.SQL("COPY {} (id, v) FROM STDIN").format(t)) as cp:
            for i in range(5000):
                cp.write_row((i, "row %d" % i))
        expect(scalar(c, sql.SQL("SELECT count(*) FROM {}").format(t)) == 5000, "COPY FROM count")
        n, total = 0, 0
        with c.cursor().copy(sql.SQL("COPY (SELECT id, v FROM {} ORDER BY id) TO STDOUT").format(t)) as cp:
            for row in cp.rows():
                n += 1
                total += int(row[0])
        expect(n == 5000 and total == sum(range(5000)), "COPY TO got %d rows" % n)
        c.execute(sql.SQL("DROP TABLE {}").format(t))
        return "5000 rows in, 5000 out"


def s_large_result():
    with connect() as c:
        cur = c.execute("SELECT g, 'row ' || g FROM generate_series(1, 100000) g")
        n, total = 0, 0
        for row in cur:
            n += 1
            total += row[0]
        expect(n == 100000 and total == 100000 * 100001 // 2, "got %d rows" % n)
        expect(scalar(c, "SELECT 1") == 1, "work after large result")
        return "100000 rows"


def s_cancel():
    with connect() as c:
        timer = threading.Timer(0.3, c.cancel_safe)
        timer.start()
        t0 = time.monotonic()
        try:
            c.execute("SELECT pg_sleep(20)")
            expect(False, "pg_sleep was not cancelled")
        except errors.QueryCanceled:
            pass
        finally:
            timer.cancel()
        took = time.monotonic() - t0
        expect(took < 10, "cancel took %.1fs" % took)
        expect(scalar(c, "SELECT 1") == 1, "work after cancel")
        return "cancelled after %.2fs" % took


# work_mem and app.tenant: what set_isolation's connection A set.
SETTINGS = "SELECT current_setting('work_mem') || '/' || coalesce(current_setting('app.tenant', true), '')"
TENANT = "it's A"


def s_set_isolation():
    with connect() as a, connect() as b, connect() as c:
        a.execute("SET work_mem = '7777kB'")
        # A bound set_config (the value a driver parameter): tracked from the Bind's values.
        a.execute("SELECT set_config('app.tenant', %s, false)", (TENANT,))
        for name, conn in (("B", b), ("C", c)):
            seen = scalar(conn, SETTINGS)
            expect("7777kB" not in seen and TENANT not in seen,
                   "connection %s sees A's settings (%s)" % (name, seen))
        seen = scalar(a, SETTINGS)
        expect(seen == "7777kB/" + TENANT, "connection A lost its settings (%s)" % seen)
        return ""


def s_advisory_lock():
    with connect() as a, connect() as b:
        a.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        expect(scalar(b, "SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)) is False,
               "B got the lock A holds")
        expect(scalar(a, "SELECT pg_advisory_unlock(%s)", (LOCK_KEY,)) is True,
               "A does not hold its lock any more")
        expect(scalar(b, "SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)) is True,
               "B cannot take the lock after A released it")
        expect(scalar(b, "SELECT pg_advisory_unlock(%s)", (LOCK_KEY,)) is True, "B unlock")
        return ""


def s_listen_notify():
    chan = "compat_" + TAG
    with connect() as a, connect() as b:
        a.execute(sql.SQL("LISTEN {}").format(sql.Identifier(chan)))
        b.execute("SELECT pg_notify(%s, %s)", (chan, "hello from B"))
        got = list(a.notifies(timeout=3.0, stop_after=1))
        expect(len(got) == 1, "A received no notification within 3s")
        expect(got[0].channel == chan and got[0].payload == "hello from B",
               "wrong notification %r" % (got[0],))
        a.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(chan)))
        return ""


def s_pipeline():
    with connect() as c:
        with c.pipeline():
            curs = []
            for i in range(20):
                cur = c.cursor()
                cur.execute("SELECT %s::int + 1", (i,))
                curs.append(cur)
            c.execute("SELECT 'x'")
        for i, cur in enumerate(curs):
            expect(cur.fetchone()[0] == i + 1, "pipeline result %d" % i)
        # An error in the middle of a pipeline aborts the rest; the connection stays usable.
        try:
            with c.pipeline():
                c.execute("SELECT 1")
                c.execute("SELECT 1/0")
                c.execute("SELECT 2")
            expect(False, "no error from the pipeline")
        except errors.DivisionByZero:
            pass
        expect(scalar(c, "SELECT %s::text", ("after",)) == "after", "work after pipeline error")
        return "20 queries in one pipeline + error recovery"


def main():
    r = Report()
    for name, fn in [
        ("connect", s_connect),
        ("simple_query", s_simple_query),
        ("prepared", s_prepared),
        ("transaction", s_transaction),
        ("error_in_tx", s_error_in_tx),
        ("copy", s_copy),
        ("large_result", s_large_result),
        ("cancel", s_cancel),
        ("set_isolation", s_set_isolation),
        ("advisory_lock", s_advisory_lock),
        ("listen_notify", s_listen_notify),
        ("pipeline", s_pipeline),
    ]:
        r.run(name, fn)
    r.exit()


if __name__ == "__main__":
    main()
