// pgjdbc through Sluice (default prepareThreshold=5: from the 5th execution of a PreparedStatement the
// driver uses a named server-side statement S_n). Every compat scenario, one PASS/FAIL/SKIP line each.
package compat;

import java.io.ByteArrayOutputStream;
import java.io.StringReader;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Callable;
import java.util.zip.CRC32;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;
import org.postgresql.copy.CopyManager;

public final class PgjdbcCompat {
  static final String TAG = env("COMPAT_TAG", "jdbc" + ProcessHandle.current().pid());
  static final String TABLE = "compat_" + TAG;
  static final long LOCK_KEY;

  static {
    CRC32 crc = new CRC32();
    crc.update(TAG.getBytes(StandardCharsets.UTF_8));
    LOCK_KEY = crc.getValue() % 1_000_000_000L;
  }

  static String env(String k, String def) {
    String v = System.getenv(k);
    return v == null || v.isEmpty() ? def : v;
  }

  static final class Check extends Exception {
    Check(String m) {
      super(m);
    }
  }

  static void expect(boolean cond, String msg) throws Check {
    if (!cond) throw new Check(msg);
  }

  static Connection connect() throws SQLException {
    String url = "jdbc:postgresql://" + env("PGHOST", "127.0.0.1") + ":" + env("PGPORT", "6432") + "/"
        + env("PGDATABASE", "postgres");
    Properties p = new Properties();
    p.setProperty("user", env("PGUSER", "postgres"));
    p.setProperty("password", env("PGPASSWORD", ""));
    p.setProperty("sslmode", "disable");
    p.setProperty("connectTimeout", "10");
    p.setProperty("socketTimeout", "30");
    return DriverManager.getConnection(url, p);
  }

  /** Opens n connections, runs body, closes them. */
  interface Body {
    String run(Connection[] cs) throws Exception;
  }

  static String withConns(int n, Body body) throws Exception {
    Connection[] cs = new Connection[n];
    try {
      for (int i = 0; i < n; i++) cs[i] = connect();
      return body.run(cs);
    } finally {
      for (Connection c : cs) {
        if (c != null) {
          try {
            c.close();
          } catch (SQLException ignored) {
            // a broken connection is fine to drop
          }
        }
      }
    }
  }

