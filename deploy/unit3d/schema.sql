-- The part of UNIT3D's schema that the tracker reads or writes, for the
-- tests and benchmarks of private mode: not a site's full schema. Taken
-- from UNIT3D's database/schema/mysql-schema.sql (the dump after migration
-- 2025_11_18): the same columns, types, defaults, primary and unique keys
-- and indexes; foreign keys only among these tables (the ones to
-- categories, types and resolutions are left out), and two stand-ins at
-- the end for the site's tables that reference users and torrents.
-- Load it into an empty database: `mariadb DB < deploy/unit3d/schema.sql`,
-- then deploy/unit3d/tracker.sql for the tracker's own table.

SET NAMES utf8mb4;

CREATE TABLE `users` (
  `id` int unsigned NOT NULL AUTO_INCREMENT,
  `username` varchar(255) NOT NULL,
  `email` varchar(255) NOT NULL,
  `password` varchar(255) NOT NULL,
  `two_factor_secret` text,
  `two_factor_recovery_codes` text,
  `two_factor_confirmed_at` timestamp NULL DEFAULT NULL,
  `passkey` varchar(255) NOT NULL,
  `group_id` int NOT NULL,
  `uploaded` bigint unsigned NOT NULL DEFAULT 0,
  `downloaded` bigint unsigned NOT NULL DEFAULT 0,
  `image` varchar(255) DEFAULT NULL,
  `icon` varchar(255) DEFAULT NULL,
  `title` varchar(255) DEFAULT NULL,
  `about` mediumtext,
  `signature` text,
  `fl_tokens` int unsigned NOT NULL DEFAULT 0,
  `seedbonus` decimal(12,2) NOT NULL DEFAULT 0.00,
  `invites` int unsigned NOT NULL DEFAULT 0,
  `hitandruns` int unsigned NOT NULL DEFAULT 0,
  `rsskey` varchar(255) NOT NULL,
  `chatroom_id` int unsigned NOT NULL DEFAULT 1,
  `read_rules` tinyint(1) NOT NULL DEFAULT 0,
  `can_chat` tinyint(1) DEFAULT NULL,
  `can_comment` tinyint(1) DEFAULT NULL,
  `can_download` tinyint(1) NOT NULL DEFAULT 1,
  `can_invite` tinyint(1) DEFAULT NULL,
  `can_request` tinyint(1) DEFAULT NULL,
  `can_upload` tinyint(1) DEFAULT NULL,
  `is_donor` tinyint(1) NOT NULL DEFAULT 0,
  `is_lifetime` tinyint(1) NOT NULL DEFAULT 0,
  `remember_token` varchar(255) DEFAULT NULL,
  `api_token` varchar(100) DEFAULT NULL,
  `last_login` datetime DEFAULT NULL,
  `last_action` datetime DEFAULT NULL,
  `disabled_at` datetime DEFAULT NULL,
  `deleted_by` int unsigned DEFAULT NULL,
  `created_at` timestamp NULL DEFAULT NULL,
  `updated_at` timestamp NULL DEFAULT NULL,
  `chat_status_id` int unsigned NOT NULL DEFAULT 1,
  `deleted_at` timestamp NULL DEFAULT NULL,
  `own_flushes` tinyint NOT NULL DEFAULT 2,
  `email_verified_at` timestamp NULL DEFAULT NULL,
  PRIMARY KEY (`id`),
  UNIQUE KEY `users_username_unique` (`username`),
  UNIQUE KEY `users_passkey_unique` (`passkey`),
  UNIQUE KEY `users_rsskey_unique` (`rsskey`),
  UNIQUE KEY `users_api_token_unique` (`api_token`),
  KEY `fk_users_groups_idx` (`group_id`),
  KEY `users_read_rules_index` (`read_rules`),
  KEY `users_deleted_at_index` (`deleted_at`),
  KEY `users_deleted_by_foreign` (`deleted_by`),
  CONSTRAINT `users_deleted_by_foreign` FOREIGN KEY (`deleted_by`)
    REFERENCES `users` (`id`) ON UPDATE CASCADE,
  CONSTRAINT `check_users_seedbonus` CHECK (`seedbonus` >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE `groups` (
  `id` int NOT NULL AUTO_INCREMENT,
  `name` varchar(255) NOT NULL,
  `slug` varchar(255) NOT NULL,
  `position` int NOT NULL,
  `level` int NOT NULL DEFAULT 0,
  `download_slots` int DEFAULT NULL,
  `description` varchar(255) DEFAULT NULL,
  `color` varchar(255) NOT NULL,
  `icon` varchar(255) NOT NULL,
  `effect` varchar(255) NOT NULL DEFAULT 'none',
  `is_uploader` tinyint(1) NOT NULL DEFAULT 0,
  `is_internal` tinyint(1) NOT NULL DEFAULT 0,
  `is_editor` tinyint(1) NOT NULL DEFAULT 0,
  `is_torrent_modo` tinyint(1) NOT NULL DEFAULT 0,
  `is_owner` tinyint(1) NOT NULL DEFAULT 0,
  `is_admin` tinyint(1) NOT NULL DEFAULT 0,
  `is_modo` tinyint(1) NOT NULL DEFAULT 0,
  `is_trusted` tinyint(1) NOT NULL DEFAULT 0,
  `is_immune` tinyint(1) NOT NULL DEFAULT 0,
  `is_freeleech` tinyint(1) NOT NULL DEFAULT 0,
  `is_double_upload` tinyint(1) NOT NULL DEFAULT 0,
  `is_refundable` tinyint(1) NOT NULL DEFAULT 0,
  `can_chat` tinyint(1) NOT NULL,
  `can_comment` tinyint(1) NOT NULL,
  `can_invite` tinyint(1) NOT NULL,
  `can_request` tinyint(1) NOT NULL,
  `can_upload` tinyint(1) NOT NULL DEFAULT 1,
  `is_incognito` tinyint(1) NOT NULL DEFAULT 0,
  `autogroup` tinyint(1) NOT NULL DEFAULT 0,
  `min_uploaded` bigint unsigned DEFAULT NULL,
  `min_seedsize` bigint unsigned DEFAULT NULL,
  `min_avg_seedtime` bigint unsigned DEFAULT NULL,
  `min_ratio` decimal(4,2) DEFAULT NULL,
  `min_age` bigint unsigned DEFAULT NULL,
  `system_required` tinyint(1) NOT NULL DEFAULT 0,
  `min_uploads` bigint unsigned DEFAULT NULL,
  PRIMARY KEY (`id`),
  UNIQUE KEY `groups_slug_unique` (`slug`),
  KEY `groups_download_slots_index` (`download_slots`),
  KEY `groups_is_editor_index` (`is_editor`),
  KEY `groups_is_torrent_modo_index` (`is_torrent_modo`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- info_hash is indexed but not unique: several rows may share one (the
-- tracker keeps one per info-hash, as UNIT3D-Announce does).
CREATE TABLE `torrents` (
  `id` int unsigned NOT NULL AUTO_INCREMENT,
  `name` varchar(255) NOT NULL,
  `description` text NOT NULL,
  `mediainfo` longtext,
  `bdinfo` longtext,
  `file_name` varchar(255) NOT NULL,
  `num_file` int NOT NULL,
  `folder` varchar(255) DEFAULT NULL,
  `size` double NOT NULL,
  `nfo` blob,
  `leechers` int NOT NULL DEFAULT 0,
  `seeders` int NOT NULL DEFAULT 0,
  `times_completed` int NOT NULL DEFAULT 0,
  `category_id` smallint unsigned DEFAULT NULL,
  `user_id` int unsigned NOT NULL,
  `tmdb_movie_id` int unsigned DEFAULT NULL,
  `tmdb_tv_id` int unsigned DEFAULT NULL,
  `imdb` int unsigned DEFAULT NULL,
  `tvdb` int unsigned DEFAULT NULL,
  `mal` int unsigned DEFAULT NULL,
  `igdb` int unsigned DEFAULT NULL,
  `season_number` int DEFAULT NULL,
  `episode_number` int DEFAULT NULL,
  `free` smallint NOT NULL DEFAULT 0,
  `doubleup` tinyint(1) NOT NULL DEFAULT 0,
  `refundable` tinyint(1) NOT NULL DEFAULT 0,
  `highspeed` tinyint(1) NOT NULL DEFAULT 0,
  `status` smallint NOT NULL DEFAULT 0,
  `moderated_at` datetime DEFAULT NULL,
  `moderated_by` int DEFAULT NULL,
  `anon` tinyint(1) NOT NULL DEFAULT 0,
  `sticky` tinyint(1) NOT NULL DEFAULT 0,
  `internal` tinyint(1) NOT NULL DEFAULT 0,
  `created_at` timestamp NULL DEFAULT NULL,
  `updated_at` timestamp NULL DEFAULT NULL,
  `bumped_at` datetime DEFAULT NULL,
  `deleted_at` timestamp NULL DEFAULT NULL,
  `fl_until` datetime DEFAULT NULL,
  `du_until` datetime DEFAULT NULL,
  `type_id` smallint unsigned DEFAULT NULL,
  `resolution_id` smallint unsigned DEFAULT NULL,
  `distributor_id` int DEFAULT NULL,
  `region_id` int DEFAULT NULL,
  `personal_release` tinyint(1) NOT NULL DEFAULT 0,
  `balance` bigint NOT NULL DEFAULT 0,
  `balance_offset` bigint NOT NULL DEFAULT 0,
  `balance_reset_at` timestamp NULL DEFAULT NULL,
  `info_hash` binary(20) NOT NULL,
  PRIMARY KEY (`id`),
  KEY `name` (`name`),
  KEY `fk_table1_categories1_idx` (`category_id`),
  KEY `imdb` (`imdb`),
  KEY `tvdb` (`tvdb`),
  KEY `mal` (`mal`),
  KEY `moderated_by` (`moderated_by`),
  KEY `torrents_igdb_index` (`igdb`),
  KEY `torrents_type_id_index` (`type_id`),
  KEY `torrents_resolution_id_index` (`resolution_id`),
  KEY `torrents_personal_release_index` (`personal_release`),
  KEY `torrents_distributor_id_index` (`distributor_id`),
  KEY `torrents_region_id_index` (`region_id`),
  KEY `torrents_status_index` (`status`),
  KEY `torrents_seeders_index` (`seeders`),
  KEY `torrents_leechers_index` (`leechers`),
  KEY `torrents_sticky_index` (`sticky`),
  KEY `torrents_created_at_index` (`created_at`),
  KEY `torrents_bumped_at_index` (`bumped_at`),
  KEY `torrents_season_number_index` (`season_number`),
  KEY `torrents_episode_number_index` (`episode_number`),
  KEY `torrents_idx_status_resolut_created` (`status`, `resolution_id`, `created_at`),
  KEY `torrents_idx_status_catego_sticky_bumped` (`status`, `category_id`, `sticky`, `bumped_at`),
  KEY `torrents_idx_sticky_bumped_at` (`sticky`, `bumped_at`),
  KEY `torrents_idx_status_info_hash` (`status`),
  KEY `torrents_fl_until_du_until_index` (`fl_until`, `du_until`),
  KEY `torrents_info_hash_index` (`info_hash`),
  KEY `torrents_user_id_anon_status_created_at_index` (`user_id`, `anon`, `status`, `created_at`),
  KEY `torrents_status_sticky_created_at_index` (`status`, `sticky`, `created_at`),
  KEY `torrents_user_id_status_anon_deleted_at_index` (`user_id`, `status`, `anon`, `deleted_at`),
  KEY `torrents_name_index` (`name`),
  KEY `torrents_category_id_status_deleted_at_movie_id_size_index`
    (`category_id`, `status`, `deleted_at`, `tmdb_movie_id`, `size`),
  KEY `torrents_category_id_status_deleted_at_tv_id_size_index`
    (`category_id`, `status`, `deleted_at`, `tmdb_tv_id`, `size`),
  KEY `torrents_movie_id_index` (`tmdb_movie_id`),
  KEY `torrents_tv_id_index` (`tmdb_tv_id`),
  CONSTRAINT `torrents_user_id_foreign` FOREIGN KEY (`user_id`)
    REFERENCES `users` (`id`) ON UPDATE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- ip: the address's raw bytes, 4 for IPv4 and 16 for IPv6.
CREATE TABLE `peers` (
  `peer_id` binary(20) NOT NULL,
  `ip` varbinary(16) NOT NULL,
  `port` smallint unsigned NOT NULL,
  `agent` varchar(64) NOT NULL,
  `uploaded` bigint unsigned NOT NULL,
  `downloaded` bigint unsigned NOT NULL,
  `left` bigint unsigned NOT NULL,
  `seeder` tinyint(1) NOT NULL,
  `created_at` timestamp NULL DEFAULT NULL,
  `updated_at` timestamp NULL DEFAULT NULL,
  `torrent_id` int unsigned NOT NULL,
  `user_id` int unsigned NOT NULL,
  `connectable` tinyint(1) NOT NULL DEFAULT 0,
  `active` tinyint(1) NOT NULL,
  `visible` tinyint(1) NOT NULL,
  PRIMARY KEY (`user_id`, `torrent_id`, `peer_id`),
  KEY `peers_idx_seeder_user_id` (`seeder`, `user_id`),
  KEY `peers_torrent_id_foreign` (`torrent_id`),
  KEY `peers_active_index` (`active`),
  CONSTRAINT `peers_torrent_id_foreign` FOREIGN KEY (`torrent_id`)
    REFERENCES `torrents` (`id`) ON DELETE CASCADE ON UPDATE CASCADE,
  CONSTRAINT `peers_user_id_foreign` FOREIGN KEY (`user_id`)
    REFERENCES `users` (`id`) ON UPDATE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE `history` (
  `user_id` int unsigned NOT NULL,
  `torrent_id` int unsigned NOT NULL,
  `agent` varchar(64) NOT NULL,
  `uploaded` bigint unsigned NOT NULL DEFAULT 0,
  `actual_uploaded` bigint unsigned NOT NULL DEFAULT 0,
  `client_uploaded` bigint unsigned NOT NULL,
  `downloaded` bigint unsigned NOT NULL DEFAULT 0,
  `refunded_download` bigint unsigned NOT NULL DEFAULT 0,
  `actual_downloaded` bigint unsigned NOT NULL DEFAULT 0,
  `client_downloaded` bigint unsigned NOT NULL,
  `seeder` tinyint(1) NOT NULL,
  `active` tinyint(1) NOT NULL DEFAULT 1,
  `seedtime` bigint unsigned NOT NULL DEFAULT 0,
  `immune` tinyint(1) NOT NULL,
  `hitrun` tinyint(1) NOT NULL DEFAULT 0,
  `prewarned_at` timestamp NULL DEFAULT NULL,
  `created_at` timestamp NULL DEFAULT NULL,
  `updated_at` timestamp NULL DEFAULT NULL,
  `deleted_at` timestamp NULL DEFAULT NULL,
  `completed_at` datetime DEFAULT NULL,
  PRIMARY KEY (`user_id`, `torrent_id`),
  KEY `history_user_id_foreign` (`user_id`),
  KEY `history_immune_index` (`immune`),
  KEY `history_hitrun_index` (`hitrun`),
  KEY `history_user_id_torrent_id_index` (`user_id`, `torrent_id`),
  KEY `history_idx_prewa_hitru_immun_activ_actua`
    (`prewarned_at`, `hitrun`, `immune`, `active`, `actual_downloaded`),
  KEY `history_torrent_id_completed_at_created_at_index` (`torrent_id`, `completed_at`, `created_at`),
  CONSTRAINT `history_torrent_id_foreign` FOREIGN KEY (`torrent_id`)
    REFERENCES `torrents` (`id`) ON DELETE CASCADE ON UPDATE CASCADE,
  CONSTRAINT `history_user_id_foreign` FOREIGN KEY (`user_id`)
    REFERENCES `users` (`id`) ON UPDATE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE `blacklist_clients` (
  `id` bigint unsigned NOT NULL AUTO_INCREMENT,
  `name` varchar(255) NOT NULL,
  `reason` longtext,
  `created_at` timestamp NULL DEFAULT NULL,
  `updated_at` timestamp NULL DEFAULT NULL,
  `peer_id_prefix` varchar(255) NOT NULL,
  PRIMARY KEY (`id`),
  UNIQUE KEY `blacklist_clients_name_unique` (`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- No unique key on (user_id, torrent_id): a pair may repeat.
CREATE TABLE `freeleech_tokens` (
  `id` int unsigned NOT NULL AUTO_INCREMENT,
  `user_id` int unsigned NOT NULL,
  `torrent_id` int unsigned NOT NULL,
  `created_at` timestamp NULL DEFAULT NULL,
  `updated_at` timestamp NULL DEFAULT NULL,
  PRIMARY KEY (`id`),
  KEY `freeleech_tokens_user_id_foreign` (`user_id`),
  KEY `freeleech_tokens_torrent_id_foreign` (`torrent_id`),
  CONSTRAINT `freeleech_tokens_torrent_id_foreign` FOREIGN KEY (`torrent_id`)
    REFERENCES `torrents` (`id`) ON DELETE CASCADE ON UPDATE CASCADE,
  CONSTRAINT `freeleech_tokens_user_id_foreign` FOREIGN KEY (`user_id`)
    REFERENCES `users` (`id`) ON UPDATE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE `personal_freeleeches` (
  `id` int unsigned NOT NULL AUTO_INCREMENT,
  `user_id` int unsigned NOT NULL,
  `created_at` timestamp NULL DEFAULT NULL,
  `updated_at` timestamp NULL DEFAULT NULL,
  PRIMARY KEY (`id`),
  KEY `personal_freeleech_user_id_foreign` (`user_id`),
  CONSTRAINT `personal_freeleech_user_id_foreign` FOREIGN KEY (`user_id`)
    REFERENCES `users` (`id`) ON UPDATE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE `featured_torrents` (
  `id` int unsigned NOT NULL AUTO_INCREMENT,
  `user_id` int unsigned NOT NULL,
  `torrent_id` int unsigned NOT NULL,
  `created_at` timestamp NULL DEFAULT NULL,
  `updated_at` timestamp NULL DEFAULT NULL,
  PRIMARY KEY (`id`),
  KEY `featured_torrents_user_id_foreign` (`user_id`),
  KEY `featured_torrents_torrent_id_foreign` (`torrent_id`),
  CONSTRAINT `featured_torrents_torrent_id_foreign` FOREIGN KEY (`torrent_id`)
    REFERENCES `torrents` (`id`) ON DELETE CASCADE ON UPDATE CASCADE,
  CONSTRAINT `featured_torrents_user_id_foreign` FOREIGN KEY (`user_id`)
    REFERENCES `users` (`id`) ON UPDATE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE `unregistered_info_hashes` (
  `user_id` int unsigned NOT NULL,
  `info_hash` binary(20) NOT NULL,
  `created_at` timestamp NULL DEFAULT NULL,
  `updated_at` timestamp NULL DEFAULT NULL,
  PRIMARY KEY (`info_hash`, `user_id`),
  KEY `unregistered_info_hashes_user_id_foreign` (`user_id`),
  CONSTRAINT `unregistered_info_hashes_user_id_foreign` FOREIGN KEY (`user_id`)
    REFERENCES `users` (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Two stand-ins, keys only, for the site's many tables whose foreign keys
-- reference users and torrents (UNIT3D has 88 and 17, most ON UPDATE
-- CASCADE). grants.sql grants nothing on them, as on a site: a statement
-- that makes the server ask for them (MariaDB does, for a prepared
-- multi-table UPDATE of users or torrents) fails tracker-db's grants test
-- here as it would fail a site's start.
CREATE TABLE `apikeys` (
  `id` int unsigned NOT NULL AUTO_INCREMENT,
  `user_id` int unsigned NOT NULL,
  PRIMARY KEY (`id`),
  KEY `apikeys_user_id_foreign` (`user_id`),
  CONSTRAINT `apikeys_user_id_foreign` FOREIGN KEY (`user_id`)
    REFERENCES `users` (`id`) ON UPDATE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE `files` (
  `id` bigint unsigned NOT NULL AUTO_INCREMENT,
  `torrent_id` int unsigned NOT NULL,
  PRIMARY KEY (`id`),
  KEY `files_torrent_id_foreign` (`torrent_id`),
  CONSTRAINT `files_torrent_id_foreign` FOREIGN KEY (`torrent_id`)
    REFERENCES `torrents` (`id`) ON DELETE CASCADE ON UPDATE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
