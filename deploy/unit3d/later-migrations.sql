-- UNIT3D-Community-Edition's migrations that come after its schema dump
-- (database/schema/mysql-schema.sql, whose last migration is
-- 2024_11_26_170256), as SQL, for the tables the tracker reads or writes:
-- users, groups, torrents, peers, history, featured_torrents,
-- freeleech_tokens, personal_freeleeches, blacklist_clients,
-- unregistered_info_hashes, and the tables whose foreign keys reference
-- users or torrents (they decide what the grants must cover).
--
-- One section per migration, each headed `-- migration: NAME`, every
-- later migration named, in order; those that touch none of these tables
-- have no statement. tracker-db's test on the real schema (UNIT3D_CE_SRC
-- names a checkout) loads the dump, then the sections after the dump's
-- last migration, and fails naming any migration of the checkout that is
-- not listed here: read it and add its section.
--
-- Checked against UNIT3D-Community-Edition 44a3aeac (2025-03-12).

-- migration: 2024_12_06_004504_add_soft_deletes_to_history_table
ALTER TABLE `history` ADD COLUMN `deleted_at` timestamp NULL DEFAULT NULL AFTER `updated_at`;

-- migration: 2024_12_09_175613_add_index_on_created_at_for_comments

-- migration: 2024_12_26_031647_bon_earnings_v2
-- (new tables bon_earnings and bon_earning_conditions; no key to users or
-- torrents)

-- migration: 2025_02_10_164236_drop_featured_column_from_torrents_table
ALTER TABLE `torrents` DROP COLUMN `featured`;

-- migration: 2025_02_17_074140_update_columns_to_boolean
-- (its tables tickets, comments, request_claims and reports are not ours)
ALTER TABLE `torrents`
  MODIFY `anon` tinyint(1) NOT NULL DEFAULT 0,
  MODIFY `sticky` tinyint(1) NOT NULL DEFAULT 0,
  MODIFY `personal_release` tinyint(1) NOT NULL DEFAULT 0;

-- migration: 2025_02_19_063416_create_index_on_reports_solved_snoozed_until

-- migration: 2025_02_23_221840_move_public_files_to_private
-- (files on disk only)

-- migration: 2025_03_06_143003_remove_sd_and_stream_from_torrents_table
ALTER TABLE `torrents` DROP COLUMN `sd`, DROP COLUMN `stream`;

-- migration: 2025_03_11_131917_create_igdb_games_tables
-- (new igdb_* tables; no key to users or torrents)
