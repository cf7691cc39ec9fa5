"""asyncpg through Sluice (default statement cache: every query is a named prepared statement):
every compat scenario, one PASS/FAIL/SKIP line each (see compat/README.md)."""

import asyncio
import time

import asyncpg

from compat_common import DBNAME, HOST, LOCK_KEY, PASSWORD, PORT, TAG, USER, Report, expect

TABLE = "compat_" + TAG


async def connect():
    return await asyncpg.connect(
        host=HOST, port=PORT, user=USER, password=PASSWORD, database=DBNAME, timeout=10, ssl=False,
    )


class Conns:
    """`async with Conns(n) as (a, b, ...)`: n connections, all closed at the end."""

    def __init__(self, n):
        self.n = n
        self.conns = []

    async def __aenter__(self):
        for _ in range(self.n):
            self.conns.append(await connect())
        return self.conns

    async def __aexit__(self, *exc):
        for c in self.conns:
            try:
                await asyncio.wait_for(c.close(), 5)
            except Exception:  # noqa: BLE001 - a broken connection is fine to drop
                c.terminate()


async def s_connect():
    async with Conns(1) as (c,):
        expect(await c.fetchval("SELECT current_user") == USER, "current_user")
        return "server_version=%s" % (c.get_server_version(),)


async def s_simple_query():
    async with Conns(1) as (c,):
        # execute() without arguments uses the simple query protocol (several statements allowed).
        await c.execute("SELECT 1; SELECT 2")
        row = await c.fetchrow("SELECT 1 + 1 AS a, 'text'::text AS b")
        expect(tuple(row) == (2, "text"), "unexpected row %r" % (row,))
        return ""


async def s_prepared():
    # Default statement_cache_size=100: every fetch is a named statement (__asyncpg_stmt_N__)
    # prepared once per connection and reused. Two connections alternate; every third round a third
    # connection holds a server in a transaction, so in transaction mode they move between servers.
    async with Conns(3) as (a, b, blocker):
        for i in range(12):
            hold = i % 3 == 1
            if hold:
                await blocker.execute("BEGIN; SELECT 1")
            for c, k in ((a, 1), (b, 1000)):
                got = await c.fetchval("SELECT $1::int * 2 + $2::int", i, k)
                expect(got == i * 2 + k, "iteration %d: got %r" % (i, got))
            if hold:
                await blocker.execute("COMMIT")
        # And an explicit prepared statement object.
        st = await a.prepare("SELECT $1::text || 'x'")
        for i in range(6):
            expect(await st.fetchval(str(i)) == "%dx" % i, "explicit prepared statement")
        return "12 executions x 2 connections + explicit prepare"


async def s_transaction():
    async with Conns(2) as (c, other):
        await c.execute('DROP TABLE IF EXISTS "%s"; CREATE TABLE "%s" (id int primary key, v text)'
                        % (TABLE, TABLE))
        async with c.transaction():
            await c.execute('INSERT INTO "%s" VALUES ($1, $2)' % TABLE, 1, "committed")
        tx = c.transaction()
        await tx.start()
        await c.execute('INSERT INTO "%s" VALUES ($1, $2)' % TABLE, 2, "rolled back")
        await tx.rollback()
        rows = [r[0] for r in await other.fetch('SELECT id FROM "%s" ORDER BY id' % TABLE)]
        expect(rows == [1], "rows seen by another connection: %r" % rows)
        await c.execute('DROP TABLE "%s"' % TABLE)
        return ""


async def s_error_in_tx():
    async with Conns(1) as (c,):
        await c.execute("BEGIN")
        try:
            await c.fetchval("SELECT 1/$1::int", 0)
            expect(False, "1/0 did not fail")
        except asyncpg.DivisionByZeroError:
            pass
        try:
            await c.fetchval("SELECT 1")
            expect(False, "statement after the error did not fail")
        except asyncpg.InFailedSQLTransactionError:
            pass
        await c.execute("ROLLBACK")
        expect(await c.fetchval("SELECT $1::int", 7) == 7, "work after rollback")
        try:
            await c.fetch("SELECT * FROM compat_no_such_table")
        except asyncpg.UndefinedTableError:
            pass
        expect(await c.fetchval("SELECT 'ok'") == "ok", "work after error")
        return ""