  static Object val(Connection c, String sql) throws SQLException {
    try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery(sql)) {
      rs.next();
      return rs.getObject(1);
    }
  }

  static String state(SQLException e) {
    return e.getSQLState();
  }

  static String connectScenario() throws Exception {
    return withConns(1, cs -> {
      expect(env("PGUSER", "").equals(val(cs[0], "SELECT current_user")), "current_user");
      return "server_version=" + cs[0].getMetaData().getDatabaseProductVersion();
    });
  }

  static String simpleQuery() throws Exception {
    return withConns(1, cs -> {
      try (Statement st = cs[0].createStatement()) {
        // Several statements in one execute: pgjdbc splits them into one extended-protocol batch.
        st.execute("SELECT 1; SELECT 1 + 1, 'text'::text");
        st.getMoreResults();
        try (ResultSet rs = st.getResultSet()) {
          rs.next();
          expect(rs.getInt(1) == 2 && "text".equals(rs.getString(2)), "unexpected row");
        }
      }
      return "";
    });
  }

  static String prepared() throws Exception {
    // Two connections alternate; every third round a third one holds a server in a transaction, so
    // in transaction mode they also move between servers.
    return withConns(3, cs -> {
      PreparedStatement[] ps = new PreparedStatement[2];
      for (int j = 0; j < 2; j++) ps[j] = cs[j].prepareStatement("SELECT ?::int * 2 + ?::int");
      Connection blocker = cs[2];
      for (int i = 0; i < 12; i++) {
        boolean hold = i % 3 == 1;
        if (hold) {
          blocker.setAutoCommit(false);
          val(blocker, "SELECT 1");
        }
        for (int j = 0; j < 2; j++) {
          int k = j == 0 ? 1 : 1000;
          ps[j].setInt(1, i);
          ps[j].setInt(2, k);
          try (ResultSet rs = ps[j].executeQuery()) {
            rs.next();
            expect(rs.getInt(1) == i * 2 + k, "iteration " + i + ": got " + rs.getInt(1));
          }
        }
        if (hold) {
          blocker.commit();
          blocker.setAutoCommit(true);
        }
      }
      boolean server = ps[0].unwrap(org.postgresql.PGStatement.class).isUseServerPrepare();
      for (PreparedStatement p : ps) p.close();
      expect(server, "driver did not switch to a server-side prepared statement");
      return "12 executions x 2 connections, prepareThreshold=5, server-prepared";
    });
  }

  static String transaction() throws Exception {
    return withConns(2, cs -> {
      Connection c = cs[0];
      try (Statement st = c.createStatement()) {
        st.execute("DROP TABLE IF EXISTS \"" + TABLE + "\"");
        st.execute("CREATE TABLE \"" + TABLE + "\" (id int primary key, v text)");
      }
      c.setAutoCommit(false);
      try (PreparedStatement ins = c.prepareStatement("INSERT INTO \"" + TABLE + "\" VALUES (?, ?)")) {
        ins.setInt(1, 1);
        ins.setString(2, "committed");
        ins.executeUpdate();
        c.commit();
        ins.setInt(1, 2);
        ins.setString(2, "rolled back");
        ins.executeUpdate();
        c.rollback();
      }
      c.setAutoCommit(true);
      List<Integer> ids = new ArrayList<>();
      try (Statement st = cs[1].createStatement();
          ResultSet rs = st.executeQuery("SELECT id FROM \"" + TABLE + "\" ORDER BY id")) {
        while (rs.next()) ids.add(rs.getInt(1));
      }
      expect(ids.equals(List.of(1)), "rows seen by another connection: " + ids);
      try (Statement st = c.createStatement()) {
        st.execute("DROP TABLE \"" + TABLE + "\"");
      }
      return "";
    });
  }

  static String errorInTx() throws Exception {
    return withConns(1, cs -> {
      Connection c = cs[0];
      c.setAutoCommit(false);
      try (PreparedStatement ps = c.prepareStatement("SELECT 1/?::int")) {
        ps.setInt(1, 0);
        ps.executeQuery();
        expect(false, "1/0 did not fail");
      } catch (SQLException e) {
        expect("22012".equals(state(e)), "1/0: " + e.getMessage());
      }
      try {
        val(c, "SELECT 1");
        expect(false, "statement after the error did not fail");
      } catch (SQLException e) {
        expect("25P02".equals(state(e)), "after error: " + e.getMessage());
      }
      c.rollback();
      c.setAutoCommit(true);
      expect(Integer.valueOf(7).equals(val(c, "SELECT 7")), "work after rollback");
      try {
        val(c, "SELECT * FROM compat_no_such_table");
      } catch (SQLException e) {
        expect("42P01".equals(state(e)), "missing table: " + e.getMessage());
      }
      expect("ok".equals(val(c, "SELECT 'ok'")), "work after error");
      return "";
    });
  }

  static String copy() throws Exception {
    String t = "\"" + TABLE + "_copy\"";
    return withConns(1, cs -> {
      Connection c = cs[0];
      try (Statement st = c.createStatement()) {
        st.execute("DROP TABLE IF EXISTS " + t);
        st.execute("CREATE TABLE " + t + " (id int, v text)");
      }
      CopyManager cm = c.unwrap(PGConnection.class).getCopyAPI();
      StringBuilder sb = new StringBuilder();
      for (int i = 0; i < 5000; i++) sb.append(i).append("\trow ").append(i).append('\n');
      long in = cm.copyIn("COPY " + t + " (id, v) FROM STDIN", new StringReader(sb.toString()));
      expect(in == 5000, "COPY FROM copied " + in);
      ByteArrayOutputStream out = new ByteArrayOutputStream();
      long n = cm.copyOut("COPY (SELECT id, v FROM " + t + " ORDER BY id) TO STDOUT", out);
      String[] lines = out.toString(StandardCharsets.UTF_8).split("\n");
      expect(n == 5000 && lines.length == 5000 && lines[1].equals("1\trow 1"),
          "COPY TO got " + lines.length + " lines");
      try (Statement st = c.createStatement()) {
        st.execute("DROP TABLE " + t);
      }
      return "5000 rows in, 5000 out";
    });
  }

  static String largeResult() throws Exception {
    return withConns(1, cs -> {
      long n = 0, sum = 0;
      try (Statement st = cs[0].createStatement();
          ResultSet rs = st.executeQuery("SELECT g, 'row ' || g FROM generate_series(1, 100000) g")) {
        while (rs.next()) {
          n++;
          sum += rs.getLong(1);
        }
      }
      expect(n == 100000 && sum == 100000L * 100001 / 2, "got " + n + " rows");
      expect(Integer.valueOf(1).equals(val(cs[0], "SELECT 1")), "work after large result");
      return "100000 rows";
    });
  }

  static String cancel() throws Exception {
    return withConns(1, cs -> {
      Connection c = cs[0];
      long t0 = System.nanoTime();
      try (Statement st = c.createStatement()) {
        Thread canceller = new Thread(() -> {
          try {
            Thread.sleep(300);
            st.cancel();
          } catch (Exception ignored) {
            // the scenario fails on the missing error below
          }
        });
        canceller.start();
        try {
          st.execute("SELECT pg_sleep(20)");
          expect(false, "pg_sleep was not cancelled");
        } catch (SQLException e) {
          expect("57014".equals(state(e)), "expected 57014, got " + state(e) + " " + e.getMessage());
        }
        canceller.join();
      }
      double took = (System.nanoTime() - t0) / 1e9;
      expect(took < 10, "cancel took " + took + "s");
      expect(Integer.valueOf(1).equals(val(c, "SELECT 1")), "work after cancel");
      return String.format("cancelled after %.2fs", took);
    });
  }

  /** work_mem and app.tenant: what setIsolation's connection A set. */
  static final String SETTINGS =
      "SELECT current_setting('work_mem') || '/' || coalesce(current_setting('app.tenant', true), '')";

  static final String TENANT = "it's A";

  static String setIsolation() throws Exception {
    return withConns(3, cs -> {
      try (Statement st = cs[0].createStatement()) {
        st.execute("SET work_mem = '7777kB'");
      }
      // A bound set_config (the value a driver parameter): tracked from the Bind's values.
      try (PreparedStatement ps =
          cs[0].prepareStatement("SELECT set_config('app.tenant', ?, false)")) {
        ps.setString(1, TENANT);
        ps.executeQuery().close();
      }
      String[] names = {"A", "B", "C"};
      for (int i = 1; i < 3; i++) {
        String seen = (String) val(cs[i], SETTINGS);
        expect(!seen.contains("7777kB") && !seen.contains(TENANT),
            "connection " + names[i] + " sees A's settings (" + seen + ")");
      }
      Object seen = val(cs[0], SETTINGS);
      expect(("7777kB/" + TENANT).equals(seen), "connection A lost its settings (" + seen + ")");
      return "";
    });
  }

  static boolean lockCall(Connection c, String fn) throws SQLException {
    try (PreparedStatement ps = c.prepareStatement("SELECT " + fn + "(?)")) {
      ps.setLong(1, LOCK_KEY);
      try (ResultSet rs = ps.executeQuery()) {
        rs.next();
        return rs.getBoolean(1);
      }
    }
  }

  static String advisoryLock() throws Exception {
    return withConns(2, cs -> {
      Connection a = cs[0], b = cs[1];
      try (PreparedStatement ps = a.prepareStatement("SELECT pg_advisory_lock(?)")) {
        ps.setLong(1, LOCK_KEY);
        ps.executeQuery().close();
      }
      expect(!lockCall(b, "pg_try_advisory_lock"), "B got the lock A holds");
      expect(lockCall(a, "pg_advisory_unlock"), "A does not hold its lock any more");
      expect(lockCall(b, "pg_try_advisory_lock"), "B cannot take the lock after A released it");
      expect(lockCall(b, "pg_advisory_unlock"), "B unlock");
      return "";
    });
  }

  static String listenNotify() throws Exception {
    String chan = "compat_" + TAG;
    return withConns(2, cs -> {
      try (Statement st = cs[0].createStatement()) {
        st.execute("LISTEN \"" + chan + "\"");
      }
      try (PreparedStatement ps = cs[1].prepareStatement("SELECT pg_notify(?, ?)")) {
        ps.setString(1, chan);
        ps.setString(2, "hello from B");
        ps.executeQuery().close();
      }
      PGNotification[] got = cs[0].unwrap(PGConnection.class).getNotifications(3000);
      expect(got != null && got.length > 0, "A received no notification within 3s");
      expect(chan.equals(got[0].getName()) && "hello from B".equals(got[0].getParameter()),
          "wrong notification " + got[0].getName() + " " + got[0].getParameter());
      try (Statement st = cs[0].createStatement()) {
        st.execute("UNLISTEN \"" + chan + "\"");
      }
      return "";
    });
  }

  static String batch() throws Exception {
    String t = "\"" + TABLE + "_batch\"";
    return withConns(2, cs -> {
      try (Statement st = cs[0].createStatement()) {
        st.execute("DROP TABLE IF EXISTS " + t);
        st.execute("CREATE TABLE " + t + " (id int primary key, v text)");
      }
      // Batches of prepared INSERTs from two connections: pgjdbc pipelines Parse/Bind/Execute and,
      // past prepareThreshold, uses named statements.
      int id = 0;
      for (int round = 0; round < 8; round++) {
        for (Connection c : cs) {
          try (PreparedStatement ps = c.prepareStatement("INSERT INTO " + t + " VALUES (?, ?)")) {
            for (int i = 0; i < 20; i++) {
              ps.setInt(1, id++);
              ps.setString(2, "v");
              ps.addBatch();
            }
            int[] r = ps.executeBatch();
            expect(r.length == 20, "batch result count " + r.length);
          }
        }
      }
      Object n = val(cs[1], "SELECT count(*) FROM " + t);
      expect(Long.valueOf(id).equals(n), "rows after batches: " + n);
      try (PreparedStatement ps = cs[0].prepareStatement("INSERT INTO " + t + " VALUES (?, ?)")) {
        for (int i : new int[] {100000, 0, 100001}) {
          ps.setInt(1, i);
          ps.setString(2, "dup");
          ps.addBatch();
        }
        ps.executeBatch();
        expect(false, "duplicate key in batch did not fail");
      } catch (SQLException e) {
        String s = e.getNextException() != null ? e.getNextException().getSQLState() : state(e);
        expect("23505".equals(s), "batch error: " + s + " " + e.getMessage());
      }
      expect(Long.valueOf(id).equals(val(cs[0], "SELECT count(*) FROM " + t)), "work after batch error");
      try (Statement st = cs[0].createStatement()) {
        st.execute("DROP TABLE " + t);
      }
      return "8 rounds x 2 connections x 20 inserts + error recovery";
    });
  }

  public static void main(String[] args) {
    java.util.Set<String> only = new java.util.HashSet<>();
    for (String s : env("COMPAT_ONLY", "").split(",")) if (!s.isEmpty()) only.add(s);
    Map<String, Callable<String>> scenarios = new LinkedHashMap<>();
    scenarios.put("connect", PgjdbcCompat::connectScenario);
    scenarios.put("simple_query", PgjdbcCompat::simpleQuery);
    scenarios.put("prepared", PgjdbcCompat::prepared);
    scenarios.put("transaction", PgjdbcCompat::transaction);
    scenarios.put("error_in_tx", PgjdbcCompat::errorInTx);
    scenarios.put("copy", PgjdbcCompat::copy);
    scenarios.put("large_result", PgjdbcCompat::largeResult);
    scenarios.put("cancel", PgjdbcCompat::cancel);
    scenarios.put("set_isolation", PgjdbcCompat::setIsolation);
    scenarios.put("advisory_lock", PgjdbcCompat::advisoryLock);
    scenarios.put("listen_notify", PgjdbcCompat::listenNotify);
    scenarios.put("batch", PgjdbcCompat::batch);
    int failed = 0;
    for (Map.Entry<String, Callable<String>> e : scenarios.entrySet()) {
      if (!only.isEmpty() && !only.contains(e.getKey())) continue;
      long t0 = System.nanoTime();
      String status, detail;
      try {
        detail = e.getValue().call() + String.format(" (%.2fs)", (System.nanoTime() - t0) / 1e9);
        status = "PASS";
      } catch (Check c) {
        status = "FAIL";
        detail = c.getMessage();
      } catch (Exception x) {
        status = "FAIL";
        detail = x.getClass().getSimpleName() + ": " + x.getMessage();
        x.printStackTrace();
      }
      if (status.equals("FAIL")) failed++;
      detail = String.join(" ", String.valueOf(detail).trim().split("\\s+"));
      if (detail.length() > 400) detail = detail.substring(0, 400);
      System.out.println(status + " " + e.getKey() + " " + detail);
      System.out.flush();
    }
    System.exit(failed > 0 ? 1 : 0);
  }
}
