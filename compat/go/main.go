// pgx v5 through Sluice (default QueryExecModeCacheStatement: every query becomes a named prepared
// statement cached per connection): every compat scenario, one PASS/FAIL/SKIP line each.
package main

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var (
	tag     = env("COMPAT_TAG", fmt.Sprintf("pgx%d", os.Getpid()))
	table   = "compat_" + tag
	lockKey = int64(crc32.ChecksumIEEE([]byte(tag)) % 1000000000)
	failed  = 0
)

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func connect(ctx context.Context) (*pgx.Conn, error) {
	// pgx reads PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE from the environment.
	cfg, err := pgx.ParseConfig("connect_timeout=10")
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// conns opens n connections; the returned func closes them.
func conns(ctx context.Context, n int) ([]*pgx.Conn, func(), error) {
	var cs []*pgx.Conn
	done := func() {
		for _, c := range cs {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c.Close(cctx)
			cancel()
		}
	}
	for i := 0; i < n; i++ {
		c, err := connect(ctx)
		if err != nil {
			done()
			return nil, nil, err
		}
		cs = append(cs, c)
	}
	return cs, done, nil
}

func check(cond bool, format string, args ...any) error {
	if cond {
		return nil
	}
	return fmt.Errorf(format, args...)
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func sConnect(ctx context.Context) (string, error) {
	cs, done, err := conns(ctx, 1)
	if err != nil {
		return "", err
	}
	defer done()
	var u string
	if err := cs[0].QueryRow(ctx, "SELECT current_user").Scan(&u); err != nil {
		return "", err
	}
	return "server_version=" + cs[0].PgConn().ParameterStatus("server_version"), check(u == os.Getenv("PGUSER"), "current_user=%s", u)
}

func sSimpleQuery(ctx context.Context) (string, error) {
	cs, done, err := conns(ctx, 1)
	if err != nil {
		return "", err
	}
	defer done()
	c := cs[0]
	// Simple protocol explicitly (several statements in one Query message).
	res, err := c.PgConn().Exec(ctx, "SELECT 1; SELECT 2").ReadAll()
	if err != nil {
		return "", err
	}
	if err := check(len(res) == 2 && string(res[1].Rows[0][0]) == "2", "multi-statement results"); err != nil {
		return "", err
	}
	var a int
	var b string
	if err := c.QueryRow(ctx, "SELECT 1 + 1, 'text'::text", pgx.QueryExecModeSimpleProtocol).Scan(&a, &b); err != nil {
		return "", err
	}
	return "", check(a == 2 && b == "text", "unexpected row %d %s", a, b)
}

func sPrepared(ctx context.Context) (string, error) {
	// Two connections alternate; every third round a third one holds a server in a transaction, so
	// in transaction mode they also move between servers.
	all, done, err := conns(ctx, 3)
	if err != nil {
		return "", err
	}
	defer done()
	cs, blocker := all[:2], all[2]
	for i := 0; i < 12; i++ {
		hold := i%3 == 1
		if hold {
			if _, err := blocker.Exec(ctx, "BEGIN; SELECT 1"); err != nil {
				return "", err
			}
		}
		for j, c := range cs {
			k := 1 + 999*j
			var got int
			if err := c.QueryRow(ctx, "SELECT $1::int * 2 + $2::int", i, k).Scan(&got); err != nil {
				return "", fmt.Errorf("iteration %d: %w", i, err)
			}
			if got != i*2+k {
				return "", fmt.Errorf("iteration %d: got %d", i, got)
			}
		}
		if hold {
			if _, err := blocker.Exec(ctx, "COMMIT"); err != nil {
				return "", err
			}
		}
	}
	// An explicitly named statement too.
	if _, err := cs[0].Prepare(ctx, "compat_named", "SELECT $1::text || 'x'"); err != nil {
		return "", err
	}
	for i := 0; i < 6; i++ {
		var s string
		if err := cs[0].QueryRow(ctx, "compat_named", fmt.Sprint(i)).Scan(&s); err != nil {
			return "", err
		}
		if s != fmt.Sprintf("%dx", i) {
			return "", fmt.Errorf("named statement got %q", s)
		}
	}
	return "12 executions x 2 connections + named statement", nil
}

func sTransaction(ctx context.Context) (string, error) {
	cs, done, err := conns(ctx, 2)
	if err != nil {
		return "", err
	}
	defer done()
	c, other := cs[0], cs[1]
	t := pgx.Identifier{table}.Sanitize()
	if _, err := c.Exec(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
		return "", err
	}
	if _, err := c.Exec(ctx, "CREATE TABLE "+t+" (id int primary key, v text)"); err != nil {
		return "", err
	}
	err = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+t+" VALUES ($1, $2)", 1, "committed")
		return err
	})
	if err != nil {
		return "", err
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+t+" VALUES ($1, $2)", 2, "rolled back"); err != nil {
		return "", err
	}
	if err := tx.Rollback(ctx); err != nil {
		return "", err
	}
	rows, _ := other.Query(ctx, "SELECT id FROM "+t+" ORDER BY id")
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return "", err
	}
	if err := check(len(ids) == 1 && ids[0] == 1, "rows seen by another connection: %v", ids); err != nil {
		return "", err
	}
	_, err = c.Exec(ctx, "DROP TABLE "+t)
	return "", err
}

