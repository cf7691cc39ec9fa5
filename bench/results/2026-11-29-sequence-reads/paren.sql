\set aid random(1, 100000)
SELECT abalance, coalesce(bid, 0) FROM pgbench_accounts WHERE aid IN (:aid, :aid + 1) AND abs(abalance) >= 0;