async def s_copy():
    t = TABLE + "_copy"
    async with Conns(1) as (c,):
        await c.execute('DROP TABLE IF EXISTS "%s"; CREATE TABLE "%s" (id int, v text)' % (t, t))
        await c.copy_records_to_table(t, records=[(i, "row %d" % i) for i in range(5000)],
                                      columns=["id", "v"])
        expect(await c.fetchval('SELECT count(*) FROM "%s"' % t) == 5000, "COPY FROM count")
        chunks = []

        async def sink(data):
            chunks.append(data)

        await c.copy_from_query('SELECT id, v FROM "%s" ORDER BY id' % t, output=sink)
        lines = b"".join(chunks).decode().splitlines()
        expect(len(lines) == 5000 and lines[1] == "1\trow 1", "COPY TO got %d lines" % len(lines))
        await c.execute('DROP TABLE "%s"' % t)
        return "5000 rows in, 5000 out"


async def s_large_result():
    async with Conns(1) as (c,):
        rows = await c.fetch("SELECT g, 'row ' || g FROM generate_series(1, 100000) g")
        expect(len(rows) == 100000 and sum(r[0] for r in rows) == 100000 * 100001 // 2,
               "got %d rows" % len(rows))
        expect(await c.fetchval("SELECT 1") == 1, "work after large result")
        return "100000 rows"


async def s_cancel():
    async with Conns(1) as (c,):
        t0 = time.monotonic()
        # A timeout makes asyncpg send a CancelRequest on a new connection.
        try:
            await c.execute("SELECT pg_sleep(20)", timeout=0.3)
            expect(False, "pg_sleep was not cancelled")
        except asyncio.TimeoutError:
            pass
        took = time.monotonic() - t0
        try:
            expect(await c.fetchval("SELECT 1", timeout=10) == 1, "work after cancel")
        except asyncpg.QueryCanceledError:
            expect(False, "the query after the cancelled one was cancelled too (late CancelRequest)")
        expect(time.monotonic() - t0 < 10, "cancel took %.1fs" % (time.monotonic() - t0))
        # Cancel of a task running a query (the same CancelRequest path, without timeout).
        task = asyncio.ensure_future(c.fetchval("SELECT pg_sleep(20)"))
        await asyncio.sleep(0.3)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        try:
            expect(await c.fetchval("SELECT 2", timeout=10) == 2, "work after task cancel")
        except asyncpg.QueryCanceledError:
            expect(False, "the query after the cancelled task was cancelled too (late CancelRequest)")
        return "cancelled after %.2fs" % took


# work_mem and app.tenant: what set_isolation's connection A set.
SETTINGS = "SELECT current_setting('work_mem') || '/' || coalesce(current_setting('app.tenant', true), '')"
TENANT = "it's A"


async def s_set_isolation():
    async with Conns(3) as (a, b, c):
        await a.execute("SET work_mem = '7777kB'")
        # A bound set_config (the value a driver parameter): tracked from the Bind's values.
        await a.execute("SELECT set_config('app.tenant', $1, false)", TENANT)
        for name, conn in (("B", b), ("C", c)):
            seen = await conn.fetchval(SETTINGS)
            expect("7777kB" not in seen and TENANT not in seen,
                   "connection %s sees A's settings (%s)" % (name, seen))
        seen = await a.fetchval(SETTINGS)
        expect(seen == "7777kB/" + TENANT, "connection A lost its settings (%s)" % seen)
        return ""


async def s_advisory_lock():
    async with Conns(2) as (a, b):
        await a.execute("SELECT pg_advisory_lock(%d)" % LOCK_KEY)
        expect(await b.fetchval("SELECT pg_try_advisory_lock($1)", LOCK_KEY) is False,
               "B got the lock A holds")
        expect(await a.fetchval("SELECT pg_advisory_unlock($1)", LOCK_KEY) is True,
               "A does not hold its lock any more")
        expect(await b.fetchval("SELECT pg_try_advisory_lock($1)", LOCK_KEY) is True,
               "B cannot take the lock after A released it")
        expect(await b.fetchval("SELECT pg_advisory_unlock($1)", LOCK_KEY) is True, "B unlock")
        return ""


async def s_listen_notify():
    chan = "compat_" + TAG
    async with Conns(2) as (a, b):
        got = asyncio.get_running_loop().create_future()

        def on_notify(_conn, _pid, channel, payload):
            if not got.done():
                got.set_result((channel, payload))

        await a.add_listener(chan, on_notify)
        await b.execute("SELECT pg_notify($1, $2)", chan, "hello from B")
        try:
            channel, payload = await asyncio.wait_for(got, 3)
        except asyncio.TimeoutError:
            expect(False, "A received no notification within 3s")
        expect((channel, payload) == (chan, "hello from B"), "wrong notification")
        await a.remove_listener(chan, on_notify)
        return ""


async def main():
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
    ]:
        await r.run_async(name, fn)
    r.exit()


if __name__ == "__main__":
    asyncio.run(main())
