// exportercheck runs against a PgBouncer-compatible admin console the queries that
// prometheus-community/pgbouncer_exporter runs (v0.12.1: SHOW STATS as the ping, VERSION, LISTS,
// CONFIG, CLIENTS, STATS_TOTALS, POOLS, DATABASES; and what older releases ran, SHOW STATS's
// mapping up to v0.10.2 and SHOW SERVERS), the way it runs them: database/sql over lib/pq,
// db.Query without arguments (so lib/pq uses the simple query protocol), rows.Columns(), values
// scanned into interface{} / sql.RawBytes / string as the exporter scans them, label columns
// converted with the exporter's type switch and metric columns with its dbToFloat64.
//
// Usage: exportercheck '<lib/pq connection string>'   (dbname=pgbouncer sslmode=disable)
//
// Output, one line per check:
//
//	ok <what>                         a check passed
//	FAIL <what>: <why>                a check failed (exit status 1 at the end)
//	note <what>                       informational, the exporter would not fail on it
//	row <show> <label>=<v> ... <col>=<float> ...
//	                                  the figures the exporter would export for one row
//	PASS | FAILED <n>                 summary
package main

import (
	"database/sql"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	_ "github.com/lib/pq"
)

var failures int

func ok(format string, a ...interface{})   { fmt.Printf("ok "+format+"\n", a...) }
func note(format string, a ...interface{}) { fmt.Printf("note "+format+"\n", a...) }
func fail(format string, a ...interface{}) {
	failures++
	fmt.Printf("FAIL "+format+"\n", a...)
}

// dbToFloat64 is the exporter's conversion of a scanned value (factor 1).
func dbToFloat64(t interface{}) (float64, bool) {
	switch v := t.(type) {
	case int64:
		return float64(v), true
	case float64:
		return v, true
	case time.Time:
		return float64(v.Unix()), true
	case []byte:
		r, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return math.NaN(), false
		}
		return r, true
	case string:
		r, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return math.NaN(), false
		}
		return r, true
	case nil:
		return math.NaN(), true
	default:
		return math.NaN(), false
	}
}

// labelValue is the exporter's type switch for label columns.
func labelValue(v interface{}) (string, bool) {
	var s string
	switch x := v.(type) {
	case int:
		s = strconv.Itoa(x)
	case int64:
		s = strconv.Itoa(int(x))
	case float64:
		s = fmt.Sprintf("%f", x)
	case string:
		s = x
	case nil:
		s = ""
	default:
		return "<invalid>", false
	}
	if !utf8.ValidString(s) {
		return "<invalid>", false
	}
	return s, true
}

type mapping struct {
	show    string
	labels  []string
	metrics []string // mapped by the exporter: must be present and convert to float64
	extra   []string // further PgBouncer columns that must be present and numeric
	absent  []string // mapped by the exporter but not PgBouncer columns any more: note only
}

var mappings = []mapping{
	// pgbouncer_exporter v0.11.0 and later (v0.12.1 here): SHOW STATS_TOTALS, POOLS, DATABASES.
	{
		show:   "STATS_TOTALS",
		labels: []string{"database"},
		metrics: []string{"query_count", "query_time", "bytes_received", "bytes_sent", "wait_time",
			"xact_count", "xact_time", "client_parse_count", "server_parse_count", "bind_count",
			"server_assignment_count"},
		absent: []string{"requests"},
	},
	// pgbouncer_exporter up to v0.10.2 mapped SHOW STATS; dashboards built on it still run.
	{
		show:   "STATS",
		labels: []string{"database"},
		metrics: []string{"total_xact_count", "total_query_count", "total_received", "total_sent",
			"total_xact_time", "total_query_time", "total_wait_time"},
		extra: []string{"avg_xact_count", "avg_query_count", "avg_recv", "avg_sent", "avg_xact_time",
			"avg_query_time", "avg_wait_time", "total_server_assignment_count",
			"total_client_parse_count", "total_server_parse_count", "total_bind_count"},
		absent: []string{"total_requests"},
	},
	{
		show:   "POOLS",
		labels: []string{"database", "user"},
		metrics: []string{"cl_active", "cl_waiting", "cl_active_cancel_req", "cl_waiting_cancel_req",
			"sv_active", "sv_active_cancel", "sv_being_canceled", "sv_idle", "sv_used", "sv_tested",
			"sv_login", "maxwait"},
		extra: []string{"maxwait_us"},
	},
	{
		show:   "DATABASES",
		labels: []string{"name", "host", "port", "database", "force_user", "pool_mode"},
		metrics: []string{"pool_size", "reserve_pool_size", "max_connections", "current_connections",
			"paused", "disabled"},
		extra:  []string{"min_pool_size"},
		absent: []string{"reserve_pool"},
	},
}

