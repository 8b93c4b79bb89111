-- Every grant Ocelot 2.1.3 (OPSnet/Ocelot d4aaff7) needs on a Gazelle
-- database, and no more, derived from the statements of its src/db.cpp:
-- the start's TRUNCATE and UPDATE (:72-87), the four loads (:90, :158,
-- :202, :227) and the five flushes (:311-477). This is what a replacement
-- must be able to do to run as Ocelot's database user; a replacement that
-- does less (no TRUNCATE, no DELETE relic) needs less.
--
-- How they are proven: tracker-db/tests/gazelle_schema.rs creates a user
-- with exactly these lines on deploy/gazelle/schema.sql, loaded under
-- Gazelle's sql_mode, and runs every one of those statements as it, in
-- the form db.cpp builds them (last run with MariaDB 10.11).
--
-- Replace `gazelle` with the site's database and 'ocelot'@'localhost'
-- with the tracker's user (CREATE USER 'ocelot'@'localhost' IDENTIFIED BY ...).

-- Read at start (and at each reload): the enabled users, the torrents that
-- have a torrents_leech_stats row, and the client whitelist.
GRANT SELECT ON `gazelle`.`users_main` TO 'ocelot'@'localhost';
GRANT SELECT ON `gazelle`.`xbt_client_whitelist` TO 'ocelot'@'localhost';

-- torrents: read at start; DELETE only for the flush's relic `DELETE FROM
-- torrents WHERE info_hash = ''` (db.cpp:358), which matches no row since
-- info_hash became binary(20).
GRANT SELECT, DELETE ON `gazelle`.`torrents` TO 'ocelot'@'localhost';

-- Upserted by the flushes (INSERT ... ON DUPLICATE KEY UPDATE). SELECT is
-- needed beside INSERT and UPDATE even where nothing else reads the
-- table: MariaDB checks it for each column the UPDATE clause reads,
-- VALUES(col) included (error 1143 without it). torrents_leech_stats is
-- also read at start (Snatched) and zeroed by the start's UPDATE;
-- users_freeleeches is read at start (the unexpired tokens); Ocelot's
-- upsert of it names no Time and is refused under Gazelle's strict
-- sql_mode whatever the grants (see schema.sql), so its INSERT and UPDATE
-- are used only on a server without that mode.
GRANT SELECT, INSERT, UPDATE ON `gazelle`.`users_leech_stats` TO 'ocelot'@'localhost';
GRANT SELECT, INSERT, UPDATE ON `gazelle`.`torrents_leech_stats` TO 'ocelot'@'localhost';
GRANT SELECT, INSERT, UPDATE ON `gazelle`.`users_freeleeches` TO 'ocelot'@'localhost';

-- xbt_files_users: upserted by the flushes, and emptied at start with
-- TRUNCATE, which needs DROP.
GRANT SELECT, INSERT, UPDATE, DROP ON `gazelle`.`xbt_files_users` TO 'ocelot'@'localhost';

-- xbt_snatched: INSERT IGNORE, one row per completion.
GRANT INSERT ON `gazelle`.`xbt_snatched` TO 'ocelot'@'localhost';
