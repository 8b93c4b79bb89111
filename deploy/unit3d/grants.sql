-- Every grant the tracker's database user needs, and no more: what the
-- start reads, what each flush reads, locks and writes. The tracker checks
-- them at start (every statement it will make, tried on no rows) and
-- refuses to start, naming the one missing. tracker-db's tests create a
-- user with exactly these lines and flush every kind of row as it.
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
-- and only their credited bytes and peer counts changed. (The insert
-- branch of the upsert is never taken, as only rows locked as present are
-- written; the server still asks for INSERT on the columns it names.)
GRANT SELECT,
  INSERT (`id`, `username`, `email`, `password`, `passkey`, `group_id`, `uploaded`,
          `downloaded`, `rsskey`),
  UPDATE (`uploaded`, `downloaded`)
  ON `unit3d`.`users` TO 'tracker'@'localhost';
GRANT SELECT,
  INSERT (`id`, `name`, `description`, `info_hash`, `file_name`, `num_file`, `size`,
          `seeders`, `leechers`, `times_completed`, `user_id`, `created_at`, `updated_at`,
          `balance`, `balance_offset`),
  UPDATE (`seeders`, `leechers`, `times_completed`, `balance`, `updated_at`)
  ON `unit3d`.`torrents` TO 'tracker'@'localhost';

-- The tracker's rows: each flush reads them (locked) to credit from them,
-- then writes them.
GRANT SELECT, INSERT, UPDATE ON `unit3d`.`peers` TO 'tracker'@'localhost';
GRANT SELECT, INSERT, UPDATE ON `unit3d`.`history` TO 'tracker'@'localhost';
GRANT SELECT, INSERT, UPDATE ON `unit3d`.`unregistered_info_hashes` TO 'tracker'@'localhost';
GRANT SELECT, INSERT, UPDATE ON `unit3d`.`tracker_flushes` TO 'tracker'@'localhost';