// queryMapping mirrors the exporter's queryNamespaceMapping for one SHOW command.
func queryMapping(db *sql.DB, m mapping) {
	what := "SHOW " + m.show
	rows, err := db.Query("SHOW " + m.show + ";")
	if err != nil {
		fail("%s: query: %v", what, err)
		return
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		fail("%s: Columns(): %v", what, err)
		return
	}
	types, err := rows.ColumnTypes()
	if err != nil {
		fail("%s: ColumnTypes(): %v", what, err)
		return
	}
	idx := map[string]int{}
	var described []string
	for i, c := range cols {
		idx[c] = i
		described = append(described, c+":"+types[i].DatabaseTypeName())
	}
	ok("%s columns %s", what, strings.Join(described, ","))
	isLabel := map[string]bool{}
	for _, l := range m.labels {
		isLabel[l] = true
	}
	numeric := append(append([]string{}, m.metrics...), m.extra...)
	missing := []string{}
	for _, c := range append(append([]string{}, m.labels...), numeric...) {
		if _, found := idx[c]; !found {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		fail("%s: columns missing: %s", what, strings.Join(missing, ","))
	} else {
		ok("%s has all %d columns the exporter maps", what, len(m.labels)+len(numeric))
	}
	for _, c := range m.absent {
		if _, found := idx[c]; !found {
			note("%s: no column %s (the exporter maps it; PgBouncer no longer has it either)", what, c)
		}
	}

	data := make([]interface{}, len(cols))
	args := make([]interface{}, len(cols))
	for i := range data {
		args[i] = &data[i]
	}
	n := 0
	for rows.Next() {
		if err := rows.Scan(args...); err != nil {
			fail("%s: Scan: %v", what, err)
			return
		}
		n++
		var line []string
		for _, l := range m.labels {
			i, found := idx[l]
			if !found {
				continue
			}
			v, good := labelValue(data[i])
			if !good {
				fail("%s row %d: label column %s has type %T (%v), the exporter labels it <invalid>", what, n, l, data[i], data[i])
			}
			line = append(line, l+"="+v)
		}
		for _, c := range numeric {
			i, found := idx[c]
			if !found {
				continue
			}
			f, good := dbToFloat64(data[i])
			if !good {
				fail("%s row %d: column %s value %T %v does not convert to float64", what, n, c, data[i], data[i])
				continue
			}
			if math.IsNaN(f) {
				fail("%s row %d: column %s is NULL (NaN)", what, n, c)
				continue
			}
			line = append(line, c+"="+strconv.FormatFloat(f, 'f', -1, 64))
		}
		fmt.Printf("row %s %s\n", strings.ToLower(m.show), strings.Join(line, " "))
	}
	if err := rows.Err(); err != nil {
		fail("%s: rows.Err: %v", what, err)
		return
	}
	if n == 0 {
		fail("%s: no rows", what)
		return
	}
	ok("%s %d rows scanned and converted", what, n)
}

// queryVersion mirrors the exporter's queryVersion.
func queryVersion(db *sql.DB) {
	rows, err := db.Query("SHOW VERSION;")
	if err != nil {
		fail("SHOW VERSION: query: %v", err)
		return
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil || len(cols) != 1 || cols[0] != "version" {
		fail("SHOW VERSION: columns %v (err %v), the exporter wants exactly [version]", cols, err)
		return
	}
	n := 0
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			fail("SHOW VERSION: Scan: %v", err)
			return
		}
		n++
		if v == "" {
			fail("SHOW VERSION: empty version")
		}
		fmt.Printf("row version version=%s\n", strings.ReplaceAll(v, " ", "_"))
	}
	if err := rows.Err(); err != nil || n != 1 {
		fail("SHOW VERSION: %d rows (err %v)", n, err)
		return
	}
	ok("SHOW VERSION one version row")
}

var exporterLists = []string{"databases", "users", "pools", "free_clients", "used_clients",
	"login_clients", "free_servers", "used_servers", "dns_names", "dns_zones", "dns_queries"}