func sErrorInTx(ctx context.Context) (string, error) {
	cs, done, err := conns(ctx, 1)
	if err != nil {
		return "", err
	}
	defer done()
	c := cs[0]
	tx, err := c.Begin(ctx)
	if err != nil {
		return "", err
	}
	var x int
	err = tx.QueryRow(ctx, "SELECT 1/$1::int", 0).Scan(&x)
	if err := check(sqlState(err) == "22012", "1/0: %v", err); err != nil {
		return "", err
	}
	err = tx.QueryRow(ctx, "SELECT 1").Scan(&x)
	if err := check(sqlState(err) == "25P02", "after error: %v", err); err != nil {
		return "", err
	}
	if err := tx.Rollback(ctx); err != nil {
		return "", err
	}
	if err := c.QueryRow(ctx, "SELECT $1::int", 7).Scan(&x); err != nil || x != 7 {
		return "", fmt.Errorf("work after rollback: %v", err)
	}
	_, err = c.Exec(ctx, "SELECT * FROM compat_no_such_table")
	if err := check(sqlState(err) == "42P01", "missing table: %v", err); err != nil {
		return "", err
	}
	var s string
	if err := c.QueryRow(ctx, "SELECT 'ok'").Scan(&s); err != nil {
		return "", fmt.Errorf("work after error: %w", err)
	}
	return "", nil
}

func sCopy(ctx context.Context) (string, error) {
	cs, done, err := conns(ctx, 1)
	if err != nil {
		return "", err
	}
	defer done()
	c := cs[0]
	name := table + "_copy"
	t := pgx.Identifier{name}.Sanitize()
	if _, err := c.Exec(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
		return "", err
	}
	if _, err := c.Exec(ctx, "CREATE TABLE "+t+" (id int, v text)"); err != nil {
		return "", err
	}
	rows := make([][]any, 5000)
	for i := range rows {
		rows[i] = []any{int32(i), fmt.Sprintf("row %d", i)}
	}
	n, err := c.CopyFrom(ctx, pgx.Identifier{name}, []string{"id", "v"}, pgx.CopyFromRows(rows))
	if err != nil {
		return "", err
	}
	if err := check(n == 5000, "COPY FROM copied %d", n); err != nil {
		return "", err
	}
	var sb strings.Builder
	tag, err := c.PgConn().CopyTo(ctx, &sb, "COPY (SELECT id, v FROM "+t+" ORDER BY id) TO STDOUT")
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSuffix(sb.String(), "\n"), "\n")
	if err := check(tag.RowsAffected() == 5000 && len(lines) == 5000 && lines[1] == "1\trow 1", "COPY TO got %d lines", len(lines)); err != nil {
		return "", err
	}
	_, err = c.Exec(ctx, "DROP TABLE "+t)
	return "5000 rows in, 5000 out", err
}

