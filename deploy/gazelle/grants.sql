-- The grants this tracker's database user needs on a Gazelle site's
-- database, and no more. So far that is the load at start alone
-- (tracker-db/src/gazelle/load.rs: the queries Ocelot 2.1.3's src/db.cpp
-- runs at :90, :158, :202 and :227), hence only SELECT, and only on the
-- columns those queries name: unlike Ocelot's grants
-- (deploy/gazelle/ocelot-grants.sql), the tracker cannot read a user's
-- password hash, e-mail or anything else of users_main.
--
-- The writes' grants (users_leech_stats, torrents_leech_stats,
-- xbt_files_users, xbt_snatched, users_freeleeches) come with the Gazelle
-- adapter's flush, and will be added here with it.
--
-- How they are proven: tracker-db/tests/gazelle_load.rs creates a user
-- with exactly these lines on deploy/gazelle/schema.sql (loaded under
-- Gazelle's sql_mode), loads the site's records as it, and then, for each
-- column of each line in turn, revokes that one and sees the load refused
-- (last run with MariaDB 10.11).
--
-- Replace `gazelle` with the site's database and 'tracker'@'localhost'
-- with the tracker's user (CREATE USER 'tracker'@'localhost' IDENTIFIED BY ...).

-- The enabled users (Enabled = '1'): id, passkey, whether they may leech,
-- and whether their address is protected (Visible = '0' or IP = '127.0.0.1').
GRANT SELECT (`ID`, `torrent_pass`, `can_leech`, `Visible`, `IP`, `Enabled`)
  ON `gazelle`.`users_main` TO 'tracker'@'localhost';

-- The torrents that have a torrents_leech_stats row: id, info-hash, leech
-- type, and the snatches so far.
GRANT SELECT (`ID`, `info_hash`, `FreeTorrent`)
  ON `gazelle`.`torrents` TO 'tracker'@'localhost';
GRANT SELECT (`TorrentID`, `Snatched`)
  ON `gazelle`.`torrents_leech_stats` TO 'tracker'@'localhost';

-- The unexpired freeleech tokens: (user, torrent).
GRANT SELECT (`UserID`, `TorrentID`, `Expired`)
  ON `gazelle`.`users_freeleeches` TO 'tracker'@'localhost';

-- The client whitelist's peer-id prefixes, in the table's order.
GRANT SELECT (`id`, `peer_id`)
  ON `gazelle`.`xbt_client_whitelist` TO 'tracker'@'localhost';