// queryShowLists mirrors the exporter's queryShowLists.
func queryShowLists(db *sql.DB) {
	rows, err := db.Query("SHOW LISTS;")
	if err != nil {
		fail("SHOW LISTS: query: %v", err)
		return
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil || len(cols) != 2 {
		fail("SHOW LISTS: columns %v (err %v), the exporter wants 2", cols, err)
		return
	}
	if cols[0] != "list" || cols[1] != "items" {
		fail("SHOW LISTS: columns %v, PgBouncer has [list items]", cols)
	}
	var list string
	var items sql.RawBytes
	seen := map[string]bool{}
	var line []string
	for rows.Next() {
		if err := rows.Scan(&list, &items); err != nil {
			fail("SHOW LISTS: Scan: %v", err)
			return
		}
		v, err := strconv.ParseFloat(string(items), 64)
		if err != nil {
			fail("SHOW LISTS: list %s items %q: %v", list, items, err)
			return
		}
		seen[list] = true
		line = append(line, list+"="+strconv.FormatFloat(v, 'f', -1, 64))
	}
	if err := rows.Err(); err != nil {
		fail("SHOW LISTS: rows.Err: %v", err)
		return
	}
	fmt.Printf("row lists %s\n", strings.Join(line, " "))
	missing := []string{}
	for _, l := range exporterLists {
		if !seen[l] {
			missing = append(missing, l)
		}
	}
	if len(missing) > 0 {
		fail("SHOW LISTS: lists the exporter maps are missing: %s", strings.Join(missing, ","))
		return
	}
	ok("SHOW LISTS has all %d lists the exporter maps, all numeric", len(exporterLists))
}

// queryShowConfig mirrors the exporter's queryShowConfig.
func queryShowConfig(db *sql.DB) {
	rows, err := db.Query("SHOW CONFIG;")
	if err != nil {
		fail("SHOW CONFIG: query: %v", err)
		return
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		fail("SHOW CONFIG: Columns(): %v", err)
		return
	}
	if strings.Join(cols, ",") != "key,value,default,changeable" {
		fail("SHOW CONFIG: columns %v, PgBouncer has [key value default changeable]", cols)
	}
	var key, changeable string
	var value, def sql.RawBytes
	exposed := map[string]float64{}
	n := 0
	for rows.Next() {
		switch len(cols) {
		case 3:
			err = rows.Scan(&key, &value, &changeable)
		case 4:
			err = rows.Scan(&key, &value, &def, &changeable)
		default:
			fail("SHOW CONFIG: %d columns, the exporter accepts 3 or 4", len(cols))
			return
		}
		if err != nil {
			fail("SHOW CONFIG: Scan: %v", err)
			return
		}
		n++
		if changeable != "yes" && changeable != "no" {
			fail("SHOW CONFIG: %s changeable=%q", key, changeable)
		}
		if key != "max_client_conn" && key != "max_user_connections" {
			continue
		}
		v, err := strconv.ParseFloat(string(value), 64)
		if err != nil {
			fail("SHOW CONFIG: %s value %q: %v", key, value, err)
			continue
		}
		exposed[key] = v
	}
	if err := rows.Err(); err != nil {
		fail("SHOW CONFIG: rows.Err: %v", err)
		return
	}
	var line []string
	for _, k := range []string{"max_client_conn", "max_user_connections"} {
		v, found := exposed[k]
		if !found {
			fail("SHOW CONFIG: no numeric %s row", k)
			continue
		}
		line = append(line, k+"="+strconv.FormatFloat(v, 'f', -1, 64))
	}
	fmt.Printf("row config %s\n", strings.Join(line, " "))
	ok("SHOW CONFIG %d rows, max_client_conn/max_user_connections numeric", n)
}

// queryShowClients mirrors the exporter's queryShowClients (v0.12.0 and later): SHOW CLIENTS needs
// the columns database, user and state (application_name when present), scanned as raw bytes and
// counted per (database, user, application_name, state) for pgbouncer_client_connections.
func queryShowClients(db *sql.DB) {
	rows, err := db.Query("SHOW CLIENTS;")
	if err != nil {
		fail("SHOW CLIENTS: query: %v", err)
		return
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		fail("SHOW CLIENTS: Columns(): %v", err)
		return
	}
	idx := map[string]int{}
	for i, c := range cols {
		idx[c] = i
	}
	for _, c := range []string{"database", "user", "state", "application_name"} {
		if _, found := idx[c]; !found {
			fail("SHOW CLIENTS: no %s column in %v", c, cols)
			return
		}
	}
	type key struct{ database, user, app, state string }
	counts := map[key]int{}
	vals := make([]sql.RawBytes, len(cols))
	args := make([]interface{}, len(cols))
	for i := range vals {
		args[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(args...); err != nil {
			fail("SHOW CLIENTS: Scan: %v", err)
			return
		}
		k := key{string(vals[idx["database"]]), string(vals[idx["user"]]),
			string(vals[idx["application_name"]]), string(vals[idx["state"]])}
		for _, v := range []string{k.database, k.user, k.app, k.state} {
			if !utf8.ValidString(v) {
				fail("SHOW CLIENTS: invalid UTF-8 %q", v)
			}
		}
		counts[k]++
	}
	if err := rows.Err(); err != nil {
		fail("SHOW CLIENTS: rows.Err: %v", err)
		return
	}
	keys := make([]key, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
	for _, k := range keys {
		fmt.Printf("row clients database=%s user=%s application_name=%s state=%s count=%d\n",
			k.database, k.user, k.app, k.state, counts[k])
	}
	ok("SHOW CLIENTS %d groups", len(keys))
}

// queryShowServers mirrors the exporter's queryShowServers (it scans 19 or 20 columns into typed
// variables; any other count is not scanned at all).
func queryShowServers(db *sql.DB) {
	rows, err := db.Query("SHOW SERVERS;")
	if err != nil {
		fail("SHOW SERVERS: query: %v", err)
		return
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		fail("SHOW SERVERS: Columns(): %v", err)
		return
	}
	var (
		serverType, user, database, replication, state, addr, localAddr, tls, appName string
		port, localPort, wait, waitUS, closeNeeded, remotePid, prepared               int
		connectTime, requestTime, ptr, link                                           sql.RawBytes
	)
	if len(cols) != 19 && len(cols) != 20 {
		note("SHOW SERVERS: %d columns (%s); PgBouncer 1.25 has 19 or 20, and a client scanning them by position would fail",
			len(cols), strings.Join(cols, ","))
	}
	n := 0
	for rows.Next() {
		switch len(cols) {
		case 20:
			err = rows.Scan(&serverType, &user, &database, &replication, &state, &addr, &port, &localAddr, &localPort,
				&connectTime, &requestTime, &wait, &waitUS, &closeNeeded, &ptr, &link, &remotePid, &tls, &appName, &prepared)
		case 19:
			err = rows.Scan(&serverType, &user, &database, &state, &addr, &port, &localAddr, &localPort,
				&connectTime, &requestTime, &wait, &waitUS, &closeNeeded, &ptr, &link, &remotePid, &tls, &appName, &prepared)
		}
		if err != nil {
			fail("SHOW SERVERS: Scan: %v", err)
			return
		}
		n++
		if len(cols) == 19 || len(cols) == 20 {
			fmt.Printf("row servers user=%s database=%s state=%s addr=%s_%d close_needed=%d\n", user, database, state, addr, port, closeNeeded)
		}
	}
	if err := rows.Err(); err != nil {
		fail("SHOW SERVERS: rows.Err: %v", err)
		return
	}
	ok("SHOW SERVERS %d rows scanned as the exporter scans them", n)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: exportercheck '<connection string>'")
		os.Exit(2)
	}
	db, err := sql.Open("postgres", os.Args[1])
	if err != nil {
		fmt.Printf("FAIL open: %v\n", err)
		os.Exit(1)
	}
	// The exporter's getDB: a SHOW STATS query doubles as the ping, then one connection.
	rows, err := db.Query("SHOW STATS")
	if err != nil {
		fmt.Printf("FAIL connect (SHOW STATS as ping): %v\n", err)
		os.Exit(1)
	}
	rows.Close()
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	ok("connect and SHOW STATS ping")

	// One scrape, in the exporter's Collect order.
	queryVersion(db)
	queryShowLists(db)
	queryShowConfig(db)
	queryShowClients(db)
	queryShowServers(db)
	sorted := append([]mapping{}, mappings...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].show < sorted[j].show })
	for _, m := range sorted {
		queryMapping(db, m)
	}
	db.Close()
	if failures > 0 {
		fmt.Printf("FAILED %d\n", failures)
		os.Exit(1)
	}
	fmt.Println("PASS")
}