func sLargeResult(ctx context.Context) (string, error) {
	cs, done, err := conns(ctx, 1)
	if err != nil {
		return "", err
	}
	defer done()
	rows, _ := cs[0].Query(ctx, "SELECT g, 'row ' || g FROM generate_series(1, 100000) g")
	n, sum := 0, int64(0)
	for rows.Next() {
		var g int64
		var s string
		if err := rows.Scan(&g, &s); err != nil {
			return "", err
		}
		n++
		sum += g
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	return "100000 rows", check(n == 100000 && sum == 100000*100001/2, "got %d rows", n)
}

func sCancel(ctx context.Context) (string, error) {
	cs, done, err := conns(ctx, 1)
	if err != nil {
		return "", err
	}
	defer done()
	c := cs[0]
	// Context cancellation: pgx sends a CancelRequest and then waits for the query to end.
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err = c.Exec(qctx, "SELECT pg_sleep(20)")
	took := time.Since(t0)
	if err == nil {
		return "", fmt.Errorf("pg_sleep was not cancelled")
	}
	if took > 10*time.Second {
		return "", fmt.Errorf("cancel took %v", took)
	}
	// pgx closes the connection after a context cancel during a query; check a fresh connection
	// and that the server side of the old one is not stuck.
	if !c.IsClosed() {
		var x int
		if err := c.QueryRow(ctx, "SELECT 1").Scan(&x); err != nil {
			return "", fmt.Errorf("work after cancel: %w", err)
		}
	}
	// Explicit CancelRequest on a live connection (pgconn.CancelRequest), connection reused after.
	c2, err := connect(ctx)
	if err != nil {
		return "", err
	}
	defer c2.Close(ctx)
	go func() {
		time.Sleep(300 * time.Millisecond)
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		_ = c2.PgConn().CancelRequest(cctx)
	}()
	_, err = c2.Exec(ctx, "SELECT pg_sleep(20)")
	if err := check(sqlState(err) == "57014", "explicit cancel: %v", err); err != nil {
		return "", err
	}
	var x int
	if err := c2.QueryRow(ctx, "SELECT 2").Scan(&x); err != nil || x != 2 {
		return "", fmt.Errorf("work after explicit cancel: %v", err)
	}
	return fmt.Sprintf("cancelled after %.2fs", took.Seconds()), nil
}

func sSetIsolation(ctx context.Context) (string, error) {
	cs, done, err := conns(ctx, 3)
	if err != nil {
		return "", err
	}
	defer done()
	if _, err := cs[0].Exec(ctx, "SET work_mem = '7777kB'"); err != nil {
		return "", err
	}
	// A bound set_config (the value a driver parameter): tracked from the Bind's values.
	if _, err := cs[0].Exec(ctx, "SELECT set_config('app.tenant', $1, false)", tenant); err != nil {
		return "", err
	}
	for i, name := range []string{"", "B", "C"} {
		if i == 0 {
			continue
		}
		s, err := settings(ctx, cs[i])
		if err != nil {
			return "", err
		}
		if strings.Contains(s, "7777kB") || strings.Contains(s, tenant) {
			return "", fmt.Errorf("connection %s sees A's settings (%s)", name, s)
		}
	}
	s, err := settings(ctx, cs[0])
	if err != nil {
		return "", err
	}
	return "", check(s == "7777kB/"+tenant, "connection A lost its settings (%s)", s)
}

// What set_isolation's connection A set: work_mem and app.tenant.
const tenant = "it's A"

func settings(ctx context.Context, c *pgx.Conn) (string, error) {
	var s string
	err := c.QueryRow(ctx, "SELECT current_setting('work_mem') || '/' || coalesce(current_setting('app.tenant', true), '')").Scan(&s)
	return s, err
}

func boolQuery(ctx context.Context, c *pgx.Conn, q string) (bool, error) {
	var b bool
	err := c.QueryRow(ctx, q, lockKey).Scan(&b)
	return b, err
}

func sAdvisoryLock(ctx context.Context) (string, error) {
	cs, done, err := conns(ctx, 2)
	if err != nil {
		return "", err
	}
	defer done()
	a, b := cs[0], cs[1]
	if _, err := a.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return "", err
	}
	steps := []struct {
		c    *pgx.Conn
		q    string
		want bool
		msg  string
	}{
		{b, "SELECT pg_try_advisory_lock($1)", false, "B got the lock A holds"},
		{a, "SELECT pg_advisory_unlock($1)", true, "A does not hold its lock any more"},
		{b, "SELECT pg_try_advisory_lock($1)", true, "B cannot take the lock after A released it"},
		{b, "SELECT pg_advisory_unlock($1)", true, "B unlock"},
	}
	for _, s := range steps {
		got, err := boolQuery(ctx, s.c, s.q)
		if err != nil {
			return "", err
		}
		if got != s.want {
			return "", errors.New(s.msg)
		}
	}
	return "", nil
}

