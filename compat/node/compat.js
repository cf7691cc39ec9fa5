// node-postgres (pg) through Sluice: named queries ({name, text, values}) are server-side named
// prepared statements. Every compat scenario, one PASS/FAIL/SKIP line each (see compat/README.md).
'use strict'

const crypto = require('crypto')
const { Client } = require('pg')
const { from: copyFrom, to: copyTo } = require('pg-copy-streams')
const { pipeline } = require('stream/promises')
const { Readable, Writable } = require('stream')

const TAG = process.env.COMPAT_TAG || `node${process.pid}`
const TABLE = `compat_${TAG}`
const LOCK_KEY = crypto.createHash('sha1').update(TAG).digest().readUInt32BE(0) % 1000000000
const ONLY = new Set((process.env.COMPAT_ONLY || '').split(',').filter(Boolean))

class Check extends Error {}
function expect(cond, msg) {
  if (!cond) throw new Check(msg)
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// Connection settings come from PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE.
async function connect() {
  const c = new Client({ connectionTimeoutMillis: 10000 })
  c.on('error', () => {}) // a dropped connection fails the running scenario, not the process
  await c.connect()
  return c
}

async function withConns(n, fn) {
  const cs = []
  try {
    for (let i = 0; i < n; i++) cs.push(await connect())
    return await fn(...cs)
  } finally {
    for (const c of cs) await Promise.race([c.end().catch(() => {}), sleep(5000)])
  }
}

async function val(c, q) {
  const r = await c.query(q)
  return r.rows[0][Object.keys(r.rows[0])[0]]
}

const scenarios = {
  async connect() {
    return withConns(1, async (c) => {
      expect((await val(c, 'SELECT current_user AS u')) === process.env.PGUSER, 'current_user')
      return `server_version=${(await c.query('SHOW server_version')).rows[0].server_version}`
    })
  },

  async simple_query() {
    return withConns(1, async (c) => {
      // A query without values goes as one simple Query message (several statements allowed).
      const r = await c.query("SELECT 1 AS a; SELECT 1 + 1 AS a, 'text'::text AS b")
      expect(Array.isArray(r) && r.length === 2, 'two results')
      expect(r[1].rows[0].a === 2 && r[1].rows[0].b === 'text', 'unexpected row')
      return ''
    })
  },

  async prepared() {
    // Named queries: Parse once per connection with the given name, then Bind/Execute only.
    // Two connections alternate; every third round a third one holds a server in a transaction, so
    // in transaction mode they also move between servers.
    return withConns(3, async (a, b, blocker) => {
      for (let i = 0; i < 12; i++) {
        const hold = i % 3 === 1
        if (hold) await blocker.query('BEGIN; SELECT 1')
        for (const [c, k] of [[a, 1], [b, 1000]]) {
          const r = await c.query({
            name: 'compat_q',
            text: 'SELECT $1::int * 2 + $2::int AS v',
            values: [i, k],
          })
          expect(r.rows[0].v === i * 2 + k, `iteration ${i}: got ${r.rows[0].v}`)
        }
        if (hold) await blocker.query('COMMIT')
      }
      // Unnamed extended protocol (parameters without a name).
      const r = await a.query('SELECT $1::text AS t', ['x'])
      expect(r.rows[0].t === 'x', 'unnamed parameterized query')
      return '12 executions x 2 connections of one named query'
    })
  },

  async transaction() {
    return withConns(2, async (c, other) => {
      await c.query(`DROP TABLE IF EXISTS "${TABLE}"; CREATE TABLE "${TABLE}" (id int primary key, v text)`)
      await c.query('BEGIN')
      await c.query(`INSERT INTO "${TABLE}" VALUES ($1, $2)`, [1, 'committed'])
      await c.query('COMMIT')
      await c.query('BEGIN')
      await c.query(`INSERT INTO "${TABLE}" VALUES ($1, $2)`, [2, 'rolled back'])
      await c.query('ROLLBACK')
      const r = await other.query(`SELECT id FROM "${TABLE}" ORDER BY id`)
      expect(r.rows.length === 1 && r.rows[0].id === 1, `rows seen by another connection: ${JSON.stringify(r.rows)}`)
      await c.query(`DROP TABLE "${TABLE}"`)
      return ''
    })
  },

  async error_in_tx() {
    return withConns(1, async (c) => {
      await c.query('BEGIN')
      let e = await c.query('SELECT 1/$1::int', [0]).catch((x) => x)
      expect(e && e.code === '22012', `1/0: ${e && e.message}`)
      e = await c.query('SELECT 1').catch((x) => x)
      expect(e && e.code === '25P02', `statement after the error: ${e && e.message}`)
      await c.query('ROLLBACK')
      expect((await c.query('SELECT $1::int AS v', [7])).rows[0].v === 7, 'work after rollback')
      e = await c.query('SELECT * FROM compat_no_such_table').catch((x) => x)
      expect(e && e.code === '42P01', 'missing table')
      expect((await val(c, "SELECT 'ok' AS v")) === 'ok', 'work after error')
      return ''
    })
  },

  async copy() {
    const t = `${TABLE}_copy`
    return withConns(1, async (c) => {
      await c.query(`DROP TABLE IF EXISTS "${t}"; CREATE TABLE "${t}" (id int, v text)`)
      const lines = []
      for (let i = 0; i < 5000; i++) lines.push(`${i}\trow ${i}\n`)
      await pipeline(Readable.from([lines.join('')]), c.query(copyFrom(`COPY "${t}" (id, v) FROM STDIN`)))
      expect(Number(await val(c, `SELECT count(*) AS n FROM "${t}"`)) === 5000, 'COPY FROM count')
      const chunks = []
      await pipeline(
        c.query(copyTo(`COPY (SELECT id, v FROM "${t}" ORDER BY id) TO STDOUT`)),
        new Writable({
          write(chunk, _enc, cb) {
            chunks.push(chunk)
            cb()
          },
        }),
      )
      const out = Buffer.concat(chunks).toString().split('\n').filter(Boolean)
      expect(out.length === 5000 && out[1] === '1\trow 1', `COPY TO got ${out.length} lines`)
      await c.query(`DROP TABLE "${t}"`)
      return '5000 rows in, 5000 out'
    })
  },

  async large_result() {
    return withConns(1, async (c) => {
      const r = await c.query("SELECT g, 'row ' || g AS s FROM generate_series(1, 100000) g")
      let sum = 0
      for (const row of r.rows) sum += row.g
      expect(r.rows.length === 100000 && sum === (100000 * 100001) / 2, `got ${r.rows.length} rows`)
      expect((await val(c, 'SELECT 1 AS v')) === 1, 'work after large result')
      return '100000 rows'
    })
  },

  async cancel() {
    return withConns(1, async (c) => {
      const t0 = Date.now()
      const running = c.query('SELECT pg_sleep(20)').catch((x) => x)
      await sleep(300)
      // pg's cancel: a new, unconnected Client sends the CancelRequest for c's active query.
      new Client().cancel(c, c.activeQuery)
      const e = await Promise.race([running, sleep(10000).then(() => 'timeout')])
      expect(e !== 'timeout', 'pg_sleep not cancelled within 10s')
      expect(e && e.code === '57014', `expected 57014, got ${e && (e.code || e)}`)
      const took = (Date.now() - t0) / 1000
      expect((await val(c, 'SELECT 1 AS v')) === 1, 'work after cancel')
      return `cancelled after ${took.toFixed(2)}s`
    })
  },

  async set_isolation() {
    return withConns(3, async (a, b, c) => {
      await a.query("SET work_mem = '7777kB'")
      // A bound set_config (the value a driver parameter): tracked from the Bind's values.
      const tenant = "it's A"
      await a.query("SELECT set_config('app.tenant', $1, false)", [tenant])
      const settings = "SELECT current_setting('work_mem') || '/' || coalesce(current_setting('app.tenant', true), '')"
      for (const [name, conn] of [['B', b], ['C', c]]) {
        const seen = await val(conn, settings)
        expect(!seen.includes('7777kB') && !seen.includes(tenant), `connection ${name} sees A's settings (${seen})`)
      }
      const seen = await val(a, settings)
      expect(seen === `7777kB/${tenant}`, `connection A lost its settings (${seen})`)
      return ''
    })
  },

  async advisory_lock() {
    return withConns(2, async (a, b) => {
      const q = async (c, f) => (await c.query(`SELECT ${f}($1) AS v`, [LOCK_KEY])).rows[0].v
      await q(a, 'pg_advisory_lock')
      expect((await q(b, 'pg_try_advisory_lock')) === false, 'B got the lock A holds')
      expect((await q(a, 'pg_advisory_unlock')) === true, 'A does not hold its lock any more')
      expect((await q(b, 'pg_try_advisory_lock')) === true, 'B cannot take the lock after A released it')
      expect((await q(b, 'pg_advisory_unlock')) === true, 'B unlock')
      return ''
    })
  },

  async listen_notify() {
    const chan = `compat_${TAG}`
    return withConns(2, async (a, b) => {
      const got = new Promise((resolve) => a.on('notification', resolve))
      await a.query(`LISTEN "${chan}"`)
      await b.query('SELECT pg_notify($1, $2)', [chan, 'hello from B'])
      const n = await Promise.race([got, sleep(3000).then(() => null)])
      expect(n !== null, 'A received no notification within 3s')
      expect(n.channel === chan && n.payload === 'hello from B', `wrong notification ${JSON.stringify(n)}`)
      await a.query(`UNLISTEN "${chan}"`)
      return ''
    })
  },
}

async function main() {
  let failed = 0
  for (const [name, fn] of Object.entries(scenarios)) {
    if (ONLY.size && !ONLY.has(name)) continue
    const t0 = Date.now()
    let status, detail
    try {
      const d = await Promise.race([fn(), sleep(30000).then(() => { throw new Check('timed out after 30s') })])
      status = 'PASS'
      detail = `${d} (${((Date.now() - t0) / 1000).toFixed(2)}s)`
    } catch (e) {
      status = 'FAIL'
      detail = e instanceof Check ? e.message : `${e.code || e.name}: ${e.message}`
      if (!(e instanceof Check)) console.error(e)
    }
    if (status === 'FAIL') failed++
    console.log(`${status} ${name} ${String(detail).split(/\s+/).join(' ').slice(0, 400)}`)
  }
  process.exit(failed ? 1 : 0)
}

main()
