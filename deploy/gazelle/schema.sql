-- Gazelle's tables that Ocelot (the tracker Gazelle sites run) reads and
-- writes, as Gazelle's own migrations leave them at OPSnet/Gazelle 71b4515
-- (2025-02-24): users_main, torrents, torrents_leech_stats,
-- users_leech_stats, xbt_files_users, xbt_snatched, users_freeleeches and
-- xbt_client_whitelist, plus torrents_group, the one further table a
-- foreign key among them names (torrents.GroupID). Every column, type,
-- NULL-ness, default, key, index and foreign key is Gazelle's; only the
-- collations differ (below). Not a site's full schema (Gazelle has 192
-- tables; 49 others have foreign keys to users_main or torrents).
-- Load it into an empty database: `mariadb DB < deploy/gazelle/schema.sql`,
-- then deploy/gazelle/whitelist-seed.sql for the client whitelist.
--
-- How it was made: by running the real migrations, not by hand. All 294
-- phinx migrations of misc/phinx/migrations/ (with phinx's 0.16 source of
-- 2024-10-17, efd7cf8; Gazelle's composer.lock pins 0.16.6) were applied
-- in order to an empty database on MariaDB 10.11.19, under
-- Gazelle's sql_mode (STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,
-- ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION) and with
-- LOCK_MY_DATABASE=1 FKEY_MY_DATABASE=1, as misc/docker/web/entrypoint.sh
-- runs them; then these tables were dumped (SHOW CREATE TABLE), one
-- migration at a time, to see which migration changed which table (each
-- table's comment lists them). What the run needed on MariaDB, none of it
-- touching these tables' definitions:
--   - utf8mb4_0900_ai_ci and utf8mb4_0900_as_ci (MySQL 8 only; Gazelle runs
--     Percona 8) were replaced by utf8mb4_uca1400_nopad_ai_ci and
--     utf8mb4_uca1400_nopad_as_ci, their nearest MariaDB equivalents (both
--     NO PAD, accent- and case-insensitive; MariaDB 11.4.5 and later
--     accept utf8mb4_0900_ai_ci as an alias of utf8mb4_uca1400_nopad_ai_ci).
--   - 20240420000000_torrents_requests_artists_cleanup drops a column that
--     is in torrents_artists' and requests_artists' primary keys; MariaDB
--     refuses that (1072), so the new primary keys were set first.
--   - 20250107000000_migrate_site_log inserts a wiki article whose author
--     is the highest-ranked user, and fails on a database with no user;
--     one user was inserted before it (and is not part of this file).
--   - 20220324185548_database_collation sends ~200 statements at once; on
--     a database made by the migrations, `alter table discogs_import`
--     fails (no migration creates that table), and the statements after
--     it, which set the collation of xbt_snatched among others, never run
--     (PDO does not report the error of a later statement of such a
--     batch, so the migration passes). Later migrations set the others'
--     collations again.
--
-- Collations (the deviations from Gazelle's MySQL 8 schema):
--   - Where Gazelle's tables and columns are utf8mb4_0900_ai_ci (all these
--     tables, since 20240904000000_table_collation_0900), this file has
--     utf8mb4_uca1400_nopad_ai_ci.
--   - xbt_snatched: 20220324185548_database_collation.php:12 converts it
--     with `CONVERT TO CHARACTER SET utf8mb4` and no collation, which is
--     utf8mb4_0900_ai_ci on MySQL 8 (that character set's default there)
--     but utf8mb4_general_ci on MariaDB; this file gives it
--     utf8mb4_uca1400_nopad_ai_ci like the others.
--   - users_main.nav_list is MySQL's json; MariaDB's json is this same
--     longtext with utf8mb4_bin and a json_valid check, as written below.
-- Integer display widths (int(11), int(10), bigint(12)) are what the
-- migrations asked for; MySQL 8 no longer shows them, and they change
-- nothing.

SET NAMES utf8mb4;

-- users_main: Ocelot reads ID, can_leech, torrent_pass, Visible, IP and
-- Enabled ('1' is enabled). Uploaded and Downloaded moved to
-- users_leech_stats; the columns of Gazelle's other user data are kept.
-- From misc/phinx/migrations/:
--   20180104060449_tables.php:6042-6274 (created)
--   20200219075508_drop_secret.php:17-20 (Title)
--   20200304112134_self_document_enums.php:7-18 (Enabled, Visible values)
--   20200314171641_migrate_leech_stat_tables.php:52-55 (Uploaded, Downloaded dropped)
--   20200427085116_index_refactor.php:257-260,433-435,531-550 (Class, key PassHash dropped)
--   20200511211633_drop_unused_indexes.php:63 (keys Invites, IP dropped)
--   20200521170814_extend_user_title.php:7-9 (title varchar(1024))
--   20200523094019_drop_user_main_columns.php:7-16
--   20220208091300_mysql_utf_8mb_4.php:52-61 (utf8mb4)
--   20220324114324_no_unsigned.php:453-456 (ID, Invites, PermissionID signed)
--   20230108132655_drop_user_main_secret.php:9 (Secret dropped)
--   20230417000000_db_updated_modified.php:29-32 (created, updated)
--   20230515000000_more_user_info_columns.php:9-19 (auth_key ... stylesheet_url)
--   20231216000000_drop_users_main_class.php:10-12 (Class dropped)
--   20240129000000_user_navigation_json.php:9-11 (nav_list)
--   20240904000000_table_collation_0900.php:162,729-750,834-881 (collation)
--   20241204000000_remove_mfa.php:11-14 (2FA_Key, Recovery dropped)
CREATE TABLE `users_main` (
  `ID` int(11) NOT NULL AUTO_INCREMENT,
  `Username` varchar(20) NOT NULL,
  `Email` varchar(255) NOT NULL,
  `PassHash` varchar(60) NOT NULL,
  `IRCKey` char(32) DEFAULT NULL,
  `IP` varchar(15) NOT NULL DEFAULT '0.0.0.0',
  `title` varchar(1024) DEFAULT NULL,
  `Enabled` enum('0','1','2','unconfirmed','enabled','disabled','banned') NOT NULL DEFAULT '0',
  `Paranoia` mediumtext DEFAULT NULL,
  `Visible` enum('0','1','yes','no') NOT NULL DEFAULT '1',
  `Invites` int(11) NOT NULL DEFAULT 0,
  `PermissionID` int(11) NOT NULL,
  `CustomPermissions` mediumtext DEFAULT NULL,
  `can_leech` tinyint(4) NOT NULL DEFAULT 1,
  `torrent_pass` char(32) NOT NULL,
  `RequiredRatio` double NOT NULL DEFAULT 0,
  `ipcc` varchar(2) NOT NULL DEFAULT '',
  `created` datetime NOT NULL DEFAULT current_timestamp(),
  `updated` datetime NOT NULL DEFAULT current_timestamp() ON UPDATE current_timestamp(),
  `auth_key` varchar(32) NOT NULL,
  `avatar` varchar(255) NOT NULL DEFAULT '',
  `collage_total` int(11) NOT NULL DEFAULT 0,
  `inviter_user_id` int(11) NOT NULL DEFAULT 0,
  `profile_info` text NOT NULL DEFAULT _utf8mb4'',
  `profile_title` varchar(255) NOT NULL DEFAULT '',
  `slogan` varchar(255) DEFAULT NULL,
  `stylesheet_id` int(11) NOT NULL,
  `stylesheet_url` varchar(255) DEFAULT NULL,
  `nav_list` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL CHECK (json_valid(`nav_list`)),
  PRIMARY KEY (`ID`),
  UNIQUE KEY `Username` (`Username`),
  KEY `Email` (`Email`),
  KEY `Enabled` (`Enabled`),
  KEY `torrent_pass` (`torrent_pass`),
  KEY `RequiredRatio` (`RequiredRatio`),
  KEY `cc_index` (`ipcc`),
  KEY `PermissionID` (`PermissionID`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_uca1400_nopad_ai_ci ROW_FORMAT=DYNAMIC;

-- torrents_group: here only because torrents.GroupID references it (no
-- foreign key of its own). From misc/phinx/migrations/:
--   20180104060449_tables.php:5731-5842 (created)
--   20200219075508_drop_secret.php:44-46 (TagList default)
--   20200427085116_index_refactor.php:197-210,531-550 (CatalogueNumber, RecordLabel, ReleaseType)
--   20200511211633_drop_unused_indexes.php:52 (keys RevisionID, Time dropped)
--   20200601124602_no_zerodate_torrents_group.php:7-9 (Time)
--   20211017150016_drop_torrent_group_artist.php:20-25 (ArtistID dropped, NOT NULLs, utf8mb4)
--   20230417000000_db_updated_modified.php:21-24 (created, updated)
--   20240904000000_table_collation_0900.php:124,654-661,834-881 (collation)
CREATE TABLE `torrents_group` (
  `ID` int(10) NOT NULL AUTO_INCREMENT,
  `CategoryID` int(3) NOT NULL,
  `Name` varchar(300) NOT NULL,
  `Year` int(4) DEFAULT NULL,
  `CatalogueNumber` varchar(80) DEFAULT NULL,
  `RecordLabel` varchar(80) DEFAULT NULL,
  `ReleaseType` tinyint(2) DEFAULT 21,
  `TagList` varchar(500) NOT NULL DEFAULT '',
  `Time` datetime NOT NULL DEFAULT current_timestamp(),
  `RevisionID` int(12) DEFAULT NULL,
  `WikiBody` mediumtext NOT NULL,
  `WikiImage` varchar(255) NOT NULL,
  `VanityHouse` tinyint(1) DEFAULT 0,
  `created` datetime NOT NULL DEFAULT current_timestamp(),
  `updated` datetime NOT NULL DEFAULT current_timestamp() ON UPDATE current_timestamp(),
  PRIMARY KEY (`ID`),
  KEY `CategoryID` (`CategoryID`),
  KEY `Name` (`Name`(255)),
  KEY `Year` (`Year`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_uca1400_nopad_ai_ci ROW_FORMAT=DYNAMIC;

-- torrents: Ocelot reads ID, info_hash (20 bytes, unique) and FreeTorrent
-- ('0' normal, '1' free, '2' neutral), and runs `DELETE FROM torrents WHERE
-- info_hash = ''`. Seeders, Leechers, Snatched, balance and last_action
-- moved to torrents_leech_stats. From misc/phinx/migrations/:
--   20180104060449_tables.php:6783-7033 (created)
--   20200314171641_migrate_leech_stat_tables.php:38-44 (counts moved out)
--   20200511211633_drop_unused_indexes.php:50 (keys FileCount, Size, Year dropped)
--   20210103152728_index_torrent_path.php:21-23 (t_filepath_idx)
--   20210612171704_torrent_not_null.php:15-19 (UserID, time NOT NULL; TranscodedFrom dropped)
--   20211221221145_torrents_fkey.php:10-15 (foreign keys; key Media dropped)
--   20220208091300_mysql_utf_8mb_4.php:52-54 (utf8mb4)
--   20220210082532_more_table_defaults.php:34-36 (Media NOT NULL '')
--   20220324114324_no_unsigned.php:49-50,369-370,534-535 (UserID signed; foreign keys again)
--   20230417000000_db_updated_modified.php:13-16 (created, updated)
--   20240424000000_torrent_binary_infohash.php:10-12 (info_hash blob -> binary(20))
--   20240812000000_torrent_last_reseed_request.php:9 (t_lrr_idx)
--   20240904000000_table_collation_0900.php:122,632-650,834-881 (collation; HasLogDB default '1')
CREATE TABLE `torrents` (
  `ID` int(10) NOT NULL AUTO_INCREMENT,
  `GroupID` int(10) NOT NULL,
  `UserID` int(11) NOT NULL,
  `Media` varchar(20) NOT NULL DEFAULT '',
  `Format` varchar(10) DEFAULT NULL,
  `Encoding` varchar(15) DEFAULT NULL,
  `Remastered` enum('0','1') NOT NULL DEFAULT '0',
  `RemasterYear` int(4) DEFAULT NULL,
  `RemasterTitle` varchar(80) NOT NULL DEFAULT '',
  `RemasterCatalogueNumber` varchar(80) NOT NULL DEFAULT '',
  `RemasterRecordLabel` varchar(80) NOT NULL DEFAULT '',
  `Scene` enum('0','1') NOT NULL DEFAULT '0',
  `HasLog` enum('0','1') NOT NULL DEFAULT '0',
  `HasCue` enum('0','1') NOT NULL DEFAULT '0',
  `HasLogDB` enum('0','1') NOT NULL DEFAULT '1',
  `LogScore` int(6) NOT NULL DEFAULT 0,
  `LogChecksum` enum('0','1') NOT NULL DEFAULT '1',
  `info_hash` binary(20) NOT NULL,
  `FileCount` int(6) NOT NULL,
  `FileList` longtext NOT NULL,
  `FilePath` varchar(255) NOT NULL DEFAULT '',
  `Size` bigint(12) NOT NULL,
  `FreeTorrent` enum('0','1','2') NOT NULL DEFAULT '0',
  `FreeLeechType` enum('0','1','2','3','4','5','6','7') NOT NULL DEFAULT '0',
  `time` datetime NOT NULL DEFAULT current_timestamp(),
  `Description` mediumtext DEFAULT NULL,
  `LastReseedRequest` datetime DEFAULT NULL,
  `created` datetime NOT NULL DEFAULT current_timestamp(),
  `updated` datetime NOT NULL DEFAULT current_timestamp() ON UPDATE current_timestamp(),
  PRIMARY KEY (`ID`),
  UNIQUE KEY `InfoHash` (`info_hash`),
  KEY `GroupID` (`GroupID`),
  KEY `UserID` (`UserID`),
  KEY `Format` (`Format`),
  KEY `Encoding` (`Encoding`),
  KEY `Time` (`time`),
  KEY `FreeTorrent` (`FreeTorrent`),
  KEY `t_filepath_idx` (`FilePath`),
  KEY `t_lrr_idx` (`LastReseedRequest`),
  CONSTRAINT `torrents_ibfk_1` FOREIGN KEY (`GroupID`) REFERENCES `torrents_group` (`ID`),
  CONSTRAINT `torrents_ibfk_2` FOREIGN KEY (`UserID`) REFERENCES `users_main` (`ID`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_uca1400_nopad_ai_ci ROW_FORMAT=DYNAMIC;

-- torrents_leech_stats: one row per torrent (Ocelot serves only torrents
-- that have one); Ocelot writes Seeders, Leechers, Snatched (added to),
-- Balance (overwritten) and last_action. The foreign key was created ON
-- DELETE CASCADE and re-created without it by no_unsigned: a row naming a
-- TorrentID not in torrents is refused, and so is deleting a torrent that
-- still has its row (Gazelle moves the row to deleted_torrents_leech_stats
-- first). From misc/phinx/migrations/:
--   20190422111146_torrent_stats_tables.php:16-28 (created)
--   20200511211633_drop_unused_indexes.php:53 (tls_leechers_idx dropped)
--   20220324114324_no_unsigned.php:52,375-379,538 (signed; foreign key without cascade)
--   20240904000000_table_collation_0900.php:125,834-881 (collation)
CREATE TABLE `torrents_leech_stats` (
  `TorrentID` int(10) NOT NULL,
  `Seeders` int(11) NOT NULL DEFAULT 0,
  `Leechers` int(11) NOT NULL DEFAULT 0,
  `Snatched` int(11) NOT NULL DEFAULT 0,
  `Balance` bigint(20) NOT NULL DEFAULT 0,
  `last_action` datetime DEFAULT NULL,
  PRIMARY KEY (`TorrentID`),
  KEY `tls_seeders_idx` (`Seeders`),
  KEY `tls_snatched_idx` (`Snatched`),
  KEY `tls_last_action_idx` (`last_action`),
  CONSTRAINT `torrents_leech_stats_ibfk_1` FOREIGN KEY (`TorrentID`) REFERENCES `torrents` (`ID`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_uca1400_nopad_ai_ci;

-- users_leech_stats: a user's credited bytes, which Ocelot adds to. From
-- misc/phinx/migrations/:
--   20190422111146_torrent_stats_tables.php:7-14 (created)
--   20200511211633_drop_unused_indexes.php:62 (uls_uploaded_idx dropped)
--   20200905163947_user_delete.php:13-14 (foreign key cascades)
--   20220324114324_no_unsigned.php:72,444-447,558 (signed; foreign key without cascade)
--   20230320000000_user_delete_cascade.php:9,34-37 (foreign key cascades again)
--   20240904000000_table_collation_0900.php:160,834-881 (collation)
CREATE TABLE `users_leech_stats` (
  `UserID` int(11) NOT NULL,
  `Uploaded` bigint(20) NOT NULL DEFAULT 0,
  `Downloaded` bigint(20) NOT NULL DEFAULT 0,
  PRIMARY KEY (`UserID`),
  KEY `uls_downloaded_idx` (`Downloaded`),
  CONSTRAINT `users_leech_stats_ibfk_1` FOREIGN KEY (`UserID`) REFERENCES `users_main` (`ID`) ON DELETE CASCADE ON UPDATE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_uca1400_nopad_ai_ci;

-- xbt_files_users: one row per (torrent, user, peer_id); Ocelot truncates
-- it at start and upserts it. ip is varchar(15) and useragent varchar(51):
-- under the strict sql_mode a longer value (an IPv6 address, a long
-- user agent) fails the whole statement. No foreign key. From
-- misc/phinx/migrations/:
--   20180104060449_tables.php:2338-2449 (created)
--   20200427085116_index_refactor.php:262-265,463-476,531-550 (peer_id default; keys)
--   20200912152611_xfu_by_uid.php:17-19 (xfu_uid_idx)
--   20210116174853_index_xbt_files_users.php:20-26 (primary key (fid, uid, peer_id))
--   20211224171515_xfu_ip.php:10-12 (xfu_ip_idx)
--   20220208091300_mysql_utf_8mb_4.php:52-54 (utf8mb4)
--   20220324114324_no_unsigned.php:487-490 (upspeed, downspeed, timespent signed)
--   20240904000000_table_collation_0900.php:183,819-822,834-881 (collation)
CREATE TABLE `xbt_files_users` (
  `uid` int(11) NOT NULL,
  `active` tinyint(1) NOT NULL DEFAULT 1,
  `announced` int(11) NOT NULL DEFAULT 0,
  `completed` tinyint(1) NOT NULL DEFAULT 0,
  `downloaded` bigint(20) NOT NULL DEFAULT 0,
  `remaining` bigint(20) NOT NULL DEFAULT 0,
  `uploaded` bigint(20) NOT NULL DEFAULT 0,
  `upspeed` int(11) NOT NULL DEFAULT 0,
  `downspeed` int(11) NOT NULL DEFAULT 0,
  `corrupt` bigint(20) NOT NULL DEFAULT 0,
  `timespent` int(11) NOT NULL DEFAULT 0,
  `useragent` varchar(51) NOT NULL DEFAULT '',
  `connectable` tinyint(4) NOT NULL DEFAULT 1,
  `peer_id` binary(20) NOT NULL DEFAULT '\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0',
  `fid` int(11) NOT NULL,
  `mtime` int(11) NOT NULL DEFAULT 0,
  `ip` varchar(15) NOT NULL DEFAULT '',
  PRIMARY KEY (`fid`,`uid`,`peer_id`),
  KEY `mtime_idx` (`mtime`),
  KEY `uid_active_remain_mtime_idx` (`uid`,`active`,`remaining`,`mtime`),
  KEY `remain_mtime_idx` (`remaining`,`mtime`),
  KEY `xfu_ip_idx` (`ip`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_uca1400_nopad_ai_ci ROW_FORMAT=DYNAMIC;

-- xbt_snatched: one row per completion; no unique key but the
-- auto-increment id, so every completion is a row. IP is varchar(15) with
-- no default. No foreign key. Collation: see the header. From
-- misc/phinx/migrations/:
--   20180104060449_tables.php:874-918 (created)
--   20200511211633_drop_unused_indexes.php:70 (key tstamp dropped)
--   20220208091300_mysql_utf_8mb_4.php:52-54 (utf8mb4)
--   20220324185548_database_collation.php:12 (converted to utf8mb4's default collation)
--   20231003000000_final_table_pks.php:37-40 (xbt_snatched_id, primary key)
CREATE TABLE `xbt_snatched` (
  `uid` int(11) NOT NULL DEFAULT 0,
  `tstamp` int(11) NOT NULL,
  `fid` int(11) NOT NULL,
  `IP` varchar(15) NOT NULL,
  `seedtime` int(11) NOT NULL DEFAULT 0,
  `xbt_snatched_id` int(11) NOT NULL AUTO_INCREMENT,
  PRIMARY KEY (`xbt_snatched_id`),
  KEY `fid` (`fid`),
  KEY `uid_tstamp` (`uid`,`tstamp`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_uca1400_nopad_ai_ci ROW_FORMAT=DYNAMIC;

-- users_freeleeches: a user's freeleech tokens on torrents; Ocelot reads
-- the unexpired ones and adds to Downloaded. Time is NOT NULL with no
-- default, so an INSERT that names no Time fails under the strict
-- sql_mode: Ocelot's own INSERT ... ON DUPLICATE KEY UPDATE names none and
-- is refused (1364) even when every row it names exists. No foreign key.
-- From misc/phinx/migrations/:
--   20180104060449_tables.php:442-484 (created)
--   20200511211633_drop_unused_indexes.php:59 (key Time dropped)
--   20240904000000_table_collation_0900.php:153,834-881 (utf8mb3 -> collation)
CREATE TABLE `users_freeleeches` (
  `UserID` int(10) NOT NULL,
  `TorrentID` int(10) NOT NULL,
  `Time` datetime NOT NULL,
  `Expired` tinyint(1) NOT NULL DEFAULT 0,
  `Downloaded` bigint(20) NOT NULL DEFAULT 0,
  `Uses` int(10) NOT NULL DEFAULT 1,
  PRIMARY KEY (`UserID`,`TorrentID`),
  KEY `Expired_Time` (`Expired`,`Time`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_uca1400_nopad_ai_ci ROW_FORMAT=DYNAMIC;

-- xbt_client_whitelist: peer_id prefixes of the allowed clients (an empty
-- table allows every client). vstring's default '' was lost in the 0900
-- migration's MODIFY, which names no default. From misc/phinx/migrations/:
--   20180104060449_tables.php:1340-1373 (created)
--   20220208091300_mysql_utf_8mb_4.php:52-54 (utf8mb4)
--   20220324114324_no_unsigned.php:484-485 (id signed)
--   20240904000000_table_collation_0900.php:182,815-818,834-881 (collation; vstring DEFAULT NULL)
CREATE TABLE `xbt_client_whitelist` (
  `id` int(11) NOT NULL AUTO_INCREMENT,
  `peer_id` varchar(20) DEFAULT NULL,
  `vstring` varchar(200) DEFAULT NULL,
  PRIMARY KEY (`id`),
  UNIQUE KEY `peer_id` (`peer_id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_uca1400_nopad_ai_ci ROW_FORMAT=DYNAMIC;