func sListenNotify(ctx context.Context) (string, error) {
	cs, done, err := conns(ctx, 2)
	if err != nil {
		return "", err
	}
	defer done()
	a, b := cs[0], cs[1]
	ch := "compat_" + tag
	if _, err := a.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
		return "", err
	}
	if _, err := b.Exec(ctx, "SELECT pg_notify($1, $2)", ch, "hello from B"); err != nil {
		return "", err
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	n, err := a.WaitForNotification(wctx)
	if err != nil {
		return "", fmt.Errorf("A received no notification within 3s (%v)", err)
	}
	return "", check(n.Channel == ch && n.Payload == "hello from B", "wrong notification %+v", n)
}

func sBatch(ctx context.Context) (string, error) {
	cs, done, err := conns(ctx, 2)
	if err != nil {
		return "", err
	}
	defer done()
	for round := 0; round < 3; round++ {
		for j, c := range cs {
			b := &pgx.Batch{}
			for i := 0; i < 10; i++ {
				b.Queue("SELECT $1::int + $2::int", i, j)
			}
			b.Queue("SELECT 'x'::text")
			br := c.SendBatch(ctx, b)
			for i := 0; i < 10; i++ {
				var got int
				if err := br.QueryRow().Scan(&got); err != nil {
					br.Close()
					return "", fmt.Errorf("round %d item %d: %w", round, i, err)
				}
				if got != i+j {
					br.Close()
					return "", fmt.Errorf("round %d item %d: got %d", round, i, got)
				}
			}
			var s string
			if err := br.QueryRow().Scan(&s); err != nil {
				br.Close()
				return "", err
			}
			if err := br.Close(); err != nil {
				return "", err
			}
		}
	}
	// An error in the middle of a batch; the connection stays usable.
	b := &pgx.Batch{}
	b.Queue("SELECT 1")
	b.Queue("SELECT 1/0")
	b.Queue("SELECT 2")
	err = cs[0].SendBatch(ctx, b).Close()
	if err := check(sqlState(err) == "22012", "batch error: %v", err); err != nil {
		return "", err
	}
	var x int
	if err := cs[0].QueryRow(ctx, "SELECT $1::int", 5).Scan(&x); err != nil || x != 5 {
		return "", fmt.Errorf("work after batch error: %v", err)
	}
	return "3 rounds x 2 connections x 11 queries + error recovery", nil
}

func main() {
	only := map[string]bool{}
	for _, s := range strings.Split(os.Getenv("COMPAT_ONLY"), ",") {
		if s != "" {
			only[s] = true
		}
	}
	scenarios := []struct {
		name string
		fn   func(context.Context) (string, error)
	}{
		{"connect", sConnect},
		{"simple_query", sSimpleQuery},
		{"prepared", sPrepared},
		{"transaction", sTransaction},
		{"error_in_tx", sErrorInTx},
		{"copy", sCopy},
		{"large_result", sLargeResult},
		{"cancel", sCancel},
		{"set_isolation", sSetIsolation},
		{"advisory_lock", sAdvisoryLock},
		{"listen_notify", sListenNotify},
		{"batch", sBatch},
	}
	for _, s := range scenarios {
		if len(only) > 0 && !only[s.name] {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t0 := time.Now()
		detail, err := s.fn(ctx)
		cancel()
		if err != nil {
			failed++
			fmt.Printf("FAIL %s %s\n", s.name, strings.Join(strings.Fields(err.Error()), " "))
		} else {
			fmt.Printf("PASS %s %s (%.2fs)\n", s.name, detail, time.Since(t0).Seconds())
		}
	}
	if failed > 0 {
		os.Exit(1)
	}
}
