-- Every grant the tracker's database user needs, and no more: what the
-- start reads, what each flush reads, locks and writes. The tracker checks
-- them at start (every statement it will make, in the form it sends it,
-- tried on no rows) and refuses to start, naming the one missing.
--
-- How they are proven: tracker-db's tests create a user with exactly
-- these lines, run the start's check and flush every kind of row as it,
-- on deploy/unit3d/schema.sql (tracker-db/tests/mariadb.rs) and, when
-- UNIT3D_CE_SRC names a UNIT3D-Community-Edition checkout, on its real
-- schema: database/schema/mysql-schema.sql, then
-- deploy/unit3d/later-migrations.sql (tracker-db/tests/unit3d_schema.rs;
-- last run on UNIT3D 44a3aeac with MariaDB 10.11). The site's other
-- tables need nothing, though 88 of them reference users and 17 torrents:
-- MariaDB would ask for SELECT on each for a prepared multi-table UPDATE
-- of users or torrents, so the tracker sends those UPDATEs as text, which
-- asks for none.
--
-- Replace `unit3d` with the site's database and 'tracker'@'localhost' with
-- the tracker's user (CREATE USER 'tracker'@'localhost' IDENTIFIED BY ...).

-- Read at start.
GRANT SELECT ON `unit3d`.`groups` TO 'tracker'@'localhost';
GRANT SELECT ON `unit3d`.`featured_torrents` TO 'tracker'@'localhost';
GRANT SELECT ON `unit3d`.`freeleech_tokens` TO 'tracker'@'localhost';
GRANT SELECT ON `unit3d`.`personal_freeleeches` TO 'tracker'@'localhost';
GRANT SELECT ON `unit3d`.`blacklist_clients` TO 'tracker'@'localhost';

-- The site's own users and torrents: read at start, locked by each flush,
-- and only their credited bytes, peer counts, completions, balance and
-- update time changed (never inserted, never any other column: no
-- passkey, group or name).
GRANT SELECT, UPDATE (`uploaded`, `downloaded`)
  ON `unit3d`.`users` TO 'tracker'@'localhost';
GRANT SELECT, UPDATE (`seeders`, `leechers`, `times_completed`, `balance`, `updated_at`)
  ON `unit3d`.`torrents` TO 'tracker'@'localhost';

-- The tracker's rows: each flush reads them (locked) to credit from them,
-- then writes them. unregistered_info_hashes only with
-- private.max_unregistered_per_flush above 0 (the default).
GRANT SELECT, INSERT, UPDATE ON `unit3d`.`peers` TO 'tracker'@'localhost';
GRANT SELECT, INSERT, UPDATE ON `unit3d`.`history` TO 'tracker'@'localhost';
GRANT SELECT, INSERT, UPDATE ON `unit3d`.`unregistered_info_hashes` TO 'tracker'@'localhost';
GRANT SELECT, INSERT, UPDATE ON `unit3d`.`tracker_flushes` TO 'tracker'@'localhost';
